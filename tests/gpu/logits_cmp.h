/* logits_cmp.h — comparing logits rows in the GPU tests. */
#ifndef SLUICE_TEST_LOGITS_CMP_H
#define SLUICE_TEST_LOGITS_CMP_H

#include <math.h>

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
