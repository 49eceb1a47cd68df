/* moe_grid.h: the bound on a routed launch's work items that sizes its grid (moe_expert.cu routed_grid), in plain C
 * so a CPU test can check it against a search (tests/kernels/test_moe_grid.c). */
#ifndef SLUICE_MOE_GRID_H
#define SLUICE_MOE_GRID_H

/* The most items per row group that P (token, expert) pairs can make in a launch whose experts have nmin..T tokens
 * each, an expert of n tokens making ceil(n / c) items (c: the kernel's tokens per item). For nmin <= c the most come
 * from experts of nmin tokens (one item each) and of c + 1 (two, where T > c): max over b of 2 b + (P - b (c + 1)) /
 * nmin, exact. For nmin > c an upper bound, P k' / n' at the n' of the largest ceil(n / c) / n (n' = nmin or the
 * first c k + 1 above it). (`sluice-bench moe`): the 2-tile launches had P / 9, which 6 experts of 17 tokens
 * (12 items, P = 102) exceed. */
static inline long moe_items_bound(long P, int T, int nmin, int c)
{
    if (T < nmin) return 0;   /* no expert can have nmin tokens */
    if (nmin <= c) {
        long best = 0;
        for (long b = 0; b * (c + 1) <= (T > c ? P : 0); b++) {
            const long v = 2 * b + (P - b * (c + 1)) / nmin;
            best = v > best ? v : best;
        }
        return best;
    }
    const long k = (nmin + c - 1) / c, n2 = c * k + 1;
    const long a = (P * k + nmin - 1) / nmin, b = (P * (k + 1) + n2 - 1) / n2;
    return a > b ? a : b;
}

#endif
