/* test_backend_cuda.c — the "cuda" engine backend (MoE on the GPU, the rest on the CPU reference)
 * against the CPU backend on the quantised fixtures (tests/data/tiny-v4-hub-fp8-mxfp4: MXFP4 experts,
 * tiny-v4-modelopt-nvfp4: NVFP4 experts; both FP8 shared experts, hidden 256, moe_inter 128).
 *
 * Per fixture and oracle prompt (prompt + greedy continuation fed whole, teacher-forced):
 *   - max |logit_cuda - logit_cpu| over every row, and the mean over rows of the row's max;
 *   - top-1 agreement: rows whose argmax is the same on both backends;
 *   - greedy agreement: rows after the prompt whose cuda argmax is the oracle's greedy token.
 * The GPU path feeds bf16 activations to the MoE (the CPU keeps fp32) and can flip a near-tie in
 * the router, so it is held to bounds, printed with the numbers. Also: token-by-token decode on
 * cuda (batch 1) vs cpu; a 16-token MoE chunking (SLUICE_CUDA_MOE_TOKENS) gives the same rows as
 * unchunked; every prompt as one span of a single step (a MoE batch of all rows, >= 256: the shared expert's bf16
 * GEMMs, v41) within the same bounds, differing from the FP8 shared kernels (SLUICE_CUDA_SHARED_BF16=0), which give
 * the rows of each prompt alone bit for bit; a bad SLUICE_CUDA_SHARED_BF16 fails to open with a line naming it;
 * the engine with backend "cuda" generates greedy tokens (compared with the oracle);
 * a model the kernels cannot take (tiny-v4-public, hidden 64) fails to open with a line naming
 * the constraint. Exit 77 without a CUDA device.
 */
#include <cuda_runtime_api.h>
#include <time.h>

#include "../../engine/backend.h"
#include "../../engine/engine.h"
#include "../model/fixture.h"

/* bounds (bf16 MoE activations, FP4 weights decoded exactly on both sides). Measured on the H200
 * (bench/NOTES.md, commit 5bad39e; deterministic): hub MXFP4 max 1.52, mean row 0.109, top-1 96.3 %,
 * greedy 93.8 %; ModelOpt NVFP4 max 1.40, mean row 0.066, top-1 99.3 %, greedy 99.0 %. That run used
 * MIN_TOP1 0.90 and MAX_ABS 3.0; tightened afterwards to these (the rest as run). */
#define MIN_TOP1 0.93        /* fraction of rows whose argmax agrees with the CPU */
#define MIN_GREEDY 0.90      /* fraction of generated-position rows giving the oracle's greedy token */
#define MAX_ABS 2.5          /* any row, any logit (a flipped router near-tie moves a row) */
#define MAX_MEAN_ROW 0.15    /* mean over rows of the row's max |diff| */
#define MAX_CHUNKED 1e-4     /* MoE chunked by 16 tokens vs whole: the MoE is per token */

static int failures = 0;
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rows of prompt p (prompt + greedy, teacher-forced) in spans of `chunk` (0 = whole). */
static int run(sl_backend *be, v4_state_pool *pool, const fx_prompt *p, int chunk, int V, float *out)
{
    v4_seq_state st;
    char err[256];
    if (v4_seq_init(pool, &st) || v4_seq_reserve(pool, &st, p->rows)) { FAIL("state alloc"); return -1; }
    const int c = chunk > 0 ? chunk : p->rows;
    for (int t = 0; t < p->rows; t += c) {
        const int n = t + c <= p->rows ? c : p->rows - t;
        sl_seq_span sp = {p->seq + t, n, &st, 0, out + (size_t)t * V};
        if (be->ops->forward(be, &sp, 1, err, sizeof err)) {
            FAIL("%s forward: %s", be->ops->name, err);
            v4_seq_free(pool, &st);
            return -1;
        }
    }
    v4_seq_free(pool, &st);
    return 0;
}

/* Every prompt of f as its own span of one step (rows of prompt k at out + offset of k): one MoE call of all their
 * rows per layer. */
static int run_one_step(sl_backend *be, v4_state_pool *pool, const fx_fixture *f, int V, float *out)
{
    v4_seq_state st[FX_MAX_PROMPTS];
    sl_seq_span sp[FX_MAX_PROMPTS];
    char err[256];
    int k, rc = -1;
    size_t off = 0;
    for (k = 0; k < f->n; k++) {
        if (v4_seq_init(pool, &st[k]) || v4_seq_reserve(pool, &st[k], f->p[k].rows)) { FAIL("state alloc"); goto out; }
        sp[k] = (sl_seq_span){f->p[k].seq, f->p[k].rows, &st[k], 0, out + off};
        off += (size_t)f->p[k].rows * V;
    }
    if (be->ops->forward(be, sp, f->n, err, sizeof err)) FAIL("%s forward of %d spans: %s", be->ops->name, f->n, err);
    else rc = 0;
out:
    while (k-- > 0) v4_seq_free(pool, &st[k]);
    return rc;
}

typedef struct { double max_abs, sum_row; long rows, top1, greedy_rows, greedy_ok; } stats;

static void compare(stats *s, const fx_prompt *p, const float *gpu, const float *cpu, int V)
{
    for (int t = 0; t < p->rows; t++) {
        const float *g = gpu + (size_t)t * V, *c = cpu + (size_t)t * V;
        const double d = fx_maxdiff(g, c, V);
        if (!(d <= s->max_abs)) s->max_abs = d;
        s->sum_row += d;
        s->rows++;
        const int ag = fx_argmax(g, V);
        s->top1 += ag == fx_argmax(c, V);
        if (t >= p->n_prompt - 1) {
            s->greedy_rows++;
            s->greedy_ok += ag == p->seq[t + 1];
        }
    }
}

static void check_stats(const char *fx, const char *what, const stats *s)
{
    const double top1 = (double)s->top1 / s->rows, gr = (double)s->greedy_ok / s->greedy_rows,
                 mean = s->sum_row / s->rows;
    printf("%-24s %-14s rows %4ld  max|d| %.4f  mean row max|d| %.4f  top-1 %ld/%ld (%.1f%%)  greedy %ld/%ld (%.1f%%)\n",
           fx, what, s->rows, s->max_abs, mean, s->top1, s->rows, 100 * top1, s->greedy_ok, s->greedy_rows, 100 * gr);
    if (!(s->max_abs <= MAX_ABS)) FAIL("%s %s: max |diff| %.4f > %.2f", fx, what, s->max_abs, MAX_ABS);
    if (!(mean <= MAX_MEAN_ROW)) FAIL("%s %s: mean row max |diff| %.4f > %.2f", fx, what, mean, MAX_MEAN_ROW);
    if (!(top1 >= MIN_TOP1)) FAIL("%s %s: top-1 agreement %.3f < %.2f", fx, what, top1, MIN_TOP1);
    if (!(gr >= MIN_GREEDY)) FAIL("%s %s: greedy agreement %.3f < %.2f", fx, what, gr, MIN_GREEDY);
}

/* Greedy generation through the engine with backend "cuda"; tokens compared with the oracle. */
static void engine_greedy(const char *dir, const fx_fixture *f)
{
    sl_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = dir;
    o.backend = "cuda";
    sl_engine *e;
    char err[256];
    if (sl_engine_open(&o, &e, err, sizeof err)) { FAIL("%s: engine open (cuda): %s", f->name, err); return; }
    if (strcmp(sl_engine_info(e)->backend, "cuda")) FAIL("%s: engine backend is '%s'", f->name, sl_engine_info(e)->backend);
    for (int k = 0; k < f->n; k++) {
        const fx_prompt *p = &f->p[k];
        sl_sampling s;
        memset(&s, 0, sizeof s);
        s.top_p = 1.0f;
        s.repetition_penalty = 1.0f;
        s.max_tokens = p->n_greedy;
        s.ignore_eos = 1;
        uint64_t id;
        if (sl_engine_submit(e, p->seq, p->n_prompt, &s, 0, &id, err, sizeof err)) { FAIL("submit: %s", err); continue; }
        int32_t got[256];
        int n = 0, done = 0, same_prefix = -1, same = 0;
        while (!done) {
            if (sl_engine_step(e) < 0) { FAIL("%s prompt %d: engine step failed", f->name, k); break; }
            sl_event ev;
            while (sl_engine_poll(e, &ev)) {
                if (ev.kind == SL_EV_TOKEN && n < 256) got[n++] = ev.token;
                if (ev.kind == SL_EV_FINISH) {
                    done = 1;
                    if (ev.reason != SL_FINISH_LENGTH) FAIL("%s prompt %d: finish %s", f->name, k, sl_finish_reason_name(ev.reason));
                }
            }
        }
        if (n != p->n_greedy) FAIL("%s prompt %d: %d tokens generated, want %d", f->name, k, n, p->n_greedy);
        for (int i = 0; i < n && i < p->n_greedy; i++) {
            same += got[i] == p->seq[p->n_prompt + i];
            if (same_prefix < 0 && got[i] != p->seq[p->n_prompt + i]) same_prefix = i;
        }
        if (same_prefix < 0) same_prefix = n;
        printf("%-24s engine cuda greedy prompt %d: %d/%d tokens as the oracle (first %d identical):", f->name, k, same,
               p->n_greedy, same_prefix);
        for (int i = 0; i < n && i < 24; i++) printf(" %d", got[i]);
        printf("\n");
    }
    sl_engine_close(e);
}

static void test_fixture(const char *name)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", SLUICE_TEST_DATA, name);
    fx_fixture f;
    if (fx_load(dir, name, &f)) { FAIL("%s: cannot read the oracle", name); return; }
    v4_weights w;
    v4_state_pool pool;
    char err[256];
    if (v4_weights_load(dir, &w, err, sizeof err)) { FAIL("%s: load: %s", name, err); fx_free(&f); return; }
    if (v4_pool_init(&pool, &w.cfg, (size_t)256 << 20, err, sizeof err)) { FAIL("pool: %s", err); v4_weights_free(&w); fx_free(&f); return; }
    const double t0 = now_s();
    sl_backend *gpu = sl_backend_cuda_create(&w, &pool, err, sizeof err);
    const double t_open = now_s() - t0;
    sl_backend *cpu = sl_backend_cpu_create(&w, &pool, 0, err, sizeof err);
    setenv("SLUICE_CUDA_MOE_TOKENS", "16", 1);
    sl_backend *gpu16 = gpu ? sl_backend_cuda_create(&w, &pool, err, sizeof err) : NULL;
    unsetenv("SLUICE_CUDA_MOE_TOKENS");
    setenv("SLUICE_CUDA_SHARED_BF16", "0", 1);
    sl_backend *gpu_fp8 = gpu ? sl_backend_cuda_create(&w, &pool, err, sizeof err) : NULL;
    setenv("SLUICE_CUDA_SHARED_BF16", "2", 1);   /* a bad value: one line naming it, no backend */
    char err2[256] = "";
    sl_backend *bad = gpu ? sl_backend_cuda_create(&w, &pool, err2, sizeof err2) : NULL;
    unsetenv("SLUICE_CUDA_SHARED_BF16");
    if (bad) {
        FAIL("%s: SLUICE_CUDA_SHARED_BF16=2 opened", name);
        bad->ops->destroy(bad);
    } else if (gpu && !strstr(err2, "SLUICE_CUDA_SHARED_BF16='2'")) {
        FAIL("%s: unclear error for SLUICE_CUDA_SHARED_BF16=2: '%s'", name, err2);
    }
    if (!gpu || !cpu || !gpu16 || !gpu_fp8) {
        FAIL("%s: backend create: %s", name, err);
    } else {
        printf("%-24s cuda backend open (upload + repack) %.2f s; experts %s\n", name, t_open,
               w.expert_format == QT_MXFP4 ? "MXFP4" : w.expert_format == QT_NVFP4 ? "NVFP4" : "other (quantised to NVFP4)");
        const int V = f.vocab;
        stats whole = {0}, tok = {0};
        double tc = 0, tg = 0, chunked = 0;
        for (int k = 0; k < f.n; k++) {
            const fx_prompt *p = &f.p[k];
            float *rc = malloc((size_t)p->rows * V * sizeof(float)), *rg = malloc((size_t)p->rows * V * sizeof(float));
            float *r1 = malloc((size_t)p->rows * V * sizeof(float));
            double a = now_s();
            if (run(cpu, &pool, p, 0, V, rc)) goto next;
            double b = now_s();
            if (run(gpu, &pool, p, 0, V, rg)) goto next;
            tc += b - a;
            tg += now_s() - b;
            compare(&whole, p, rg, rc, V);
            const double dref = fx_maxdiff(rc, p->logits, p->rows * V);
            if (!(dref <= 1e-4)) FAIL("%s prompt %d: cpu vs oracle %.3g (the reference itself is off)", name, k, dref);
            if (run(gpu, &pool, p, 1, V, r1)) goto next;   /* token by token: MoE batch 1 on the GPU */
            compare(&tok, p, r1, rc, V);
            if (run(gpu16, &pool, p, 0, V, r1)) goto next;  /* MoE in 16-token chunks */
            const double dc = fx_maxdiff(r1, rg, p->rows * V);
            if (!(dc <= chunked)) chunked = dc;
        next:
            free(rc); free(rg); free(r1);
        }
        /* v41: all prompts in one step, a MoE batch of every row (295 >= moe_cuda_ws.shared_gemm_min_t 256): with the
         * shared expert's bf16 copy (the default where it fits) the shared GEMMs run; without it (gpu_fp8) the FP8
         * kernels, which give each token's rows bit for bit whatever the batch (as the 16-token chunks do). */
        long rows = 0;
        for (int k = 0; k < f.n; k++) rows += f.p[k].rows;
        float *all_c = malloc((size_t)rows * V * sizeof(float)), *all_g = malloc((size_t)rows * V * sizeof(float));
        float *all_8 = malloc((size_t)rows * V * sizeof(float)), *all_w = malloc((size_t)rows * V * sizeof(float));
        if (!all_c || !all_g || !all_8 || !all_w) FAIL("out of memory");
        else if (!run_one_step(cpu, &pool, &f, V, all_c) && !run_one_step(gpu, &pool, &f, V, all_g) &&
                 !run_one_step(gpu_fp8, &pool, &f, V, all_8)) {
            stats one = {0};
            size_t off = 0;
            for (int k = 0; k < f.n; k++) {   /* each prompt alone on gpu (T < 256: the FP8 kernels) */
                compare(&one, &f.p[k], all_g + off, all_c + off, V);
                if (run(gpu, &pool, &f.p[k], 0, V, all_w + off)) break;
                off += (size_t)f.p[k].rows * V;
            }
            const double d8 = fx_maxdiff(all_8, all_w, (int)(rows * V)), dg = fx_maxdiff(all_g, all_8, (int)(rows * V));
            printf("%-24s one step of %ld MoE tokens: shared GEMMs vs FP8 kernels max |d| %.3g (must be > 0), FP8 "
                   "kernels vs each prompt alone %.3g (bound %.0e)\n", name, rows, dg, d8, MAX_CHUNKED);
            check_stats(name, "one step", &one);
            if (!(d8 <= MAX_CHUNKED)) FAIL("%s: the FP8 shared kernels' rows depend on the batch (%.3g)", name, d8);
            if (!(dg > 0)) FAIL("%s: a %ld-token step gave the FP8 kernels' rows bit for bit: the shared GEMMs did not run",
                                name, rows);
        }
        free(all_c); free(all_g); free(all_8); free(all_w);
        check_stats(name, "whole prefill", &whole);
        check_stats(name, "token by token", &tok);
        printf("%-24s MoE chunked by 16 vs whole: max |d| %.3g (bound %.0e); forward time cpu %.2f s, cuda %.2f s\n",
               name, chunked, MAX_CHUNKED, tc, tg);
        if (!(chunked <= MAX_CHUNKED)) FAIL("%s: chunked MoE differs by %.3g", name, chunked);
    }
    if (gpu) gpu->ops->destroy(gpu);
    if (gpu16) gpu16->ops->destroy(gpu16);
    if (gpu_fp8) gpu_fp8->ops->destroy(gpu_fp8);
    if (cpu) cpu->ops->destroy(cpu);
    v4_pool_free(&pool);
    v4_weights_free(&w);
    engine_greedy(dir, &f);
    fx_free(&f);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    test_fixture("tiny-v4-hub-fp8-mxfp4");
    test_fixture("tiny-v4-modelopt-nvfp4");

    /* a model outside the kernels' shapes: one line naming the constraint, no crash */
    sl_engine_opts o;
    memset(&o, 0, sizeof o);
    char dir[1200], err[256] = "";
    snprintf(dir, sizeof dir, "%s/tiny-v4-public", SLUICE_TEST_DATA);
    o.model_path = dir;
    o.backend = "cuda";
    sl_engine *e = NULL;
    if (!sl_engine_open(&o, &e, err, sizeof err)) {
        FAIL("tiny-v4-public (hidden 64) opened on cuda");
        sl_engine_close(e);
    } else if (!strstr(err, "hidden_size 64") || !strstr(err, "multiple of 256")) {
        FAIL("unclear error for a model the kernels cannot take: '%s'", err);
    } else {
        printf("tiny-v4-public on cuda: '%s'\n", err);
    }
    printf(failures ? "test_backend_cuda: FAILED (%d)\n" : "test_backend_cuda: all passed\n", failures);
    return failures ? 1 : 0;
}
