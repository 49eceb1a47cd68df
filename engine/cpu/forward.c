/* forward.c — the CPU reference backend: one V4 step over a batch of spans (V4_SPEC §2).
 *
 *   X = [E[tok]] * hc                                   (embedding, hc identical streams)
 *   per layer: x = hc_pre(X); f = Attention(RMSNorm(x)); X = hc_post(f, X)
 *              x = hc_pre(X); f = MoE(RMSNorm(x));       X = hc_post(f, X)
 *   y = hc_head(X); logits = head · RMSNorm_norm(y)     (only for the rows that want logits)
 *
 * All tokens of all spans go through each layer together, so each weight row is dequantised once
 * per step; the attention's state updates run per sequence in position order (attention.c).
 */
#include "cpu.h"
#include "../sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    cpu_model m;
    int cap_n;
    float *X, *x, *xn, *f, *post, *comb, *mix;
    int32_t *tok;
    cpu_span *spans;
    int cap_spans;
    int cap_l;
    float *Xl, *yl, *lg;      /* rows that want logits */
    cpu_attn_buf *ab;
    cpu_moe_buf *mb;
    sl_sampler smp;           /* spans that sample (sl_seq_span.sample) */
    int pending;              /* launched steps not collected yet (their spans already hold the results) */
    const sl_seq_span *last;  /* the newest launched step's spans (the caller keeps them until collected) */
    int n_last;
} cpu_impl;

static int ensure_rows(cpu_impl *c, int n, int n_spans, int nl) {
    const v4_config *cfg = &c->m.w->cfg;
    size_t hc = (size_t)cfg->hc_mult, dim = (size_t)cfg->dim;
    void *p;
#define GROW(f, cnt) do { p = realloc(c->f, (cnt) * sizeof *c->f); if (!p) return -1; c->f = p; } while (0)
    if (n > c->cap_n) {
        size_t N = (size_t)n;
        GROW(X, N * hc * dim);
        GROW(x, N * dim);
        GROW(xn, N * dim);
        GROW(f, N * dim);
        GROW(post, N * hc);
        GROW(comb, N * hc * hc);
        GROW(mix, N * (2 + hc) * hc);
        GROW(tok, N);
        c->cap_n = n;
    }
    if (n_spans > c->cap_spans) {
        GROW(spans, (size_t)n_spans);
        c->cap_spans = n_spans;
    }
    if (nl > c->cap_l) {
        GROW(Xl, (size_t)nl * hc * dim);
        GROW(yl, (size_t)nl * dim);
        GROW(lg, (size_t)nl * cfg->vocab_size);
        c->cap_l = nl;
    }
#undef GROW
    return 0;
}

/* A fed span's token: the one sampled for its sequence in the newest launched step, still outstanding; -1 when
 * there is none. */
static int32_t fed_token(const cpu_impl *c, const v4_seq_state *st, int s) {
    if (!c->pending) return -1;
    if (s < c->n_last && c->last[s].st == st) return c->last[s].token;   /* the usual case: the same order */
    for (int i = 0; i < c->n_last; i++)
        if (c->last[i].st == st) return c->last[i].token;
    return -1;
}

static int run_step(sl_backend *be, sl_seq_span *in, int n_spans, char *err, size_t errlen) {
    cpu_impl *c = be->impl;
    cpu_model *m = &c->m;
    const v4_weights *w = m->w;
    const v4_config *cfg = &w->cfg;
    int hc = cfg->hc_mult, dim = cfg->dim, V = cfg->vocab_size;
    size_t width = (size_t)hc * dim;

    int n = 0, nl = 0;
    for (int s = 0; s < n_spans; s++) {
        if (in[s].n <= 0 || in[s].logits_from < 0 || in[s].logits_from > in[s].n || !in[s].st->fixed || !in[s].st->open) {
            snprintf(err, errlen, "cpu backend: bad span %d (n %d, logits_from %d)", s, in[s].n, in[s].logits_from);
            return -1;
        }
        n += in[s].n;
        nl += in[s].n - in[s].logits_from;
    }
    if (n == 0) return 0;
    if (ensure_rows(c, n, n_spans, nl)) { snprintf(err, errlen, "cpu backend: out of memory"); return -1; }

    /* flatten spans, embed */
    for (int s = 0, off = 0; s < n_spans; s++) {
        c->spans[s] = (cpu_span){in[s].st, off, in[s].n, in[s].st->pos, in[s].tokens};
        for (int k = 0; k < in[s].n; k++) {
            int32_t t = in[s].fed ? fed_token(c, in[s].st, s) : in[s].tokens[k];
            if (t < 0 || t >= V) { snprintf(err, errlen, "cpu backend: token id %d out of range", (int)t); return -1; }
            c->tok[off + k] = t;
            float *Xi = c->X + (size_t)(off + k) * width;
            qt_dequant_row(&w->embed, t, Xi);
            for (int j = 1; j < hc; j++) memcpy(Xi + (size_t)j * dim, Xi, (size_t)dim * sizeof(float));
        }
        off += in[s].n;
    }

    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_w *L = &w->layers[l];
        cpu_hc_pre(m, c->X, n, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, c->x, c->post, c->comb, c->mix);
        for (int i = 0; i < n; i++)
            cpu_rmsnorm(c->xn + (size_t)i * dim, c->x + (size_t)i * dim, L->attn_norm, dim, cfg->norm_eps);
        cpu_gpu_round(m, c->xn, (size_t)n * dim);
        if (cpu_attention(m, l, c->spans, n_spans, n, c->xn, c->f, &c->ab)) {
            snprintf(err, errlen, "cpu backend: attention failed in layer %d (out of memory)", l);
            return -1;
        }
        cpu_hc_post(m, c->X, c->f, n, c->post, c->comb);
        if (be->sublayers && 2 * l + 1 >= be->sublayers) break;
        cpu_hc_pre(m, c->X, n, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, c->x, c->post, c->comb, c->mix);
        for (int i = 0; i < n; i++)
            cpu_rmsnorm(c->xn + (size_t)i * dim, c->x + (size_t)i * dim, L->ffn_norm, dim, cfg->norm_eps);
        cpu_gpu_round(m, c->xn, (size_t)n * dim);
        if (cpu_moe(m, l, n, c->tok, c->xn, c->f, &c->mb)) {
            snprintf(err, errlen, "cpu backend: MoE failed in layer %d (out of memory or bad tid2eid)", l);
            return -1;
        }
        cpu_hc_post(m, c->X, c->f, n, c->post, c->comb);
        if (be->sublayers && 2 * l + 2 >= be->sublayers) break;
    }

    /* head for the rows that want logits */
    int r = 0;
    for (int s = 0; s < n_spans; s++)
        for (int k = in[s].logits_from; k < in[s].n; k++, r++)
            memcpy(c->Xl + (size_t)r * width, c->X + (size_t)(c->spans[s].off + k) * width, width * sizeof(float));
    if (nl > 0) {
        cpu_hc_head(m, c->Xl, nl, c->yl, c->mix);
        for (int i = 0; i < nl; i++)
            cpu_rmsnorm(c->yl + (size_t)i * dim, c->yl + (size_t)i * dim, w->norm, dim, cfg->norm_eps);
        cpu_gpu_round(m, c->yl, (size_t)nl * dim);
        cpu_matmul_dense(m, &w->head, 0, V, c->yl, dim, nl, c->lg, V);
    }
    r = 0;
    for (int s = 0; s < n_spans; s++) {
        int cnt = in[s].n - in[s].logits_from;
        if (in[s].sample)   /* logits_from is n - 1: one row, chosen from here */
            in[s].token = sl_sample(&c->smp, in[s].sample, c->lg + (size_t)r * V, in[s].hist, in[s].n_hist,
                                    &(sl_rng){in[s].rng}, &in[s].logprob);
        else if (cnt > 0)
            memcpy(in[s].logits, c->lg + (size_t)r * V, (size_t)cnt * V * sizeof(float));
        r += cnt;
        in[s].st->pos += in[s].n;
    }
    return 0;
}

static int cpu_forward(sl_backend *be, sl_seq_span *in, int n_spans, char *err, size_t errlen) {
    for (int s = 0; s < n_spans; s++)
        if (in[s].fed) { snprintf(err, errlen, "cpu backend: a fed span outside launch"); return -1; }
    return run_step(be, in, n_spans, err, errlen);
}

/* The CPU runs a launched step at once; collect only hands it over. */
static int launch_failed(cpu_impl *c) {   /* a failed launch or collect drops every launched step */
    c->pending = 0;
    return -1;
}

static int cpu_launch(sl_backend *be, sl_seq_span *in, int n_spans, char *err, size_t errlen) {
    cpu_impl *c = be->impl;
    if (c->pending == 2) { snprintf(err, errlen, "cpu backend: a third launched step"); return launch_failed(c); }
    for (int s = 0; s < n_spans; s++) {
        if (in[s].n != 1 || in[s].logits_from != 0 || !in[s].sample) return 1;
        if (in[s].fed && fed_token(c, in[s].st, s) < 0) {
            snprintf(err, errlen, "cpu backend: fed span %d has no launched step before it", s);
            return launch_failed(c);
        }
    }
    if (run_step(be, in, n_spans, err, errlen)) return launch_failed(c);
    c->last = in;
    c->n_last = n_spans;
    c->pending++;
    return 0;
}

static int cpu_collect(sl_backend *be, char *err, size_t errlen) {
    cpu_impl *c = be->impl;
    if (!c->pending) { snprintf(err, errlen, "cpu backend: collect without a launched step"); return launch_failed(c); }
    c->pending--;
    return 0;
}

static void cpu_destroy(sl_backend *be) {
    if (!be) return;
    cpu_impl *c = be->impl;
    if (c) {
        cpu_pool_destroy(c->m.tp);
        free(c->m.freq_main); free(c->m.freq_comp);
        free(c->X); free(c->x); free(c->xn); free(c->f); free(c->post); free(c->comb); free(c->mix);
        free(c->tok); free(c->spans); free(c->Xl); free(c->yl); free(c->lg);
        cpu_attn_buf_free(c->ab);
        cpu_moe_buf_free(c->mb);
        sl_sampler_free(&c->smp);
        free(c);
    }
    free(be);
}

static const sl_backend_ops cpu_ops = {"cpu", cpu_forward, cpu_destroy, 1, NULL, cpu_launch, cpu_collect};

void sl_backend_cpu_set_gpu_numerics(sl_backend *b, int on) {
    ((cpu_impl *)b->impl)->m.bf16 = on;
}

int sl_backend_cpu_set_index_fp8(sl_backend *b, int on) {
    if (on && b->w->cfg.index_head_dim % 64) return -1;
    ((cpu_impl *)b->impl)->m.index_fp8 = on;
    return 0;
}

int sl_backend_cpu_set_kv_fp8(sl_backend *b, int on) {
    const v4_config *c = &b->w->cfg;
    int nope = c->head_dim - c->rope_dim;
    if (on && (nope <= 0 || nope % 64)) return -1;
    ((cpu_impl *)b->impl)->m.kv_fp8 = on;
    return 0;
}

void sl_backend_cpu_log_decisions(sl_backend *b, float *gap, int cap) {
    cpu_impl *c = b->impl;
    c->m.gap = gap;
    c->m.gap_cap = gap ? cap : 0;
    for (int i = 0; i < cap && gap; i++) gap[i] = 1.0f;
}

static int max_i(int a, int b) { return a > b ? a : b; }

sl_backend *sl_backend_cpu_create(const v4_weights *w, v4_state_pool *pool, int n_threads,
                                  char *err, size_t errlen) {
    const v4_config *cfg = &w->cfg;
    if (cfg->hc_mult < 1 || cfg->hc_mult > 64 || cfg->rope_dim / 2 > 256 || cfg->rope_dim % 2 ||
        cfg->index_n_heads > 256 || cfg->o_groups < 1 || (cfg->n_heads * cfg->head_dim) % cfg->o_groups) {
        snprintf(err, errlen, "cpu backend: unsupported config (hc_mult %d, rope_dim %d, index_n_heads %d, o_groups %d)",
                 cfg->hc_mult, cfg->rope_dim, cfg->index_n_heads, cfg->o_groups);
        return NULL;
    }
    sl_backend *be = calloc(1, sizeof *be);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); snprintf(err, errlen, "cpu backend: out of memory"); return NULL; }
    be->ops = &cpu_ops;
    be->w = w;
    be->pool = pool;
    be->impl = c;
    c->m.w = w;
    c->m.pool = pool;
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    c->m.tp = cpu_pool_create(n_threads);
    int half = cfg->rope_dim / 2;
    c->m.freq_main = calloc((size_t)max_i(half, 1), sizeof(double));
    c->m.freq_comp = calloc((size_t)max_i(half, 1), sizeof(double));
    /* widest row any matmul dequantises */
    int cols = max_i(cfg->dim, cfg->q_lora_rank);
    cols = max_i(cols, cfg->n_heads * cfg->head_dim / cfg->o_groups);
    cols = max_i(cols, cfg->o_groups * cfg->o_lora_rank);
    for (int l = 0; l < cfg->n_layers; l++) {
        cols = max_i(cols, w->layers[l].shared.w2.cols);
        if (w->layers[l].experts) cols = max_i(cols, w->layers[l].experts[0].w2.cols);
    }
    if (!c->m.tp || !c->m.freq_main || !c->m.freq_comp || cpu_pool_reserve(c->m.tp, (size_t)cols) ||
        sl_sampler_init(&c->smp, cfg->vocab_size)) {
        cpu_destroy(be);
        snprintf(err, errlen, "cpu backend: out of memory");
        return NULL;
    }
    v4_rope_inv_freq(&cfg->rope_main, cfg->rope_dim, c->m.freq_main);
    v4_rope_inv_freq(&cfg->rope_compress, cfg->rope_dim, c->m.freq_comp);
    return be;
}
