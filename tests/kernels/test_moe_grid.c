/* moe_items_bound (kernels/moe_grid.h), the bound that sizes the routed launches' grids, against an exhaustive
 * search: for every batch T up to 160 and top-k 1, 2, 6 and 8 (P = T k pairs), the most items any split of P pairs
 * over experts of nmin..T tokens makes (dynamic programming over the sizes). The bound must never be below it, and
 * must equal it where moe_grid.h says it is exact (nmin <= c). Cases: the 2-tile launches (nmin 9, 16 tokens per
 * item), the same with the 1-tile token chunks (17, 16: the upper-bound branch) and the wide launches (33 and 65, 64 tokens). */
#include <stdio.h>
#include <stdlib.h>

#include "moe_grid.h"

static long most_items(long P, int T, int nmin, int c, long *f)
{
    for (long p = 0; p <= P; p++) {
        long best = 0;
        for (int n = nmin; n <= T && n <= p; n++) {
            const long v = f[p - n] + (n + c - 1) / c;
            best = v > best ? v : best;
        }
        f[p] = best;
    }
    return f[P];
}

int main(void)
{
    static const int forms[][2] = {{9, 16}, {17, 16}, {33, 64}, {65, 64}}, topk[] = {1, 2, 6, 8};
    long *f = malloc((160 * 8 + 1) * sizeof *f);
    int fails = 0, checked = 0, loose = 0;
    if (!f) return 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int T = 1; T <= 160; T++) {
                const int nmin = forms[i][0], c = forms[i][1];
                const long P = (long)T * topk[j], want = most_items(P, T, nmin, c, f), got = moe_items_bound(P, T, nmin, c);
                checked++;
                if (got < want || (nmin <= c && got != want)) {
                    if (fails++ < 8)
                        fprintf(stderr, "moe_items_bound(P %ld, T %d, nmin %d, c %d) = %ld, the most items are %ld\n", P,
                                T, nmin, c, got, want);
                }
                loose += got > want;
            }
    free(f);
    printf("moe_items_bound: %d cases, %d wrong, %d above the most (the nmin > c bound)\n", checked, fails, loose);
    return fails != 0;
}
