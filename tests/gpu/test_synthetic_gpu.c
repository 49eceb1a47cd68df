/* test_synthetic_gpu.c — a full-width synthetic V4-Flash model with one CSA and one HCA layer
 * (synthetic "v4-flash:ratios=4,128", MXFP4 experts) on the cuda backend against the CPU reference,
 * at a context long enough that more than 512 CSA entries compete for the indexer's top-512 and the
 * HCA layer has closed many windows (the tiny fixtures never get there):
 *   - a 2,400-token prompt prefilled in chunks of 300 on both backends; the logits of its last 48
 *     positions (t = 2352..2399: 588..600 CSA candidates) within relative L2 2e-2 of the CPU's;
 *   - then 8 decode steps, teacher-forced with the CPU's greedy tokens: every row within 2e-2 and the
 *     same argmax wherever the CPU's top-2 margin is >= 0.05;
 * with the indexer's keys in bf16, then stored FP8 on both sides (sl_cuda_opts.index_fp8 and the CPU's
 * sl_backend_cpu_set_index_fp8), then with FP8 KV (sl_cuda_opts.kv_fp8 and sl_backend_cpu_set_kv_fp8: the window
 * rows, compressed entries and the step's own keys as DeepSeek's FP8 KV) with bf16 and with FP8 index keys.
 * Exit 77 without a CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "synthetic.h"
#include "logits_cmp.h"

#define CTX 2400
#define CHUNK 300
#define TAIL 48
#define DECODE 8
#define MAX_REL_L2 2e-2

static int failures = 0;
static const sl_cuda_opts one_gpu = {.n_devices = 1};   /* GPU 0 alone (test_multigpu.c splits the model) */
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}



/* Prefill tokens[0..CTX) in chunks; the last TAIL rows' logits into out. */
static int prefill(sl_backend *be, v4_state_pool *pool, v4_seq_state *st, const int32_t *tok, int V, float *out)
{
    char err[256];
    if (v4_seq_init(pool, st) || v4_seq_reserve(pool, st, CTX + DECODE + 1)) { FAIL("%s: state", be->ops->name); return -1; }
    for (int t = 0; t < CTX; t += CHUNK) {
        const int n = t + CHUNK <= CTX ? CHUNK : CTX - t;
        const int from = t + n > CTX - TAIL ? (CTX - TAIL > t ? CTX - TAIL - t : 0) : n;
        sl_seq_span sp = {.tokens = tok + t, .n = n, .st = st, .logits_from = from,
                          .logits = out + (size_t)(t + from - (CTX - TAIL)) * V};
        if (be->ops->forward(be, &sp, 1, err, sizeof err)) { FAIL("%s prefill: %s", be->ops->name, err); return -1; }
    }
    return 0;
}

/* The comparison above on w with the indexer's keys stored bf16 or FP8, and the attention's keys bf16 or FP8 KV, the
 * same on both backends. */
static void compare_backends(v4_weights *w, int index_fp8, int kv_fp8)
{
    const int V = w->cfg.vocab_size;
    const char *keys = kv_fp8 ? (index_fp8 ? "FP8 KV, FP8" : "FP8 KV, bf16") : index_fp8 ? "FP8" : "bf16";
    char err[512];
    v4_state_pool pc, pg;
    if (v4_pool_init(&pc, &w->cfg, (size_t)4 << 30, err, sizeof err)) { FAIL("%s", err); return; }
    if (v4_pool_init(&pg, &w->cfg, (size_t)4 << 30, err, sizeof err)) { FAIL("%s", err); v4_pool_free(&pc); return; }
    sl_cuda_opts go = one_gpu;
    go.index_fp8 = index_fp8;
    go.kv_fp8 = kv_fp8;
    sl_backend *cpu = sl_backend_cpu_create(w, &pc, 0, err, sizeof err);
    sl_backend *gpu = cpu ? sl_backend_cuda_create(w, &pg, &go, err, sizeof err) : NULL;
    if (!cpu || !gpu) { FAIL("backend: %s", err); exit(1); }
    if (sl_backend_cpu_set_index_fp8(cpu, index_fp8)) { FAIL("the CPU refuses FP8 index keys"); exit(1); }
    if (sl_backend_cpu_set_kv_fp8(cpu, kv_fp8)) { FAIL("the CPU refuses FP8 KV"); exit(1); }

    int32_t *tok = malloc((CTX + DECODE) * sizeof *tok);
    random_tokens(tok, CTX, V, 88172645463325252ull);
    float *lc = malloc((size_t)TAIL * V * sizeof(float)), *lg = malloc((size_t)TAIL * V * sizeof(float));
    v4_seq_state sc, sg;
    double t0 = now_s();
    if (prefill(cpu, &pc, &sc, tok, V, lc)) exit(1);
    const double t_cpu = now_s() - t0;
    t0 = now_s();
    if (prefill(gpu, &pg, &sg, tok, V, lg)) exit(1);
    printf("%s index keys: prefill of %d tokens: CPU %.1f s, GPU %.2f s\n", keys, CTX, t_cpu, now_s() - t0);
    double worst = 0;
    for (int r = 0; r < TAIL; r++) {
        const double e = logits_rel_l2(lg + (size_t)r * V, lc + (size_t)r * V, V);
        if (!(e <= worst)) worst = e;
    }
    printf("%s index keys: prefill rows t = %d..%d (%d..%d CSA candidates for 512 slots): worst rel L2 %.2e\n", keys,
           CTX - TAIL, CTX - 1, (CTX - TAIL + 1) / 4, CTX / 4, worst);
    if (!(worst <= MAX_REL_L2)) FAIL("%s index keys: prefill rel L2 %.3e > %.0e", keys, worst, MAX_REL_L2);

    /* decode, teacher-forced with the CPU's greedy tokens */
    const float *last = lc + (size_t)(TAIL - 1) * V;
    double dworst = 0;
    int flips = 0;
    for (int d = 0; d < DECODE; d++) {
        float m;
        tok[CTX + d] = logits_argmax(last, V, &m);
        sl_seq_span a = {.tokens = &tok[CTX + d], .n = 1, .st = &sc, .logits = lc};
        sl_seq_span b = {.tokens = &tok[CTX + d], .n = 1, .st = &sg, .logits = lg};
        if (cpu->ops->forward(cpu, &a, 1, err, sizeof err) || gpu->ops->forward(gpu, &b, 1, err, sizeof err)) {
            FAIL("decode: %s", err);
            break;
        }
        const double e = logits_rel_l2(lg, lc, V);
        if (!(e <= dworst)) dworst = e;
        float mc;
        const int ac = logits_argmax(lc, V, &mc);
        if (mc >= 0.05f && logits_argmax(lg, V, NULL) != ac) flips++;
        last = lc;
    }
    printf("%s index keys: decode %d steps at %d..%d: worst rel L2 %.2e, clear argmax flips %d\n", keys, DECODE, CTX,
           CTX + DECODE - 1, dworst, flips);
    if (!(dworst <= MAX_REL_L2)) FAIL("%s index keys: decode rel L2 %.3e > %.0e", keys, dworst, MAX_REL_L2);
    if (flips) FAIL("%s index keys: decode: %d clear argmax flips", keys, flips);

    v4_seq_free(&pc, &sc);
    v4_seq_free(&pg, &sg);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    v4_pool_free(&pc);
    v4_pool_free(&pg);
    free(tok); free(lc); free(lg);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    char err[512];
    double t0 = now_s();
    v4_weights w;
    if (v4_weights_synthetic("v4-flash:ratios=4,128", 1, &w, err, sizeof err)) { FAIL("%s", err); return 1; }
    printf("synthetic v4-flash:ratios=4,128 built in %.1f s\n", now_s() - t0);
    compare_backends(&w, 0, 0);
    compare_backends(&w, 1, 0);
    compare_backends(&w, 0, 1);
    compare_backends(&w, 1, 1);
    v4_weights_free(&w);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
