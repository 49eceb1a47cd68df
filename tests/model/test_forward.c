/* test_forward.c — the CPU backend against every fixture's reference logits.
 *
 * For every tests/data/<fixture>/oracle.json: feed each prompt + greedy continuation through the
 * backend token by token, whole, and in chunks of 2, 3, 5, 8, 13; every row must be within 1e-4
 * (absolute) of logits_i.f32 and the argmax after every prompt position must be the greedy token.
 * Then all prompts of a fixture run together in one batch with different chunk sizes per
 * sequence, and must give the same rows bit for bit as each alone.
 * Usage: test_forward [fast | slow | fixture-name-substring]
 */
#include "../../engine/backend.h"
#include "fixture.h"

#define TOL 1e-4

static int failures = 0;

/* Run prompt p through a fresh state in spans of `chunk` (0 = whole); rows out [rows, V]. */
static int run_prompt(sl_backend *be, v4_state_pool *pool, const fx_prompt *p, int chunk, int V, float *out) {
    v4_seq_state st;
    char err[256];
    if (v4_seq_init(pool, &st) || v4_seq_reserve(pool, &st, p->rows)) { fprintf(stderr, "state alloc failed\n"); return -1; }
    int c = chunk > 0 ? chunk : p->rows;
    for (int t = 0; t < p->rows; t += c) {
        int n = t + c <= p->rows ? c : p->rows - t;
        sl_seq_span sp = {p->seq + t, n, &st, 0, out + (size_t)t * V};
        if (be->ops->forward(be, &sp, 1, err, sizeof err)) { fprintf(stderr, "forward: %s\n", err); v4_seq_free(pool, &st); return -1; }
    }
    v4_seq_free(pool, &st);
    return 0;
}

static double check_rows(const fx_fixture *f, int k, const float *got, const char *mode) {
    const fx_prompt *p = &f->p[k];
    int V = f->vocab;
    double md = 0.0;
    int worst = -1;
    for (int t = 0; t < p->rows; t++) {
        double d = fx_maxdiff(got + (size_t)t * V, p->logits + (size_t)t * V, V);
        if (!(d <= md)) { md = d; worst = t; }
        if (t >= p->n_prompt - 1 && fx_argmax(got + (size_t)t * V, V) != p->seq[t + 1]) {
            fprintf(stderr, "%s prompt %d %s: greedy token at row %d: got %d want %d\n", f->name, k, mode, t,
                    fx_argmax(got + (size_t)t * V, V), p->seq[t + 1]);
            failures++;
        }
    }
    if (!(md <= TOL)) {
        fprintf(stderr, "%s prompt %d %s: max abs diff %.3g at row %d\n", f->name, k, mode, md, worst);
        failures++;
    }
    return md;
}

/* All prompts at once: sequence k advances by chunk sizes (k % 4) + 1, 3, ... in one batch per step. */
static void batch_check(sl_backend *be, v4_state_pool *pool, const fx_fixture *f, float **alone) {
    int V = f->vocab, n = f->n;
    v4_seq_state st[FX_MAX_PROMPTS];
    int fed[FX_MAX_PROMPTS];
    float *got[FX_MAX_PROMPTS];
    sl_seq_span sp[FX_MAX_PROMPTS];
    char err[256];
    for (int k = 0; k < n; k++) {
        if (v4_seq_init(pool, &st[k]) || v4_seq_reserve(pool, &st[k], f->p[k].rows)) { failures++; return; }
        fed[k] = 0;
        got[k] = malloc((size_t)f->p[k].rows * V * sizeof(float));
    }
    for (int step = 0;; step++) {
        int ns = 0;
        for (int k = 0; k < n; k++) {
            int left = f->p[k].rows - fed[k];
            if (left <= 0) continue;
            int c = ((k + step) % 4) * 2 + 1;
            if (c > left) c = left;
            sp[ns++] = (sl_seq_span){f->p[k].seq + fed[k], c, &st[k], 0, got[k] + (size_t)fed[k] * V};
            fed[k] += c;
        }
        if (!ns) break;
        if (be->ops->forward(be, sp, ns, err, sizeof err)) { fprintf(stderr, "batch forward: %s\n", err); failures++; break; }
    }
    for (int k = 0; k < n; k++) {
        if (memcmp(got[k], alone[k], (size_t)f->p[k].rows * V * sizeof(float))) {
            fprintf(stderr, "%s prompt %d: batched rows differ from alone (max %.3g)\n", f->name, k,
                    fx_maxdiff(got[k], alone[k], f->p[k].rows * V));
            failures++;
        }
        free(got[k]);
        v4_seq_free(pool, &st[k]);
    }
}

/* ---- MoE offload hook: an independent naive MoE (double accumulation, dequantised rows) */
typedef struct { const v4_weights *w; int calls, layers_seen; } hook_ctx;

static double naive_swiglu_row(const v4_expert_w *e, const float *x, int dim, float lim, double *h, float *row) {
    int inter = e->w1.rows;
    for (int k = 0; k < inter; k++) {
        double g = 0, u = 0;
        qt_dequant_row(&e->w1, k, row);
        for (int d = 0; d < dim; d++) g += (double)row[d] * x[d];
        qt_dequant_row(&e->w3, k, row);
        for (int d = 0; d < dim; d++) u += (double)row[d] * x[d];
        if (lim > 0) { u = u < -lim ? -lim : u > lim ? lim : u; g = g > lim ? lim : g; }
        h[k] = g / (1.0 + exp(-g)) * u;
    }
    return 0.0;
}

static int naive_moe(void *ctxp, int l, int n, const int32_t *tok, const float *xn, float *f) {
    hook_ctx *ctx = ctxp;
    const v4_weights *w = ctx->w;
    const v4_config *c = &w->cfg;
    const v4_layer_w *L = &w->layers[l];
    int dim = c->dim, E = c->n_routed_experts, K = c->n_active;
    ctx->calls++;
    ctx->layers_seen |= 1 << (l & 31);
    float *row = malloc((size_t)(dim > 4096 ? dim : 4096) * 4 + (size_t)L->shared.w2.cols * 4);
    double *h = malloc((size_t)(L->shared.w1.rows > c->moe_inter ? L->shared.w1.rows : c->moe_inter) * sizeof *h);
    double *sc = malloc((size_t)E * sizeof *sc);
    for (int i = 0; i < n; i++) {
        const float *x = xn + (size_t)i * dim;
        for (int e = 0; e < E; e++) {
            double a = 0;
            qt_dequant_row(&L->gate, e, row);
            for (int d = 0; d < dim; d++) a += (double)row[d] * x[d];
            sc[e] = a;
        }
        if (c->score_func == V4_SCORE_SOFTMAX) {
            double m = sc[0], z = 0;
            for (int e = 1; e < E; e++) m = sc[e] > m ? sc[e] : m;
            for (int e = 0; e < E; e++) z += (sc[e] = exp(sc[e] - m));
            for (int e = 0; e < E; e++) sc[e] /= z;
        } else {
            for (int e = 0; e < E; e++)
                sc[e] = c->score_func == V4_SCORE_SIGMOID ? 1 / (1 + exp(-sc[e]))
                                                          : sqrt(sc[e] > 0 ? sc[e] + log1p(exp(-sc[e])) : log1p(exp(sc[e])));
        }
        int idx[64];
        double wt[64], sum = 0;
        for (int k = 0; k < K; k++) {
            if (L->tid2eid) { idx[k] = L->tid2eid[(size_t)tok[i] * K + k]; }
            else {
                int b = -1;
                for (int e = 0; e < E; e++) {
                    int used = 0;
                    for (int q = 0; q < k; q++) used |= idx[q] == e;
                    double v = sc[e] + (L->gate_bias ? L->gate_bias[e] : 0);
                    if (!used && (b < 0 || v > sc[b] + (L->gate_bias ? L->gate_bias[b] : 0))) b = e;
                }
                idx[k] = b;
            }
            wt[k] = sc[idx[k]];
            sum += wt[k];
        }
        double *y = calloc((size_t)dim, sizeof *y);
        for (int k = 0; k <= K; k++) {              /* K = the shared expert */
            const v4_expert_w *e = k < K ? &L->experts[idx[k]] : &L->shared;
            double s = k < K ? (c->score_func == V4_SCORE_SOFTMAX ? wt[k] : wt[k] / sum) * c->route_scale : 1.0;
            naive_swiglu_row(e, x, dim, c->swiglu_limit, h, row);
            for (int d = 0; d < dim; d++) {
                double a = 0;
                qt_dequant_row(&e->w2, d, row);
                for (int q = 0; q < e->w2.cols; q++) a += (double)row[q] * h[q];
                y[d] += s * a;
            }
        }
        for (int d = 0; d < dim; d++) f[(size_t)i * dim + d] = (float)y[d];
        free(y);
    }
    free(row); free(h); free(sc);
    return 0;
}

static int fail_hook(void *ctx, int l, int n, const int32_t *tok, const float *xn, float *f) {
    (void)ctx; (void)l; (void)n; (void)tok; (void)xn; (void)f;
    return -1;
}

/* The MoE hook contract: called for every layer, its output used; -1 fails the step. */
static void hook_check(const v4_weights *w, v4_state_pool *pool, const fx_fixture *f) {
    char err[256];
    hook_ctx ctx = {w, 0, 0};
    sl_backend *be = sl_backend_cpu_create_hooked(w, pool, 2, naive_moe, &ctx, err, sizeof err);
    if (!be) { fprintf(stderr, "hooked backend: %s\n", err); failures++; return; }
    const fx_prompt *p = &f->p[0];
    float *got = malloc((size_t)p->rows * f->vocab * sizeof(float));
    if (run_prompt(be, pool, p, 4, f->vocab, got)) failures++;
    else {
        double d = check_rows(f, 0, got, "naive MoE hook");
        printf("%s: naive MoE through the offload hook: max abs diff %.2g, %d calls\n", f->name, d, ctx.calls);
        int all = w->cfg.n_layers >= 31 ? -1 : (1 << w->cfg.n_layers) - 1;
        if (ctx.layers_seen != all) { fprintf(stderr, "hook not called for every layer\n"); failures++; }
    }
    be->ops->destroy(be);
    be = sl_backend_cpu_create_hooked(w, pool, 1, fail_hook, NULL, err, sizeof err);
    if (be) {
        v4_seq_state st;
        if (!v4_seq_init(pool, &st) && !v4_seq_reserve(pool, &st, 2)) {
            sl_seq_span sp = {p->seq, 2, &st, 0, got};
            if (be->ops->forward(be, &sp, 1, err, sizeof err) != -1 || !strstr(err, "MoE")) {
                fprintf(stderr, "a failing hook must fail the step\n");
                failures++;
            }
        }
        v4_seq_free(pool, &st);
        be->ops->destroy(be);
    }
    free(got);
}

int main(int argc, char **argv) {
    char names[FX_MAX][256];
    int nf = fx_list(SLUICE_TEST_DATA, names, FX_MAX);
    if (nf == 0) { fprintf(stderr, "no fixtures under %s\n", SLUICE_TEST_DATA); return 1; }
    const int chunks[] = {1, 0, 2, 3, 5, 8, 13};
    int tested = 0;
    for (int fi = 0; fi < nf; fi++) {
        if (!fx_selected(SLUICE_TEST_DATA, names[fi], argc > 1 ? argv[1] : NULL)) continue;
        fx_fixture f;
        char dir[1400], err[512];
        if (snprintf(dir, sizeof dir, "%s/%s", SLUICE_TEST_DATA, names[fi]) >= (int)sizeof dir || fx_load(dir, names[fi], &f)) { fprintf(stderr, "%s: cannot read oracle\n", names[fi]); failures++; continue; }
        v4_weights w;
        if (v4_weights_load(dir, &w, err, sizeof err)) { fprintf(stderr, "%s: %s\n", names[fi], err); failures++; fx_free(&f); continue; }
        if (w.cfg.vocab_size != f.vocab) { fprintf(stderr, "%s: vocab %d vs rows of %d\n", names[fi], w.cfg.vocab_size, f.vocab); failures++; }
        v4_state_pool pool;
        sl_backend *be = NULL;
        if (v4_pool_init(&pool, &w.cfg, (size_t)1 << 30, err, sizeof err) ||
            !(be = sl_backend_cpu_create(&w, &pool, 2, err, sizeof err))) {
            fprintf(stderr, "%s: %s\n", names[fi], err);
            failures++;
            v4_weights_free(&w);
            fx_free(&f);
            continue;
        }
        float *alone[FX_MAX_PROMPTS];
        printf("%-28s", names[fi]);
        for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
            double md = 0.0;
            char mode[32];
            snprintf(mode, sizeof mode, chunks[ci] ? "chunk %d" : "whole", chunks[ci]);
            for (int k = 0; k < f.n; k++) {
                float *got = malloc((size_t)f.p[k].rows * f.vocab * sizeof(float));
                if (run_prompt(be, &pool, &f.p[k], chunks[ci], f.vocab, got)) { failures++; free(got); continue; }
                double d = check_rows(&f, k, got, mode);
                if (!(d <= md)) md = d;
                if (ci == 0) alone[k] = got;
                else free(got);
            }
            printf(" %s=%.2g", mode, md);
        }
        printf("\n");
        batch_check(be, &pool, &f, alone);
        if (fi == 0 || !strcmp(names[fi], "tiny-v4-public") || !strcmp(names[fi], "tiny-v4-hc2-yarn-long"))
            hook_check(&w, &pool, &f);
        for (int k = 0; k < f.n; k++) free(alone[k]);
        be->ops->destroy(be);
        v4_pool_free(&pool);
        v4_weights_free(&w);
        fx_free(&f);
        tested++;
    }
    if (!tested && !(argc > 1 && !strcmp(argv[1], "slow"))) { fprintf(stderr, "no fixture matched\n"); return 1; }
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
