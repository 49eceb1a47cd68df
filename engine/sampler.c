/* sampler.c — penalties, temperature, top-k/top-p/min-p, seeded draws (see sampler.h). */
#include "sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl_rng_seed(sl_rng *r, uint64_t seed) { r->s = seed; }

uint64_t sl_rng_next(sl_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double sl_rng_uniform(sl_rng *r) { return (double)(sl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

int sl_sampler_init(sl_sampler *w, int vocab) {
    memset(w, 0, sizeof *w);
    w->V = vocab;
    w->z = malloc((size_t)vocab * sizeof *w->z);
    w->p = malloc((size_t)vocab * sizeof *w->p);
    w->idx = malloc((size_t)vocab * sizeof *w->idx);
    w->seen = calloc((size_t)vocab, 1);
    if (!w->z || !w->p || !w->idx || !w->seen) { sl_sampler_free(w); return -1; }
    return 0;
}

void sl_sampler_free(sl_sampler *w) {
    free(w->z); free(w->p); free(w->idx); free(w->seen);
    memset(w, 0, sizeof *w);
}

int sl_sampling_check(const sl_sampling *s, char *err, size_t errlen) {
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        { snprintf(err, errlen, "temperature must be a finite number >= 0 (got %g)", s->temperature); return -1; }
    if (s->top_k < 0) { snprintf(err, errlen, "top_k must be >= 0 (got %d)", s->top_k); return -1; }
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        { snprintf(err, errlen, "top_p must be in (0, 1] (got %g)", s->top_p); return -1; }
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        { snprintf(err, errlen, "min_p must be in [0, 1] (got %g)", s->min_p); return -1; }
    if (!(s->repetition_penalty > 0.0f) || !isfinite(s->repetition_penalty))
        { snprintf(err, errlen, "repetition_penalty must be > 0 (got %g)", s->repetition_penalty); return -1; }
    if (s->max_tokens < 1) { snprintf(err, errlen, "max_tokens must be >= 1 (got %d)", s->max_tokens); return -1; }
    if (s->n_stop_ids < 0 || (s->n_stop_ids > 0 && !s->stop_ids))
        { snprintf(err, errlen, "bad stop_ids (count %d)", s->n_stop_ids); return -1; }
    return 0;
}

/* temperatures below 1e-5 are greedy (as vLLM): z/T would overflow float */
int sl_sampling_is_greedy(const sl_sampling *s) { return s->temperature < 1e-5f || s->top_k == 1; }

/* sort order for step 4: higher probability first, ties -> lower id */
static int cmp_prob(const void *a, const void *b, void *ctx) {
    const float *p = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    float pi = p[i], pj = p[j];
    if (pi != pj) return pi > pj ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* k best of p[0..V) into idx (unordered): a heap whose root is the worst kept */
static int worse(const float *p, int a, int b) { return p[a] < p[b] || (p[a] == p[b] && a > b); }

static void select_top(const float *p, int V, int k, int *idx) {
    int hn = 0;
    for (int e = 0; e < V; e++) {
        int i;
        if (hn < k) {
            idx[hn] = e;
            i = hn++;
            while (i > 0 && worse(p, idx[i], idx[(i - 1) / 2])) {
                int t = idx[i]; idx[i] = idx[(i - 1) / 2]; idx[(i - 1) / 2] = t;
                i = (i - 1) / 2;
            }
        } else if (worse(p, idx[0], e)) {
            idx[0] = e;
            for (i = 0;;) {
                int l = 2 * i + 1, r = l + 1, m = i;
                if (l < hn && worse(p, idx[l], idx[m])) m = l;
                if (r < hn && worse(p, idx[r], idx[m])) m = r;
                if (m == i) break;
                int t = idx[i]; idx[i] = idx[m]; idx[m] = t;
                i = m;
            }
        }
    }
}

int sl_sampler_dist(sl_sampler *w, const sl_sampling *s, const float *logits,
                    const int32_t *hist, int n_hist) {
    int V = w->V;
    memcpy(w->z, logits, (size_t)V * sizeof(float));
    if (s->repetition_penalty != 1.0f) {
        float pen = s->repetition_penalty;
        for (int i = 0; i < n_hist; i++) {
            int t = hist[i];
            if (t < 0 || t >= V || w->seen[t]) continue;
            w->seen[t] = 1;
            w->z[t] = w->z[t] > 0 ? w->z[t] / pen : w->z[t] * pen;
        }
        for (int i = 0; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < V) w->seen[hist[i]] = 0;
    }
    int greedy = sl_sampling_is_greedy(s);
    if (!greedy)
        for (int i = 0; i < V; i++) w->z[i] /= s->temperature;
    int best = 0;
    for (int i = 1; i < V; i++) if (w->z[i] > w->z[best]) best = i;
    double zmax = w->z[best], sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)w->z[i] - zmax);
    w->lse = zmax + log(sum);
    if (greedy) {
        memset(w->p, 0, (size_t)V * sizeof(float));
        w->p[best] = 1.0f;
        return best;
    }
    for (int i = 0; i < V; i++) w->p[i] = (float)(exp((double)w->z[i] - zmax) / sum);

    /* survivors idx[0..n): when sorted, a most-likely-first prefix of the whole order (ties ->
     * lower id). Only as much of the order is sorted as the filters need: a heap for top_k, the
     * tokens above a shrinking threshold for top_p, nothing for temperature / min_p alone. */
    int n = 0, sorted = 1;
    if (s->top_k > 0 && s->top_k < V) {
        n = s->top_k;
        select_top(w->p, V, n, w->idx);
    } else if (s->top_p < 1.0f) {
        double all = 0.0;
        for (int i = 0; i < V; i++) all += w->p[i];
        for (double thr = w->p[best] * 1e-3;; thr *= 1e-3) {
            double mass = 0.0;
            if (thr < 1e-30) thr = 0.0;
            n = 0;
            for (int i = 0; i < V; i++)
                if (w->p[i] >= thr) { w->idx[n++] = i; mass += w->p[i]; }
            if (mass >= s->top_p * all || thr == 0.0) break;   /* the nucleus lies inside */
        }
    } else {
        sorted = 0;
        for (int i = 0; i < V; i++) w->idx[i] = i;
        n = V;
    }
    if (sorted) {
        qsort_r(w->idx, (size_t)n, sizeof(int), cmp_prob, w->p);
        if (s->top_p < 1.0f) {
            double tot = 0.0, cum = 0.0;
            if (s->top_k > 0 && s->top_k < V)
                for (int k = 0; k < n; k++) tot += w->p[w->idx[k]];
            else
                for (int i = 0; i < V; i++) tot += w->p[i];
            int keep = n;
            for (int k = 0; k < n; k++) {
                cum += w->p[w->idx[k]];
                if (cum >= s->top_p * tot) { keep = k + 1; break; }
            }
            n = keep;
        }
        if (s->min_p > 0.0f) {
            float thr = s->min_p * w->p[w->idx[0]];
            int keep = 1;
            while (keep < n && w->p[w->idx[keep]] >= thr) keep++;
            n = keep;
        }
    } else if (s->min_p > 0.0f) {
        float thr = s->min_p * w->p[best];
        int m = 0;
        for (int i = 0; i < V; i++)
            if (w->p[i] >= thr) w->idx[m++] = i;
        n = m;
    }
    double tot = 0.0;
    for (int k = 0; k < n; k++) tot += w->p[w->idx[k]];
    for (int k = 0; k < n; k++) w->seen[w->idx[k]] = 1;          /* mark survivors */
    for (int i = 0; i < V; i++) {
        w->p[i] = w->seen[i] ? (float)(w->p[i] / tot) : 0.0f;
        w->seen[i] = 0;
    }
    return -1;
}

int32_t sl_sample(sl_sampler *w, const sl_sampling *s, const float *logits,
                  const int32_t *hist, int n_hist, sl_rng *rng, float *logprob) {
    int tok = sl_sampler_dist(w, s, logits, hist, n_hist);
    if (tok < 0) {
        double u = sl_rng_uniform(rng), cum = 0.0, tot = 0.0;
        int last = 0;
        for (int i = 0; i < w->V; i++) tot += w->p[i];
        u *= tot;
        for (int i = 0; i < w->V && tok < 0; i++) {
            if (w->p[i] <= 0.0f) continue;
            last = i;
            cum += w->p[i];
            if (u < cum) tok = i;
        }
        if (tok < 0) tok = last;
    }
    if (logprob) *logprob = (float)((double)w->z[tok] - w->lse);
    return tok;
}
