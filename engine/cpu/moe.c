/* moe.c — V4 mixture of experts for one layer over every token of a step (V4_SPEC §2.7).
 *
 * Router: logits = gate·x (fp32); scores s = sqrt(softplus) | sigmoid | softmax. Selection: hash
 * layers take tid2eid[token]; others top-k of s + bias (bias only selects; ties -> lower expert).
 * Weights w = s[idx], renormalised to sum 1 for sqrtsoftplus and sigmoid (not softmax, as the
 * official code), times route_scale. Expert: g = w1·x, u = w3·x, u = clamp(u, ±limit),
 * g = min(g, limit), h = silu(g)·u; routed: y += w2·(w_e·h) (weight before w2); the shared expert
 * uses the same clamped SwiGLU. Each expert runs once per step on the tokens routed to it.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

struct cpu_moe_buf {
    int cap_n;
    float *logits;     /* n x E */
    int *idx;          /* n x k */
    float *wt;         /* n x k */
    int *list;         /* token rows routed to the current expert */
    float *lw;         /* their weights */
    float *xg;         /* gathered inputs  n x dim */
    float *g, *u;      /* n x inter */
    float *yo;         /* n x dim */
};

void cpu_moe_buf_free(cpu_moe_buf *b) {
    if (!b) return;
    free(b->logits); free(b->idx); free(b->wt); free(b->list); free(b->lw);
    free(b->xg); free(b->g); free(b->u); free(b->yo);
    free(b);
}

static int ensure(cpu_moe_buf *b, const v4_config *c, int n, int inter) {
    if (n <= b->cap_n) return 0;
    size_t N = (size_t)n, E = (size_t)c->n_routed_experts, K = (size_t)c->n_active;
    void *p;
#define GROW(f, cnt) do { p = realloc(b->f, (cnt) * sizeof *b->f); if (!p) return -1; b->f = p; } while (0)
    GROW(logits, N * E);
    GROW(idx, N * K);
    GROW(wt, N * K);
    GROW(list, N);
    GROW(lw, N);
    GROW(xg, N * c->dim);
    GROW(g, N * inter);
    GROW(u, N * inter);
    GROW(yo, N * c->dim);
#undef GROW
    b->cap_n = n;
    return 0;
}

static float softplusf(float v) { return v > 0 ? v + log1pf(expf(-v)) : log1pf(expf(v)); }

/* y[i] (+)= w2 · (scale_i · SwiGLU(x_i)) for the n rows of xg; accumulate = add into y. */
static void expert_run(cpu_model *m, const v4_expert_w *e, cpu_moe_buf *b, int n, const float *wscale) {
    const v4_config *c = &m->w->cfg;
    int dim = c->dim, inter = e->w1.rows;
    float lim = c->swiglu_limit;
    cpu_matmul(m->tp, &e->w1, 0, inter, b->xg, dim, n, b->g, inter);
    cpu_matmul(m->tp, &e->w3, 0, inter, b->xg, dim, n, b->u, inter);
    for (int i = 0; i < n; i++) {
        float *g = b->g + (size_t)i * inter, *u = b->u + (size_t)i * inter;
        float s = wscale ? wscale[i] : 1.0f;
        for (int k = 0; k < inter; k++) {
            float gv = g[k], uv = u[k];
            if (lim > 0) {
                uv = fminf(fmaxf(uv, -lim), lim);
                gv = fminf(gv, lim);
            }
            g[k] = gv / (1.0f + expf(-gv)) * uv * s;
        }
    }
    cpu_matmul(m->tp, &e->w2, 0, dim, b->g, inter, n, b->yo, dim);
}

int cpu_moe(cpu_model *m, int l, int n, const int32_t *tok, const float *xn, float *f, cpu_moe_buf **bufp) {
    const v4_weights *w = m->w;
    const v4_config *c = &w->cfg;
    const v4_layer_w *L = &w->layers[l];
    int E = c->n_routed_experts, K = c->n_active, dim = c->dim;
    if (!*bufp && !(*bufp = calloc(1, sizeof **bufp))) return -1;
    cpu_moe_buf *b = *bufp;
    int inter = L->shared.w1.rows > c->moe_inter ? L->shared.w1.rows : c->moe_inter;
    if (ensure(b, c, n, inter)) return -1;

    /* router */
    cpu_matmul(m->tp, &L->gate, 0, E, xn, dim, n, b->logits, E);
    for (int i = 0; i < n; i++) {
        float *s = b->logits + (size_t)i * E;
        if (c->score_func == V4_SCORE_SOFTMAX) {
            float mx = -INFINITY, z = 0.0f;
            for (int e = 0; e < E; e++) mx = fmaxf(mx, s[e]);
            for (int e = 0; e < E; e++) { s[e] = expf(s[e] - mx); z += s[e]; }
            for (int e = 0; e < E; e++) s[e] /= z;
        } else if (c->score_func == V4_SCORE_SIGMOID) {
            for (int e = 0; e < E; e++) s[e] = cpu_sigmoid(s[e]);
        } else {
            for (int e = 0; e < E; e++) s[e] = sqrtf(softplusf(s[e]));
        }
        int *idx = b->idx + (size_t)i * K;
        if (L->tid2eid) {
            for (int k = 0; k < K; k++) {
                idx[k] = L->tid2eid[(size_t)tok[i] * K + k];
                if (idx[k] < 0 || idx[k] >= E) return -1;   /* loader validates; never index past */
            }
        } else {
            /* top-K of s + bias by repeated selection: higher first, ties -> lower expert */
            for (int k = 0; k < K; k++) {
                int best = -1;
                float bv = 0.0f;
                for (int e = 0; e < E; e++) {
                    int used = 0;
                    for (int q = 0; q < k; q++) used |= idx[q] == e;
                    if (used) continue;
                    float v = s[e] + (L->gate_bias ? L->gate_bias[e] : 0.0f);
                    if (best < 0 || v > bv) { best = e; bv = v; }
                }
                idx[k] = best;
            }
            if (m->gap) {   /* the first expert left out against the last one taken */
                float last = s[idx[K - 1]] + (L->gate_bias ? L->gate_bias[idx[K - 1]] : 0.0f), next = -INFINITY;
                for (int e = 0; e < E; e++) {
                    int used = 0;
                    for (int q = 0; q < K; q++) used |= idx[q] == e;
                    const float v = s[e] + (L->gate_bias ? L->gate_bias[e] : 0.0f);
                    if (!used && v > next) next = v;
                }
                if (next > -INFINITY) cpu_log_gap(m, i, last, next);
            }
        }
        float *wt = b->wt + (size_t)i * K, sum = 0.0f;
        for (int k = 0; k < K; k++) { wt[k] = s[idx[k]]; sum += wt[k]; }
        int renorm = c->score_func != V4_SCORE_SOFTMAX;
        for (int k = 0; k < K; k++) wt[k] = (renorm ? wt[k] / sum : wt[k]) * c->route_scale;
    }

    /* shared expert first: f = shared(x) */
    memcpy(b->xg, xn, (size_t)n * dim * sizeof(float));
    expert_run(m, &L->shared, b, n, NULL);
    memcpy(f, b->yo, (size_t)n * dim * sizeof(float));

    /* routed experts: gather rows, run, scatter-add */
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (int i = 0; i < n; i++) {
            float wsum = 0.0f;
            int hit = 0;
            for (int k = 0; k < K; k++)     /* an expert listed twice: w2 is linear, add weights */
                if (b->idx[(size_t)i * K + k] == e) { wsum += b->wt[(size_t)i * K + k]; hit = 1; }
            if (!hit) continue;
            b->list[cnt] = i;
            b->lw[cnt] = wsum;
            memcpy(b->xg + (size_t)cnt * dim, xn + (size_t)i * dim, (size_t)dim * sizeof(float));
            cnt++;
        }
        if (!cnt) continue;
        expert_run(m, &L->experts[e], b, cnt, b->lw);
        for (int q = 0; q < cnt; q++) {
            float *fi = f + (size_t)b->list[q] * dim;
            const float *yo = b->yo + (size_t)q * dim;
            for (int d = 0; d < dim; d++) fi[d] += yo[d];
        }
    }
    return 0;
}
