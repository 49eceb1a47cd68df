/* test_forward.c — the CPU backend against every fixture's reference logits.
 *
 * For every tests/data/<fixture>/oracle.json: feed each prompt + greedy continuation through the
 * backend token by token, whole, and in chunks of 2, 3, 5, 8, 13; every row must be within 1e-4
 * (absolute) of logits_i.f32 and the argmax after every prompt position must be the greedy token.
 * Then all prompts of a fixture run together in one batch with different chunk sizes per
 * sequence, and must give the same rows bit for bit as each alone. With FP8 index keys
 * (sl_backend_cpu_set_index_fp8), every indexer key the first prompt leaves is an FP8 block row (rounding it again
 * changes nothing); with FP8 KV (sl_backend_cpu_set_kv_fp8), every window row and main compressed entry, in its dims
 * before the rotated ones; a model that cannot keep them (index_head_dim, or head_dim - rope_dim, not a multiple of
 * 64) refuses the option.
 * Usage: test_forward [fast | slow | fixture-name-substring]
 */
#include "../../engine/backend.h"
#include "../../engine/quant.h"
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
        sl_seq_span sp = {.tokens = p->seq + t, .n = n, .st = &st, .logits_from = 0, .logits = out + (size_t)t * V};
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
            sp[ns++] = (sl_seq_span){.tokens = f->p[k].seq + fed[k], .n = c, .st = &st[k], .logits_from = 0, .logits = got[k] + (size_t)fed[k] * V};
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

/* A row of n floats is a kept FP8 block row: rounding it again changes nothing, and it is not all zeros. */
static int fp8_row_ok(const float *x, int n) {
    float y[1024];
    int nonzero = 0;
    memcpy(y, x, (size_t)n * sizeof(float));
    qt_fp8_round_blocks(y, n, 64);
    for (int i = 0; i < n; i++) nonzero |= x[i] != 0.0f;
    return nonzero && !memcmp(x, y, (size_t)n * sizeof(float));
}

/* With FP8 index keys (kv 0) or FP8 KV (kv 1) on, the first prompt's state: every indexer key, or every window row and
 * main compressed entry in its dims before the rotated ones, is an FP8 block row; none may be all zeros. A model that
 * cannot keep them refuses the option. */
static void fp8_state_check(sl_backend *be, v4_state_pool *pool, const fx_fixture *f, const v4_config *c, int kv) {
    const int n = kv ? c->head_dim - c->rope_dim : c->index_head_dim;
    const char *what = kv ? "FP8 KV" : "FP8 index keys";
    int (*set)(sl_backend *, int) = kv ? sl_backend_cpu_set_kv_fp8 : sl_backend_cpu_set_index_fp8;
    if (n <= 0 || n % 64) {
        if (set(be, 1) != -1) {
            fprintf(stderr, "%s: %s accepted with %d dims to quantise\n", f->name, what, n);
            failures++;
        }
        return;
    }
    const fx_prompt *p = &f->p[0];
    float *out = malloc((size_t)p->rows * f->vocab * sizeof(float));
    v4_seq_state st;
    char err[256] = "no pages";
    int rows = 0, bad = 0;
    if (n > 1024 || set(be, 1) || !out || v4_seq_init(pool, &st)) {
        fprintf(stderr, "%s: %s: cannot start\n", f->name, what);
        failures++;
        free(out);
        return;
    }
    sl_seq_span sp = {.tokens = p->seq, .n = p->rows, .st = &st, .logits_from = 0, .logits = out};
    if (v4_seq_reserve(pool, &st, p->rows) || be->ops->forward(be, &sp, 1, err, sizeof err)) {
        fprintf(stderr, "%s: %s: forward: %s\n", f->name, what, err);
        failures++;
        v4_seq_free(pool, &st);
        set(be, 0);
        free(out);
        return;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const int r = c->compress_ratio[l];
        const float *row;
        if (kv) {
            for (int t = p->rows > c->window ? p->rows - c->window : 0; t < p->rows; t++, rows++) {
                row = v4_ring(pool, &st, l) + (size_t)(t % c->window) * c->head_dim;
                bad += !fp8_row_ok(row, n);
            }
        }
        if ((kv && r > 0) || (!kv && r == 4))
            for (int w = 0; w < p->rows / r; w++, rows++) {
                row = kv ? v4_entry(pool, &st, l, w) : v4_ikey(pool, &st, l, w);
                bad += !fp8_row_ok(row, n);
            }
    }
    printf("%-28s %s: %d of %d rows are not FP8 block rows\n", f->name, what, bad, rows);
    if (bad || rows == 0) failures++;
    v4_seq_free(pool, &st);
    set(be, 0);
    free(out);
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
        fp8_state_check(be, &pool, &f, &w.cfg, 0);
        fp8_state_check(be, &pool, &f, &w.cfg, 1);
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
