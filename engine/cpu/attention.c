/* attention.c — V4 attention for one layer over every token of a step (V4_SPEC §2.4–2.6).
 *
 * Projections that only depend on a token's own input run batched over all tokens of the step
 * (q LoRA, kv, compressor C/Z, indexer q and weights). Everything that touches the sequence
 * state then runs token by token, in position order within each sequence:
 *   kv -> RoPE -> sliding ring; compressor push (emits an entry when a window closes);
 *   key set = window (t-window+1 .. t) + compressed entries (HCA: all w < (t+1)/r;
 *   CSA: the indexer's top-k of them, ties -> lower entry index); attention with sinks over the
 *   heads (thread pool); output de-rotation. Then the grouped output projection, batched again.
 * So a sequence's result does not depend on how its tokens were split into steps.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

struct cpu_attn_buf {
    int cap_n;
    float *qr, *q, *kv, *cC, *cZ, *iC, *iZ, *iq, *iw, *o, *u;
    int cap_keys;
    const float **keys;
    float *scores;          /* n_heads x cap_keys */
    int cap_ent;
    float *iscore;          /* indexer score per entry */
    int *sel;               /* selected entries (top-k heap) */
    float *iqh;             /* one token's rope'd indexer q (nI x dI) */
};

void cpu_attn_buf_free(cpu_attn_buf *b) {
    if (!b) return;
    free(b->qr); free(b->q); free(b->kv); free(b->cC); free(b->cZ); free(b->iC); free(b->iZ);
    free(b->iq); free(b->iw); free(b->o); free(b->u);
    free(b->keys); free(b->scores); free(b->iscore); free(b->sel); free(b->iqh);
    free(b);
}

static int grow(float **p, size_t n) {
    float *q = realloc(*p, (n ? n : 1) * sizeof(float));
    if (!q) return -1;
    *p = q;
    return 0;
}

static int buf_ensure_n(cpu_attn_buf *b, const v4_config *c, int n) {
    if (n <= b->cap_n) return 0;
    size_t N = (size_t)n, hd = (size_t)c->head_dim, dI = (size_t)c->index_head_dim;
    size_t nI = (size_t)c->index_n_heads, H = (size_t)c->n_heads;
    if (grow(&b->qr, N * c->q_lora_rank) || grow(&b->q, N * H * hd) || grow(&b->kv, N * hd) ||
        grow(&b->cC, N * 2 * hd) || grow(&b->cZ, N * 2 * hd) || grow(&b->iC, N * 2 * dI) ||
        grow(&b->iZ, N * 2 * dI) || grow(&b->iq, N * nI * dI) || grow(&b->iw, N * nI) ||
        grow(&b->o, N * H * hd) || grow(&b->u, N * c->o_groups * c->o_lora_rank) ||
        grow(&b->iqh, nI * dI))
        return -1;
    b->cap_n = n;
    return 0;
}

static int buf_ensure_keys(cpu_attn_buf *b, const v4_config *c, int n_keys, int n_ent) {
    if (n_keys > b->cap_keys) {
        int cap = b->cap_keys ? b->cap_keys : 64;
        while (cap < n_keys) cap *= 2;
        const float **k = realloc(b->keys, (size_t)cap * sizeof *k);
        if (!k) return -1;
        b->keys = k;
        if (grow(&b->scores, (size_t)cap * c->n_heads)) return -1;
        b->cap_keys = cap;
    }
    if (n_ent > b->cap_ent) {
        int cap = b->cap_ent ? b->cap_ent : 64;
        while (cap < n_ent) cap *= 2;
        if (grow(&b->iscore, (size_t)cap)) return -1;
        int *s = realloc(b->sel, (size_t)cap * sizeof *s);
        if (!s) return -1;
        b->sel = s;
        b->cap_ent = cap;
    }
    return 0;
}

/* ------------------------------------------------------------------------------- compressor */
/* Push token t's rows (C, Z without ape; width coff*d) into the open window; when the window
 * closes ((t+1) mod r == 0) pool it into `out` (d floats): per-dim softmax over the slots
 * (CSA: previous window's "a" halves, absent for w = 0, + this window's "b" halves; HCA: the r
 * rows), RMSNorm, RoPE at position w*r. Returns 1 when an entry was written. */
static int compress_push(const v4_compressor_w *cw, int r, int d, int rd_half, const double *freq,
                         float eps, float *buf, const float *C, const float *Z, long t, float *out) {
    int csa = r == 4, coff = csa ? 2 : 1, width = coff * d, rowlen = 2 * width;
    long w = t / r;
    float *cur = buf + (csa ? (size_t)(w & 1) * r * rowlen : 0);
    float *row = cur + (size_t)(t % r) * rowlen;
    const float *ape = cw->ape + (size_t)(t % r) * width;
    memcpy(row, C, (size_t)width * sizeof(float));
    for (int k = 0; k < width; k++) row[width + k] = Z[k] + ape[k];
    if ((t + 1) % r) return 0;

    const float *prev = csa ? buf + (size_t)((w + 1) & 1) * r * rowlen : NULL;
    int have_prev = csa && w > 0;
    for (int j = 0; j < d; j++) {
        float mx = -INFINITY;
        if (have_prev)
            for (int s = 0; s < r; s++) mx = fmaxf(mx, prev[(size_t)s * rowlen + width + j]);
        int ob = csa ? d : 0;       /* CSA: "b" half of this window; HCA: the whole row */
        for (int s = 0; s < r; s++) mx = fmaxf(mx, cur[(size_t)s * rowlen + width + ob + j]);
        float z = 0.0f, acc = 0.0f;
        if (have_prev)
            for (int s = 0; s < r; s++) {
                float e = expf(prev[(size_t)s * rowlen + width + j] - mx);
                z += e;
                acc += e * prev[(size_t)s * rowlen + j];
            }
        for (int s = 0; s < r; s++) {
            float e = expf(cur[(size_t)s * rowlen + width + ob + j] - mx);
            z += e;
            acc += e * cur[(size_t)s * rowlen + ob + j];
        }
        out[j] = acc / z;
    }
    cpu_rmsnorm(out, out, cw->norm, d, eps);
    float cs[256], sn[256];
    cpu_rope_table(freq, rd_half, w * r, cs, sn);
    cpu_rope(out, d, cs, sn, rd_half, 0);
    return 1;
}

/* ------------------------------------------------------------------------ top-k (indexer) */
/* a is worse than b: lower score, or equal score and higher index */
static int worse(const float *sc, int a, int b) { return sc[a] < sc[b] || (sc[a] == sc[b] && a > b); }

static void sift_down(int *h, int n, int i, const float *sc) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(sc, h[l], h[m])) m = l;
        if (r < n && worse(sc, h[r], h[m])) m = r;
        if (m == i) return;
        int t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

/* Indices of the k best scores (higher first, ties -> lower index) into sel[0..k). */
static void topk_select(const float *sc, int n, int k, int *sel) {
    int hn = 0;
    for (int e = 0; e < n; e++) {
        if (hn < k) {
            sel[hn] = e;
            for (int i = hn++; i > 0;) {       /* sift up: the worst stays at the root */
                int p = (i - 1) / 2;
                if (!worse(sc, sel[i], sel[p])) break;
                int t = sel[i]; sel[i] = sel[p]; sel[p] = t;
                i = p;
            }
        } else if (worse(sc, sel[0], e)) {
            sel[0] = e;
            sift_down(sel, hn, 0, sc);
        }
    }
}

/* indexer scores of entries [e0, e1): Σ_h wI_h · ReLU(qI_h · K_e) */
typedef struct {
    const v4_state_pool *pool;
    const v4_seq_state *st;
    int layer;
    const float *iqh, *wts;
    int nI, dI;
    float *out;
} index_job;

static void index_scores(void *arg, int e0, int e1, int thread) {
    (void)thread;
    index_job *j = arg;
    for (int e = e0; e < e1; e++) {
        const float *K = v4_ikey(j->pool, j->st, j->layer, e);
        float s = 0.0f;
        for (int h = 0; h < j->nI; h++) {
            float d = cpu_dot(j->iqh + (size_t)h * j->dI, K, j->dI);
            s += j->wts[h] * (d > 0.0f ? d : 0.0f);
        }
        j->out[e] = s;
    }
}

/* ------------------------------------------------------------------- attention over heads */
typedef struct {
    const v4_config *c;
    const float *q;          /* token's q: H x hd (rms'd and rope'd) */
    const float *const *keys;
    int n_keys;
    float *scores;
    const float *sink;
    float *o;                /* H x hd out */
    const float *cs, *sn;
    int rd_half;
    int stride;              /* scores stride per head */
    int round;               /* gpu numerics: the output in bf16 */
} heads_job;

static void attend_heads(void *arg, int h0, int h1, int thread) {
    (void)thread;
    heads_job *j = arg;
    int hd = j->c->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = h0; h < h1; h++) {
        const float *qh = j->q + (size_t)h * hd;
        float *s = j->scores + (size_t)h * j->stride;
        float mx = j->sink[h];
        for (int i = 0; i < j->n_keys; i++) {
            s[i] = cpu_dot(qh, j->keys[i], hd) * scale;
            if (s[i] > mx) mx = s[i];
        }
        float z = expf(j->sink[h] - mx);
        float *oh = j->o + (size_t)h * hd;
        memset(oh, 0, (size_t)hd * sizeof(float));
        for (int i = 0; i < j->n_keys; i++) {
            float e = expf(s[i] - mx);
            z += e;
            const float *k = j->keys[i];
            for (int d = 0; d < hd; d++) oh[d] += e * k[d];
        }
        float inv = 1.0f / z;
        for (int d = 0; d < hd; d++) oh[d] *= inv;
        cpu_rope(oh, hd, j->cs, j->sn, j->rd_half, 1);
        if (j->round) cpu_round_bf16(oh, (size_t)hd);
    }
}

/* A key row (a window row or a compressed entry) as the cuda backend stores it: with FP8 KV its dims before the
 * 2*half rotated ones rounded to FP8 blocks of 64 (whatever the other numerics), the rest as the GPU numerics say. */
static void round_key(const cpu_model *m, float *k, int hd, int half) {
    int nope = m->kv_fp8 ? hd - 2 * half : 0;
    if (nope) qt_fp8_round_blocks(k, nope, 64);
    cpu_gpu_round(m, k + nope, (size_t)(hd - nope));
}

/* ------------------------------------------------------------------------------ the layer */
int cpu_attention(cpu_model *m, int l, const cpu_span *spans, int n_spans, int n,
                  const float *xn, float *f, cpu_attn_buf **bufp) {
    const v4_weights *w = m->w;
    const v4_config *c = &w->cfg;
    const v4_layer_w *L = &w->layers[l];
    v4_state_pool *pool = m->pool;
    if (!*bufp && !(*bufp = calloc(1, sizeof **bufp))) return -1;
    cpu_attn_buf *b = *bufp;
    if (buf_ensure_n(b, c, n)) return -1;

    int H = c->n_heads, hd = c->head_dim, dim = c->dim, ql = c->q_lora_rank;
    int nI = c->index_n_heads, dI = c->index_head_dim, half = c->rope_dim / 2;
    int ratio = c->compress_ratio[l], csa = ratio == 4, coff = csa ? 2 : 1, W = c->window;
    const double *freq = ratio ? m->freq_comp : m->freq_main;
    float eps = c->norm_eps;
    cpu_pool *tp = m->tp;

    /* batched projections */
    cpu_matmul_dense(m, &L->wq_a, 0, ql, xn, dim, n, b->qr, ql);
    for (int i = 0; i < n; i++) cpu_rmsnorm(b->qr + (size_t)i * ql, b->qr + (size_t)i * ql, L->q_norm, ql, eps);
    cpu_gpu_round(m, b->qr, (size_t)n * ql);
    cpu_matmul_dense(m, &L->wq_b, 0, H * hd, b->qr, ql, n, b->q, H * hd);
    cpu_matmul_dense(m, &L->wkv, 0, hd, xn, dim, n, b->kv, hd);
    for (int i = 0; i < n; i++) cpu_rmsnorm(b->kv + (size_t)i * hd, b->kv + (size_t)i * hd, L->kv_norm, hd, eps);
    if (ratio) {
        cpu_matmul_dense(m, &L->comp.wkv, 0, coff * hd, xn, dim, n, b->cC, coff * hd);
        cpu_matmul_dense(m, &L->comp.wgate, 0, coff * hd, xn, dim, n, b->cZ, coff * hd);
    }
    if (csa) {
        cpu_matmul_dense(m, &L->icomp.wkv, 0, 2 * dI, xn, dim, n, b->iC, 2 * dI);
        cpu_matmul_dense(m, &L->icomp.wgate, 0, 2 * dI, xn, dim, n, b->iZ, 2 * dI);
        cpu_matmul_dense(m, &L->iwq_b, 0, nI * dI, b->qr, ql, n, b->iq, nI * dI);
        cpu_matmul_dense(m, &L->iweights, 0, nI, xn, dim, n, b->iw, nI);
    }

    float cs[256], sn[256];
    for (int sp = 0; sp < n_spans; sp++) {
        const cpu_span *S = &spans[sp];
        v4_seq_state *st = S->st;
        float *ring = v4_ring(pool, st, l);
        for (int k = 0; k < S->n; k++) {
            int i = S->off + k;
            long t = S->pos0 + k;
            cpu_rope_table(freq, half, t, cs, sn);
            float *q = b->q + (size_t)i * H * hd;
            for (int h = 0; h < H; h++) {
                cpu_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, NULL, hd, eps);
                cpu_rope(q + (size_t)h * hd, hd, cs, sn, half, 0);
            }
            cpu_gpu_round(m, q, (size_t)H * hd);
            float *kv = b->kv + (size_t)i * hd;
            cpu_rope(kv, hd, cs, sn, half, 0);
            round_key(m, kv, hd, half);
            memcpy(ring + (size_t)(t % W) * hd, kv, (size_t)hd * sizeof(float));

            int n_win = t + 1 < W ? (int)t + 1 : W;
            int n_vis = ratio ? (int)((t + 1) / ratio) : 0;
            int n_cmp = csa ? (n_vis < c->index_topk ? n_vis : c->index_topk) : n_vis;
            if (n_cmp < 0) n_cmp = 0;
            if (buf_ensure_keys(b, c, n_win + n_cmp, n_vis)) return -1;
            int nk = 0;
            for (long p = t - n_win + 1; p <= t; p++) b->keys[nk++] = ring + (size_t)(p % W) * hd;

            if (csa) {
                float *ik = (t + 1) % 4 ? NULL : v4_ikey(pool, st, l, (int)(t / 4));
                if (compress_push(&L->icomp, 4, dI, half, freq, eps, v4_ibuf(pool, st, l),
                                  b->iC + (size_t)i * 2 * dI, b->iZ + (size_t)i * 2 * dI, t, ik)) {
                    if (m->index_fp8) qt_fp8_round_blocks(ik, dI, 64);
                    else cpu_gpu_round(m, ik, (size_t)dI);
                }
            }
            if (ratio) {
                float *e = (t + 1) % ratio ? NULL : v4_entry(pool, st, l, (int)(t / ratio));
                if (compress_push(&L->comp, ratio, hd, half, freq, eps, v4_cbuf(pool, st, l),
                                  b->cC + (size_t)i * coff * hd, b->cZ + (size_t)i * coff * hd, t, e))
                    round_key(m, e, hd, half);
            }
            if (csa && n_cmp > 0) {
                /* lightning indexer: score(e) = Σ_h wI_h · ReLU(qI_h · K_e) */
                const float *iq = b->iq + (size_t)i * nI * dI;
                float *iqh = b->iqh;
                float wts[256];
                float sc = 1.0f / sqrtf((float)dI) / sqrtf((float)nI);
                for (int h = 0; h < nI; h++) {
                    memcpy(iqh + (size_t)h * dI, iq + (size_t)h * dI, (size_t)dI * sizeof(float));
                    cpu_rope(iqh + (size_t)h * dI, dI, cs, sn, half, 0);
                    wts[h] = b->iw[(size_t)i * nI + h] * sc;
                }
                cpu_gpu_round(m, iqh, (size_t)nI * dI);
                index_job ij = {pool, st, l, iqh, wts, nI, dI, b->iscore};
                if ((double)n_vis * nI * dI < 65536.0) index_scores(&ij, 0, n_vis, 0);
                else cpu_pool_run(tp, index_scores, &ij, n_vis);
                topk_select(b->iscore, n_vis, n_cmp, b->sel);
                if (m->gap && n_vis > n_cmp) {   /* the best entry left out against the worst one taken */
                    float next = -INFINITY;
                    for (int e2 = 0; e2 < n_vis; e2++) {
                        int used = 0;
                        for (int q2 = 0; q2 < n_cmp && !used; q2++) used = b->sel[q2] == e2;
                        if (!used && b->iscore[e2] > next) next = b->iscore[e2];
                    }
                    cpu_log_gap(m, i, b->iscore[b->sel[0]], next);
                }
                for (int k2 = 0; k2 < n_cmp; k2++) b->keys[nk++] = v4_entry(pool, st, l, b->sel[k2]);
            } else if (ratio && !csa) {
                for (int e = 0; e < n_vis; e++) b->keys[nk++] = v4_entry(pool, st, l, e);
            }

            heads_job hj = {c, q, b->keys, nk, b->scores, L->attn_sink, b->o + (size_t)i * H * hd,
                            cs, sn, half, b->cap_keys, m->bf16};
            if ((double)H * nk * hd < 32768.0) attend_heads(&hj, 0, H, 0);   /* small: no wake-up */
            else cpu_pool_run(tp, attend_heads, &hj, H);
        }
    }

    /* grouped output projection: u_g = wo_a[g] @ o_g; f = wo_b @ concat(u) */
    int G = c->o_groups, ol = c->o_lora_rank, gw = H * hd / G;
    for (int g = 0; g < G; g++)
        cpu_matmul_dense(m, &L->wo_a, g * ol, ol, b->o + (size_t)g * gw, H * hd, n, b->u + (size_t)g * ol, G * ol);
    cpu_gpu_round(m, b->u, (size_t)n * G * ol);
    cpu_matmul_dense(m, &L->wo_b, 0, dim, b->u, G * ol, n, f, dim);
    return 0;
}
