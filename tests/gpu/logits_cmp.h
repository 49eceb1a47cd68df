/* logits_cmp.h — comparing logits rows in the GPU tests, and the random prompts they feed. */
#ifndef SLUICE_TEST_LOGITS_CMP_H
#define SLUICE_TEST_LOGITS_CMP_H

#include <math.h>
#include <stdint.h>

/* tok[0..n) = token ids in [0, V) from a xorshift64 stream seeded with x (nonzero): the same prompt every run. */
static inline void random_tokens(int32_t *tok, int n, int V, uint64_t x)
{
    for (int i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
    }
}

/* Index of the largest logit; *margin (if not NULL) = its lead over the second (INFINITY with one). */
static inline int logits_argmax(const float *r, int V, float *margin)
{
    int b = 0, s = -1;
    for (int i = 1; i < V; i++)
        if (r[i] > r[b]) { s = b; b = i; }
        else if (s < 0 || r[i] > r[s]) s = i;
    if (margin) *margin = s >= 0 ? r[b] - r[s] : INFINITY;
    return b;
}

/* ||g - c|| / ||c|| over one row; INFINITY when g holds a NaN or an infinity. */
static inline double logits_rel_l2(const float *g, const float *c, int V)
{
    double num = 0, den = 0;
    for (int i = 0; i < V; i++) {
        if (!isfinite(g[i])) return INFINITY;
        num += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
        den += (double)c[i] * c[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

#endif
