/* bench_ops.c — `sluice-bench ops`: the V4 layer's small kernels alone at decode shapes, for what a step's launch
 * table (`sluice-bench decode --launches`) cannot split: the parts of one launcher call.
 *
 * Each op is one launcher call on random inputs of V4-Flash's shapes (hidden 4096, hc 4, 64 heads x 512, the
 * indexer's 64 x 128, window 128, top-512), captured R times back to back in a CUDA graph; the time is the median
 * of 5 replays over R. Variants isolate the parts: mHC pre with 20 Sinkhorn rounds and with none (the difference is
 * the Sinkhorn), with and without the previous sublayer's post, and the head's 4-mix collapse; the indexer with
 * its scores and its top-k alone; the attention at several key split lengths (v4_attention's split_keys).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "v4_ops.h"
#include "bench_util.h"

#define CK(call)                                                                                                \
    do {                                                                                                        \
        cudaError_t e_ = (call);                                                                                \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "sluice-bench ops: %s: %s\n", #call, cudaGetErrorString(e_));                      \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)

static cudaStream_t st;
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}
static void *to_dev(const void *h, size_t bytes)
{
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float *rand_f32(size_t n, float scale)
{
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = scale * urand();
    float *d = to_dev(h, n * sizeof *h);
    free(h);
    return d;
}
/* bf16 uniform in (-scale, scale), drawn on the device as synthetic models' weights are */
static uint16_t *rand_bf16(size_t n, float scale)
{
    static uint64_t seed = 1;
    uint16_t *d;
    CK(cudaMalloc((void **)&d, n * sizeof *d));
    CK(v4_fill_bf16(d, n, seed++, scale, st));
    return d;
}

/* A step of one span (slot 0) of n rows at positions pos0.., pages 0.. in order. */
static v4_step one_span(int n, int pos0, int max_blocks)
{
    const size_t ints = (size_t)3 * n + 4 + max_blocks;
    int32_t *h = calloc(ints, sizeof *h);
    for (int i = 0; i < n; i++) h[n + i] = pos0 + i;
    int32_t *sp = h + 3 * n;
    sp[1] = pos0;
    sp[3] = n;
    for (int b = 0; b < max_blocks; b++) sp[4 + b] = b;
    const int32_t *d = to_dev(h, ints * sizeof *h);
    free(h);
    return (v4_step){n, 1, d, d + n, d + 2 * n, d + 3 * n, d + 3 * n + 1, d + 3 * n + 2, d + 3 * n + 3, d + 3 * n + 4,
                     max_blocks};
}

typedef void (*op_fn)(const void *arg);

/* us per call: R calls captured in a graph, the median of 5 replays */
static double time_op(op_fn f, const void *arg, int R)
{
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaEvent_t e0, e1;
    f(arg);
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < R; i++) f(arg);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[5];
    for (int k = 0; k < 5; k++) {
        float ms;
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(x, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[k] = ms * 1e3 / R;
    }
    qsort(t, 5, sizeof *t, cmp_d);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    return t[2];
}

/* ------------------------------------------------------------------------------------------------ mHC pre */
typedef struct {
    float *X, *fn, *scale, *base, *norm_w, *pend_f, *pend_post, *pend_comb, *post, *comb, *scratch;
    uint16_t *xn;
    int n, head, pend, iters;
} hc_arg;

static void hc_op(const void *p)
{
    const hc_arg *a = p;
    CK(v4_hc_pre(a->X, a->n, NULL, 4096, 4, a->fn, a->scale, a->base, a->iters, 1e-6f, 1e-6f, a->norm_w, a->head,
                 a->pend ? a->pend_f : NULL, a->pend_post, a->pend_comb, a->xn, a->head ? NULL : a->post,
                 a->head ? NULL : a->comb, a->scratch, st));
}

static void bench_hc(int n, int R)
{
    const int dim = 4096, hc = 4, n_mix = (2 + hc) * hc;
    hc_arg a = {.n = n};
    a.X = rand_f32((size_t)n * hc * dim, 1.0f);
    a.fn = rand_f32((size_t)n_mix * hc * dim, 1e-3f);
    a.scale = rand_f32(3, 1.0f);
    a.base = rand_f32(n_mix, 1.0f);
    a.norm_w = rand_f32(dim, 1.0f);
    a.pend_f = rand_f32((size_t)n * dim, 1.0f);
    a.pend_post = rand_f32((size_t)n * hc, 1.0f);
    a.pend_comb = rand_f32((size_t)n * hc * hc, 0.25f);
    CK(cudaMalloc((void **)&a.post, (size_t)n * hc * sizeof(float)));
    CK(cudaMalloc((void **)&a.comb, (size_t)n * hc * hc * sizeof(float)));
    CK(cudaMalloc((void **)&a.xn, (size_t)n * dim * 2));
    CK(cudaMalloc((void **)&a.scratch, v4_hc_pre_scratch_floats(n, dim, hc) * sizeof(float)));
    static const struct { int pend, iters, head; const char *what; } v[] = {
        {1, 20, 0, "after a post, 20 Sinkhorn rounds (the step's call)"},
        {1, 0, 0, "after a post, no Sinkhorn"},
        {0, 20, 0, "no post, 20 Sinkhorn rounds"},
        {0, 0, 1, "the head's collapse (4 mixes)"}};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        a.pend = v[k].pend;
        a.iters = v[k].iters;
        a.head = v[k].head;
        printf("mHC pre       rows %3d  %-52s %8.2f us\n", n, v[k].what, time_op(hc_op, &a, R));
    }
    cudaFree(a.X); cudaFree(a.fn); cudaFree(a.scale); cudaFree(a.base); cudaFree(a.norm_w); cudaFree(a.pend_f);
    cudaFree(a.pend_post); cudaFree(a.pend_comb); cudaFree(a.post); cudaFree(a.comb); cudaFree(a.xn);
    cudaFree(a.scratch);
}

/* ----------------------------------------------------------------------------------------------- norms */
typedef struct {
    v4_step s;
    v4_norm_job j[2];
} norm_arg;

static void norm_op(const void *p)
{
    const norm_arg *a = p;
    CK(v4_norm_rope(&a->s, a->j, 2, 1e-6f, st));
}

static void bench_norms(const double *inv_freq, int R)
{
    norm_arg a;
    a.s = one_span(1, 8191, 1);
    const size_t n_in = 1536 + 64 * 512 + 64 * 128;
    float *in = rand_f32(n_in, 1.0f), *w = rand_f32(1536, 1.0f);
    uint16_t *out;
    CK(cudaMalloc((void **)&out, n_in * 2));
    a.j[0] = (v4_norm_job){in, 1536, 1, 1, 1024, 1, w, 0, NULL, out, 1024, 0, NULL};
    a.j[1] = (v4_norm_job){in + 1024, 1536, 1, 1, 512, 1, w, 32, inv_freq, out + 1024, 512, 0, NULL};
    printf("norm + RoPE   rows   1  %-52s %8.2f us\n", "q_norm 1024, kv_norm + RoPE 512", time_op(norm_op, &a, R));
    a.j[0] = (v4_norm_job){in, 512, 64, 64, 512, 1, NULL, 32, inv_freq, out, 512, 0, NULL};
    a.j[1] = (v4_norm_job){in + 64 * 512, 128, 64, 64, 128, 0, NULL, 32, inv_freq, out + 64 * 512, 128, 0, NULL};
    printf("norm + RoPE   rows   1  %-52s %8.2f us\n", "q 64 x 512 rms + RoPE, indexer q 64 x 128 RoPE",
           time_op(norm_op, &a, R));
    cudaFree(in); cudaFree(w); cudaFree(out); cudaFree((void *)a.s.tok_id);
}

/* --------------------------------------------------------------------------------------------- indexer */
typedef struct {
    v4_step s;
    v4_arena ar;
    uint16_t *q;
    float *w, *scores;
    int32_t *sel;
    int rows, max_entries, score, fp8;
} ix_arg;

static void ix_op(const void *p)
{
    const ix_arg *a = p;
    CK(v4_indexer(&a->s, &a->ar, 0, a->fp8, 0, a->rows, a->score ? a->q : NULL, 64, 128, a->w, 64, 0.01f, 512, a->sel,
                  a->scores, a->max_entries, st));
}

/* rows at positions 4N-1..: N and more candidates (index keys bf16, or FP8 rows, in pages of 32 entries) */
static void bench_indexer(int N, int rows, int fp8, int R)
{
    const int t = 4 * N - 1, bt = 128, max_blocks = (t + rows) / bt + 1;
    const size_t page_bytes = fp8 ? v4_fp8_rows_bytes(bt / 4, 128) : (size_t)(bt / 4) * 128 * 2;
    ix_arg a = {.rows = rows, .max_entries = N + rows / 4 + 1, .fp8 = fp8};
    a.s = one_span(rows, t, max_blocks);
    a.ar = (v4_arena){NULL, 0, (uint8_t *)rand_bf16((size_t)max_blocks * page_bytes / 2, 1.0f), page_bytes, bt};
    for (int b = 0; b < max_blocks && fp8; b++)
        CK(v4_fill_fp8_rows(a.ar.pages + (size_t)b * page_bytes, bt / 4, 128, (uint64_t)b + 1, 1.0f, st));
    a.q = rand_bf16((size_t)rows * 64 * 128, 1.0f);
    a.w = rand_f32((size_t)rows * 64, 1.0f);
    CK(cudaMalloc((void **)&a.scores, (size_t)rows * a.max_entries * sizeof(float)));
    CK(cudaMalloc((void **)&a.sel, (size_t)rows * 512 * sizeof(int32_t)));
    char what[64];
    a.score = 1;
    snprintf(what, sizeof what, "%d candidates: scores + top-512%s", N, fp8 ? " (FP8 keys)" : "");
    printf("indexer       rows %3d  %-52s %8.2f us\n", rows, what, time_op(ix_op, &a, R));
    if (!fp8) {   /* the top-k alone (v4_indexer with q NULL) on the scores the call above wrote: the keys' format
                     does not reach it */
        a.score = 0;
        snprintf(what, sizeof what, "%d candidates: top-512 alone", N);
        printf("indexer       rows %3d  %-52s %8.2f us\n", rows, what, time_op(ix_op, &a, R));
    }
    cudaFree(a.ar.pages); cudaFree(a.q); cudaFree(a.w); cudaFree(a.scores); cudaFree(a.sel);
    cudaFree((void *)a.s.tok_id);
}

/* ------------------------------------------------------------------------------------------- attention */
typedef struct {
    v4_step s;
    v4_arena ar;
    uint16_t *q, *out;
    uint8_t *kv;
    int32_t *sel;
    float *sink, *scratch;
    size_t scratch_floats;
    const double *inv_freq;
    int ratio, max_keys, split, kv8;
} att_arg;

static void att_op(const void *p)
{
    const att_arg *a = p;
    CK(v4_attention(&a->s, &a->ar, 0, 128, 0, a->ratio, a->sel, 512, a->q, a->kv, a->kv8, 64, 512, 0.0442f, a->sink,
                    a->max_keys, a->scratch, a->scratch_floats, 32, a->inv_freq, a->split, a->out, st));
}

/* rows at 8191..: CSA (the window + 512 selected of 2048 entries) or the window alone; keys bf16 or FP8 KV rows
 * (kv8: the plan's split alone) */
static void bench_attention(int rows, int csa, int kv8, const double *inv_freq, int R)
{
    const int pos0 = 8191, bt = 128, max_blocks = (pos0 + rows + bt) / bt;
    const size_t rb = v4_kv_row_bytes(512, 32, kv8), page_bytes = (size_t)(bt / 4) * rb;
    att_arg a = {.ratio = csa ? 4 : 0, .max_keys = 128 + (csa ? 512 : 0), .inv_freq = inv_freq, .kv8 = kv8};
    a.s = one_span(rows, pos0, max_blocks);
    a.ar = (v4_arena){(uint8_t *)rand_bf16(128 * rb / 2, 1.0f), 128 * rb,
                      (uint8_t *)rand_bf16((size_t)max_blocks * page_bytes / 2, 1.0f), page_bytes, bt};
    a.q = rand_bf16((size_t)rows * 64 * 512, 1.0f);
    a.kv = (uint8_t *)rand_bf16((size_t)rows * rb / 2, 1.0f);
    if (kv8) {
        CK(v4_fill_kv8_rows(a.ar.slots, 128, 512, 32, 1, 1.0f, st));
        CK(v4_fill_kv8_rows(a.ar.pages, max_blocks * (bt / 4), 512, 32, 2, 1.0f, st));
        CK(v4_fill_kv8_rows(a.kv, rows, 512, 32, 3, 1.0f, st));
    }
    CK(cudaMalloc((void **)&a.out, (size_t)rows * 64 * 512 * 2));
    int32_t *sel = malloc((size_t)rows * 512 * sizeof *sel);
    for (int i = 0; i < rows * 512; i++) sel[i] = (int32_t)((i * 2654435761u) % 2048u);
    a.sel = to_dev(sel, (size_t)rows * 512 * sizeof *sel);
    free(sel);
    a.sink = rand_f32(64, 1.0f);
    a.scratch_floats = v4_attention_scratch_floats(64, 512, rows, a.max_keys);
    CK(cudaMalloc((void **)&a.scratch, (a.scratch_floats ? a.scratch_floats : 1) * sizeof(float)));
    static const int splits[] = {64, 128, 320, 640};
    for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
        const int plan = splits[k] == v4_attention_split(rows, a.max_keys, 132);
        if (splits[k] > a.max_keys || (kv8 && !plan)) continue;
        a.split = splits[k];
        char what[64];
        snprintf(what, sizeof what, "%s, %d keys%s, splits of %d%s", csa ? "CSA" : "window", a.max_keys,
                 kv8 ? " FP8 KV" : "", a.split, plan ? " (the plan's on 132 SMs)" : "");
        printf("attention     rows %3d  %-52s %8.2f us\n", rows, what, time_op(att_op, &a, R));
    }
    cudaFree(a.ar.slots); cudaFree(a.ar.pages); cudaFree(a.q); cudaFree(a.kv); cudaFree(a.out); cudaFree(a.sel);
    cudaFree(a.sink); cudaFree(a.scratch); cudaFree((void *)a.s.tok_id);
}

int bench_ops(int argc, char **argv)
{
    int R = 50;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) R = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: sluice-bench ops [--reps R]   (R calls a graph, median of 5 replays)\n");
            return 2;
        }
    }
    if (R < 1) R = 1;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "sluice-bench ops: no CUDA device\n");
        return 77;
    }
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("%s; us per call, %d calls a graph, median of 5 replays\n", prop.name, R);
    double h_inv[32];
    for (int k = 0; k < 32; k++) h_inv[k] = pow(10000.0, -(double)k / 32);
    double *inv_freq = to_dev(h_inv, sizeof h_inv);
    bench_hc(1, R);
    bench_hc(64, R);
    bench_norms(inv_freq, R);
    for (int fp8 = 0; fp8 < 2; fp8++) {
        bench_indexer(2048, 1, fp8, R);
        bench_indexer(16384, 1, fp8, R);
        bench_indexer(2048, 64, fp8, R);
        bench_indexer(16384, 64, fp8, R);
    }
    for (int kv8 = 0; kv8 < 2; kv8++) {
        bench_attention(1, 1, kv8, inv_freq, R);
        bench_attention(1, 0, kv8, inv_freq, R);
        bench_attention(64, 1, kv8, inv_freq, R);
        bench_attention(64, 0, kv8, inv_freq, R);
    }
    cudaFree(inv_freq);
    cudaStreamDestroy(st);
    return 0;
}
