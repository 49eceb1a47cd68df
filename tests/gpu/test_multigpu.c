/* test_multigpu.c — the model split across ranks (engine/shard.h) against the same model on one rank and against the
 * CPU reference. n ranks run on n GPUs with peer access where the machine has them, else all on GPU 0 (one stream, the
 * in-place all-reduce): the split's arithmetic is the same either way, only the all-reduce differs.
 *   - Fixtures (hub FP8 + MXFP4: FP8 block-aligned shares of wq_b, wo_a, wo_b; the transformers layout; the hc2 /
 *     YaRN long one) on 2 ranks: each prompt + its greedy continuation teacher-forced in chunks of 5 and then token
 *     by token; every row within relative L2 2e-2 of the one-rank row and of the CPU reference (the cuda backend's
 *     storage numerics), and the same argmax as the one-rank run wherever that run's top-2 margin is >= 0.05, up to
 *     the first near tie of a top-k decision (test_backend_cuda.c says why).
 *   - A full-width synthetic V4-Flash (sliding, CSA and HCA layers; the fast MoE kernels on each rank's 1/n of every
 *     expert) on 2 and 4 ranks: a 600-token prompt in chunks of 200, then 16 decode steps (CUDA graphs) teacher-forced
 *     with the one-rank run's greedy tokens; every row of the last 32 prompt positions and of the decode within 5e-3
 *     of the one-rank run (the same kernels: only the summation order differs) and 2e-2 of the CPU reference, and the
 *     same argmax as the one-rank run wherever its margin is >= 0.05. Once with the experts from the host (cut there),
 *     once drawn on the GPU (cut there; 2 ranks, no CPU run).
 *   - Splits the model does not divide are refused with one line.
 * Exit 77 without a CUDA device.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/backend.h"
#include "../../engine/synthetic.h"
#include "../model/fixture.h"
#include "logits_cmp.h"

#define MAX_REL_L2 2e-2
#define MIN_MARGIN 0.05f
#define NEAR_TIE 1e-2f        /* against the CPU (test_backend_cuda.c) */
#define NEAR_TIE_SPLIT 1e-3f  /* a split against one rank: the same kernels, only the ranks' summation order differs */

static int failures = 0;
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } while (0)

static int g_ndev;

/* n ranks on GPUs 0..n-1 where there are n that all reach each other, else every rank on GPU 0 */
static sl_backend *open_ranks(const v4_weights *w, v4_state_pool *pool, int n, char *err, size_t errlen)
{
    int distinct = n > 1 && g_ndev >= n;
    for (int i = 0; i < n && distinct; i++)
        for (int j = 0; j < n; j++) {
            int ok = 0;
            if (i != j && (cudaDeviceCanAccessPeer(&ok, i, j) != cudaSuccess || !ok)) distinct = 0;
        }
    sl_cuda_opts o = {.n_devices = n};
    for (int r = 0; r < n; r++) o.devices[r] = distinct ? r : 0;
    if (n > 1) printf("%d ranks on %s\n", n, distinct ? "as many GPUs (the peer all-reduce)" : "GPU 0 (one stream)");
    return sl_backend_cuda_create(w, pool, &o, err, errlen);
}

/* Feed tok[0..n) in spans of `chunk`, keeping the logits of rows [keep0, n) in out. */
static int feed(sl_backend *be, v4_state_pool *pool, v4_seq_state *st, const int32_t *tok, int n, int chunk, int keep0,
                int V, float *out)
{
    char err[512];
    for (int t = 0; t < n; t += chunk) {
        const int m = t + chunk <= n ? chunk : n - t;
        const int from = keep0 > t ? (keep0 - t < m ? keep0 - t : m) : 0;
        sl_seq_span sp = {.tokens = tok + t, .n = m, .st = st, .logits_from = from,
                          .logits = out + (size_t)(t + from - keep0) * V};
        if (be->ops->forward(be, &sp, 1, err, sizeof err)) {
            FAIL("%s forward: %s", be->ops->name, err);
            return -1;
        }
    }
    (void)pool;
    return 0;
}

typedef struct {
    double worst;
    int flips;
} cmp_out;

/* rows [0, clean) of got against want (argmax flips where want's margin is clear) */
static cmp_out compare_rows(const float *got, const float *want, int rows, int clean, int V)
{
    cmp_out o = {0, 0};
    for (int r = 0; r < rows && r < clean; r++) {
        const double e = logits_rel_l2(got + (size_t)r * V, want + (size_t)r * V, V);
        if (!(e <= o.worst)) o.worst = e;
        float m;
        const int a = logits_argmax(want + (size_t)r * V, V, &m);
        if (m >= MIN_MARGIN && logits_argmax(got + (size_t)r * V, V, NULL) != a) o.flips++;
    }
    return o;
}

static void judge(const char *what, int n, cmp_out vs_one, cmp_out vs_cpu, int rows, int clean_one, int clean_cpu)
{
    printf("%-34s %d ranks: rows %3d: vs one rank (%3d asserted) rel L2 %.2e, argmax flips %d; vs CPU (%3d) %.2e\n",
           what, n, rows, clean_one, vs_one.worst, vs_one.flips, clean_cpu, vs_cpu.worst);   /* no CPU run: 0 */
    if (!(vs_one.worst <= MAX_REL_L2)) FAIL("%s, %d ranks: rel L2 %.3e against one rank", what, n, vs_one.worst);
    if (vs_one.flips) FAIL("%s, %d ranks: %d clear argmax flips against one rank", what, n, vs_one.flips);
    if (!(vs_cpu.worst <= MAX_REL_L2)) FAIL("%s, %d ranks: rel L2 %.3e against the CPU", what, n, vs_cpu.worst);
}

static void test_fixture(const char *name)
{
    char dir[1300], err[512];
    snprintf(dir, sizeof dir, "%.1000s/%.255s", SLUICE_TEST_DATA, name);
    fx_fixture f;
    v4_weights w;
    if (fx_load(dir, name, &f)) { FAIL("%s: cannot load the fixture", name); return; }
    if (v4_weights_load(dir, &w, err, sizeof err)) { FAIL("%s: %s", name, err); fx_free(&f); return; }
    v4_state_pool pr, p1, p2, p4;
    if (v4_pool_init(&pr, &w.cfg, (size_t)1 << 30, err, sizeof err) || v4_pool_init(&p1, &w.cfg, (size_t)1 << 30, err, sizeof err) ||
        v4_pool_init(&p2, &w.cfg, (size_t)1 << 30, err, sizeof err) || v4_pool_init(&p4, &w.cfg, (size_t)1 << 30, err, sizeof err)) {
        FAIL("%s: %s", name, err);
        return;
    }
    sl_backend *ref = sl_backend_cpu_create(&w, &pr, 0, err, sizeof err);
    sl_backend *one = ref ? open_ranks(&w, &p1, 1, err, sizeof err) : NULL;
    sl_backend *two = one ? open_ranks(&w, &p2, 2, err, sizeof err) : NULL;
    if (!ref || !one || !two) { FAIL("%s: backend: %s", name, err); goto out; }
    sl_backend_cpu_set_gpu_numerics(ref, 1);
    if (w.cfg.o_groups % 4) {   /* 4 ranks of 2 output groups: one line saying what does not divide */
        sl_backend *bad = open_ranks(&w, &p4, 4, err, sizeof err);
        if (bad) { FAIL("%s: 4 ranks of %d output groups opened", name, w.cfg.o_groups); bad->ops->destroy(bad); }
        else if (!strstr(err, "do not divide")) FAIL("%s: 4 ranks refused with '%s'", name, err);
        else printf("%-34s 4 ranks refused: %s\n", name, err);
    }
    const int V = f.vocab;
    for (int k = 0; k < f.n; k++) {
        const fx_prompt *p = &f.p[k];
        float *lr = malloc((size_t)p->rows * V * sizeof(float)), *l1 = malloc((size_t)p->rows * V * sizeof(float));
        float *l2 = malloc((size_t)p->rows * V * sizeof(float)), *gap = malloc((size_t)p->rows * sizeof(float));
        for (int chunk = 5; chunk >= 1; chunk -= 4) {   /* chunks of 5 (eager), then token by token (graphs) */
            v4_seq_state sr, s1, s2;
            int rc = v4_seq_init(&pr, &sr) || v4_seq_reserve(&pr, &sr, p->rows) || v4_seq_init(&p1, &s1) ||
                     v4_seq_reserve(&p1, &s1, p->rows) || v4_seq_init(&p2, &s2) || v4_seq_reserve(&p2, &s2, p->rows);
            if (rc) { FAIL("%s: state", name); break; }
            sl_backend_cpu_log_decisions(ref, gap, p->rows);
            rc = feed(ref, &pr, &sr, p->seq, p->rows, chunk, 0, V, lr);
            sl_backend_cpu_log_decisions(ref, NULL, 0);
            if (!rc) rc = feed(one, &p1, &s1, p->seq, p->rows, chunk, 0, V, l1);
            if (!rc) rc = feed(two, &p2, &s2, p->seq, p->rows, chunk, 0, V, l2);
            v4_seq_free(&pr, &sr);
            v4_seq_free(&p1, &s1);
            v4_seq_free(&p2, &s2);
            if (rc) break;
            int clean = 0, clean1 = 0;
            while (clean < p->rows && gap[clean] >= NEAR_TIE) clean++;
            while (clean1 < p->rows && gap[clean1] >= NEAR_TIE_SPLIT) clean1++;
            char what[96];
            snprintf(what, sizeof what, "%s p%d %s", name, k, chunk > 1 ? "chunks of 5" : "token by token");
            judge(what, 2, compare_rows(l2, l1, p->rows, clean1, V), compare_rows(l2, lr, p->rows, clean, V), p->rows,
                  clean1, clean);
            const cmp_out all = compare_rows(l2, l1, p->rows, p->rows, V);
            printf("%-34s every row against one rank: rel L2 %.2e, argmax flips %d (not asserted)\n", "", all.worst,
                   all.flips);
        }
        free(lr);
        free(l1);
        free(l2);
        free(gap);
    }
out:
    if (two) two->ops->destroy(two);
    if (one) one->ops->destroy(one);
    if (ref) ref->ops->destroy(ref);
    v4_pool_free(&pr);
    v4_pool_free(&p1);
    v4_pool_free(&p2);
    v4_pool_free(&p4);
    v4_weights_free(&w);
    fx_free(&f);
}

#define CTX 600
#define CHUNK 200
#define TAIL 32
#define DECODE 16
#define SPLIT_REL_L2 5e-3   /* the same kernels on both sides: only the ranks' summation order differs */

/* host: the routed experts on the host too (the CPU reference runs; each rank cuts its share on the host), else drawn
 * on the GPU (each rank cuts its share there). */
static void test_synthetic(int host)
{
    const char *spec = "v4-flash:ratios=0,4,128";
    char err[512], what[96];
    v4_weights w;
    if (v4_weights_synthetic(spec, host, &w, err, sizeof err)) { FAIL("%s", err); return; }
    snprintf(what, sizeof what, "synthetic %s, experts %s", spec, host ? "from the host" : "drawn on the GPU");
    const int V = w.cfg.vocab_size, rows = TAIL + DECODE;
    v4_state_pool pr, p1, pn;
    if (v4_pool_init(&pr, &w.cfg, (size_t)2 << 30, err, sizeof err) || v4_pool_init(&p1, &w.cfg, (size_t)2 << 30, err, sizeof err)) {
        FAIL("%s", err);
        return;
    }
    sl_backend *ref = host ? sl_backend_cpu_create(&w, &pr, 0, err, sizeof err) : NULL;
    sl_backend *one = ref || !host ? open_ranks(&w, &p1, 1, err, sizeof err) : NULL;
    if ((host && !ref) || !one) { FAIL("%s: backend: %s", what, err); return; }
    if (ref) sl_backend_cpu_set_gpu_numerics(ref, 1);
    int32_t *tok = malloc((CTX + DECODE) * sizeof *tok);
    random_tokens(tok, CTX, V, 0x9E3779B97F4A7C15ull);
    float *lr = malloc((size_t)rows * V * sizeof(float)), *l1 = malloc((size_t)rows * V * sizeof(float));
    float *ln = malloc((size_t)rows * V * sizeof(float));
    v4_seq_state sr, s1;
    if ((ref && (v4_seq_init(&pr, &sr) || v4_seq_reserve(&pr, &sr, CTX + DECODE))) || v4_seq_init(&p1, &s1) ||
        v4_seq_reserve(&p1, &s1, CTX + DECODE)) {
        FAIL("synthetic: state");
        return;
    }
    /* the one-rank run picks the decode tokens (greedy); the CPU and the splits are fed the same */
    int rc = feed(one, &p1, &s1, tok, CTX, CHUNK, CTX - TAIL, V, l1);
    for (int d = 0; d < DECODE && !rc; d++) {
        tok[CTX + d] = logits_argmax(l1 + (size_t)(TAIL + d - 1) * V, V, NULL);
        rc = feed(one, &p1, &s1, tok + CTX + d, 1, 1, 0, V, l1 + (size_t)(TAIL + d) * V);
    }
    if (ref) {
        if (!rc) rc = feed(ref, &pr, &sr, tok, CTX, CHUNK, CTX - TAIL, V, lr);
        for (int d = 0; d < DECODE && !rc; d++)
            rc = feed(ref, &pr, &sr, tok + CTX + d, 1, 1, 0, V, lr + (size_t)(TAIL + d) * V);
        v4_seq_free(&pr, &sr);
    }
    v4_seq_free(&p1, &s1);
    for (int n = 2; n <= (host ? 4 : 2) && !rc; n += 2) {
        if (v4_pool_init(&pn, &w.cfg, (size_t)2 << 30, err, sizeof err)) { FAIL("%s", err); break; }
        sl_backend *split = open_ranks(&w, &pn, n, err, sizeof err);
        v4_seq_state sn;
        if (!split) FAIL("%s, %d ranks: %s", what, n, err);
        else if (v4_seq_init(&pn, &sn) || v4_seq_reserve(&pn, &sn, CTX + DECODE)) FAIL("synthetic: state");
        else {
            int r2 = feed(split, &pn, &sn, tok, CTX, CHUNK, CTX - TAIL, V, ln);
            for (int d = 0; d < DECODE && !r2; d++)
                r2 = feed(split, &pn, &sn, tok + CTX + d, 1, 1, 0, V, ln + (size_t)(TAIL + d) * V);
            if (!r2) {
                const cmp_out vs_one = compare_rows(ln, l1, rows, rows, V);
                const cmp_out vs_cpu = ref ? compare_rows(ln, lr, rows, rows, V) : (cmp_out){0, 0};
                judge(what, n, vs_one, vs_cpu, rows, rows, ref ? rows : 0);
                if (!(vs_one.worst <= SPLIT_REL_L2))
                    FAIL("%s, %d ranks: rel L2 %.3e against one rank > %.0e", what, n, vs_one.worst, SPLIT_REL_L2);
            }
            v4_seq_free(&pn, &sn);
        }
        if (split) split->ops->destroy(split);
        v4_pool_free(&pn);
    }
    if (host && w.cfg.n_heads % 3 && v4_pool_init(&pn, &w.cfg, (size_t)1 << 30, err, sizeof err) == 0) {
        sl_backend *bad = open_ranks(&w, &pn, 3, err, sizeof err);
        if (bad) { FAIL("synthetic: 3 ranks of %d heads opened", w.cfg.n_heads); bad->ops->destroy(bad); }
        else if (!strstr(err, "do not divide")) FAIL("synthetic: 3 ranks refused with '%s'", err);
        v4_pool_free(&pn);
    }
    one->ops->destroy(one);
    if (ref) ref->ops->destroy(ref);
    v4_pool_free(&pr);
    v4_pool_free(&p1);
    v4_weights_free(&w);
    free(tok);
    free(lr);
    free(l1);
    free(ln);
}

int main(void)
{
    if (cudaGetDeviceCount(&g_ndev) != cudaSuccess || g_ndev < 1) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    test_fixture("tiny-v4-hub-fp8-mxfp4");
    test_fixture("tiny-v4-public");
    test_fixture("tiny-v4-hc2-yarn-long");
    test_synthetic(1);
    test_synthetic(0);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
