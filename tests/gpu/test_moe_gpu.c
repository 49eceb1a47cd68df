/* test_moe_gpu.c — the GPU MoE layer (engine/cuda/moe_cuda.h) against a float64 CPU reference on the
 * same dequantised weights. Fresh random inputs each run (seed printed), poisoned outputs and
 * intermediates, relative L2 < 1e-2; router indices identical to the reference (a token whose k-th
 * and (k+1)-th selection scores are within 1e-5 is reported as a near-tie and compared with the
 * GPU's choice); the CUDA NVFP4 quantiser bit-identical to the host one here. Exit 77 without a GPU.
 * The reference codecs and quantiser are this test's own (independent of engine/quant.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "moe_cuda.h"
#include "moe_kernels.h"

static int g_fail = 0;
/* run_case also replays its forward from a CUDA graph (as sluice-bench times it), twice, on poisoned outputs and
 * workspace, and asks for the stream run's output bit for bit (every reduction has a fixed order) */
static int g_graph_check = 0;
/* run_case also compares the shared expert's own y rows (the T rows after the T * topk routed pairs, where its
 * own launches write them) with the float64 reference of the shared expert alone: relative L2 < 5e-3 */
static int g_shared_check = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); g_fail = 1; } } while (0)
#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

/* ---- random */
static uint64_t g_rng;
static uint32_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return (uint32_t)(g_rng >> 11); }
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; }
static float nrand(void) { float u = urand() + 1e-7f, v = urand(); return sqrtf(-2.f * logf(u)) * cosf(6.2831853f * v); }

/* ---- reference codecs */
static float e2m1(uint8_t n) { static const float v[8] = {0, .5f, 1, 1.5f, 2, 3, 4, 6}; return (n & 8) ? -v[n & 7] : v[n & 7]; }
static float e4m3(uint8_t b)
{
    int ex = (b >> 3) & 15, man = b & 7;
    float m = ex ? ldexpf(1.f + man / 8.f, ex - 7) : ldexpf((float)man, -9);
    return (b & 0x80) ? -m : m;
}
static uint8_t f32_to_e4m3(float f)   /* round to nearest even, saturate to 448 (positive inputs) */
{
    uint8_t best = 0;
    float bd = INFINITY;
    for (int c = 0; c < 0x7F; c++) {
        float d = fabsf(e4m3((uint8_t)c) - f);
        if (d < bd || (d == bd && !(c & 1))) { bd = d; best = (uint8_t)c; }
    }
    return best;
}
static uint8_t f32_to_e2m1(float x)
{
    float a = fabsf(x);
    uint8_t c = a <= .25f ? 0 : a < .75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.f ? 6 : 7;
    return (uint8_t)(c | (x < 0 ? 8 : 0));
}
static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

/* host NVFP4 quantiser: scale_2 = amax/(6*448); s = e4m3(bamax/6/scale_2); q = e2m1(w/(s*scale_2)) */
static void quant_nvfp4(const float *w, int n, int k, uint8_t *q, uint8_t *sc, float *s2out)
{
    float amax = 0;
    for (size_t i = 0; i < (size_t)n * k; i++) amax = fmaxf(amax, fabsf(w[i]));
    const float s2 = amax / (6.0f * 448.0f);
    *s2out = s2;
    for (size_t b = 0; b < (size_t)n * k / 16; b++) {
        float bm = 0;
        for (int i = 0; i < 16; i++) bm = fmaxf(bm, fabsf(w[b * 16 + i]));
        uint8_t s = s2 > 0 ? f32_to_e4m3(bm / 6.0f / s2) : 0;
        sc[b] = s;
        const float d = e4m3(s) * s2;
        for (int i = 0; i < 16; i += 2) {
            uint8_t lo = d > 0 ? f32_to_e2m1(w[b * 16 + i] / d) : 0, hi = d > 0 ? f32_to_e2m1(w[b * 16 + i + 1] / d) : 0;
            q[b * 8 + i / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ---- one test model */
typedef struct {
    moe_cuda_shape s;
    float *gate, *bias;           /* [E][H], [E] */
    int32_t *tid2eid;             /* [vocab][topk] */
    float **wd;                   /* [E][3] dequantised weights (w1, w3: [I][H]; w2: [H][I]) */
    float *sh[3];                 /* shared expert dequantised */
} model;

static float *dq_fp4(const uint8_t *q, const uint8_t *sc, float s2, int n, int k, int fmt)
{
    float *w = malloc((size_t)n * k * sizeof(float));
    const int sb = fmt == QT_NVFP4 ? 16 : 32;
    for (size_t r = 0; r < (size_t)n; r++)
        for (int c = 0; c < k; c++) {
            uint8_t b = q[r * (k / 2) + c / 2], nib = (c & 1) ? b >> 4 : b & 15, s = sc[r * (k / sb) + c / sb];
            float sv = fmt == QT_NVFP4 ? e4m3(s) * s2 : ldexpf(1.f, (int)s - 127);
            w[r * k + c] = e2m1(nib) * sv;
        }
    return w;
}

/* Build random experts; `gpu_quant`: quantise NVFP4 on the GPU (moe_cuda_set_expert_dev path). */
/* The FP8 shared expert (fresh random data and block scales) into M->sh (dequantised) and L. pow2: every block
 * scale a power of two (2^-9..2^-7, DeepSeek's ue8m0 kind: moe_cuda_layer.sh_pow2, SW's folded form), else
 * fp32 scales of any mantissa. */
static void make_shared(model *M, moe_cuda_layer *L, int pow2)
{
    const int H = M->s.hidden, I = M->s.inter;
    qtensor t[3];
    for (int m = 0; m < 3; m++) {
        const int n = m < 2 ? I : H, k = m < 2 ? H : I;
        const size_t nb = (size_t)(n / 128) * (k / 128);
        uint8_t *d = malloc((size_t)n * k);
        float *sc = malloc(nb * sizeof(float));
        for (size_t i = 0; i < (size_t)n * k; i++) { uint8_t b = (uint8_t)rnd(); if ((b & 0x7F) == 0x7F) b = 0x10; d[i] = b; }
        for (size_t i = 0; i < nb; i++)
            sc[i] = pow2 ? ldexpf(1.f, -9 - (int)(rnd() % 3)) : (0.5f + urand()) * (m == 2 ? 2e-3f : 4e-3f);
        t[m] = (qtensor){.fmt = QT_FP8_B128, .rows = n, .cols = k, .data = d, .scale = sc, .scale_is_f32 = 1};
        free(M->sh[m]);
        M->sh[m] = malloc((size_t)n * k * sizeof(float));
        for (size_t r = 0; r < (size_t)n; r++)
            for (int c = 0; c < k; c++) M->sh[m][r * k + c] = e4m3(d[r * k + c]) * sc[(r / 128) * (k / 128) + c / 128];
    }
    if (moe_cuda_set_shared(L, &t[0], &t[1], &t[2])) exit(1);
    CHECK(L->sh_pow2 == pow2, "shared expert: sh_pow2 %d, scales %s", L->sh_pow2, pow2 ? "powers of two" : "any");
    for (int m = 0; m < 3; m++) { free((void *)t[m].data); free((void *)t[m].scale); }
}

static void make_model(model *M, moe_cuda_layer *L, const moe_cuda_shape *s, int gpu_quant, int dup_gate_rows)
{
    memset(M, 0, sizeof *M);
    M->s = *s;
    const int E = s->n_experts, H = s->hidden, I = s->inter;
    if (moe_cuda_layer_init(L, s)) exit(1);
    M->gate = malloc((size_t)E * H * sizeof(float));
    M->bias = malloc(E * sizeof(float));
    for (size_t i = 0; i < (size_t)E * H; i++) M->gate[i] = nrand() / sqrtf((float)H);
    if (dup_gate_rows)   /* exact ties: experts 3 and 4 (and 9, 10) identical */
        for (int k = 0; k < H; k++) M->gate[4 * H + k] = M->gate[3 * H + k], M->gate[10 * H + k] = M->gate[9 * H + k];
    for (int e = 0; e < E; e++) M->bias[e] = dup_gate_rows && (e == 4 || e == 10) ? 0.f : 0.05f * nrand();
    if (dup_gate_rows) M->bias[3] = M->bias[9] = 0.f;
    if (s->hash) {
        M->tid2eid = malloc((size_t)s->vocab * s->topk * sizeof(int32_t));
        for (int v = 0; v < s->vocab; v++)
            for (int k = 0; k < s->topk; k++) {
                int e, dup;
                do { e = (int)(rnd() % E); dup = 0; for (int j = 0; j < k; j++) dup |= M->tid2eid[v * s->topk + j] == e; } while (dup);
                M->tid2eid[v * s->topk + k] = e;
            }
    }
    if (moe_cuda_set_router(L, M->gate, M->bias, M->tid2eid)) exit(1);
    M->wd = malloc((size_t)E * 3 * sizeof(float *));
    for (int e = 0; e < E; e++) {
        qtensor t[3];
        for (int m = 0; m < 3; m++) {
            const int n = m < 2 ? I : H, k = m < 2 ? H : I, sb = s->fp4_fmt == QT_NVFP4 ? 16 : 32;
            uint8_t *q = malloc((size_t)n * k / 2), *sc = malloc((size_t)n * k / sb);
            float s2 = 1.f;
            if (s->fp4_fmt == QT_NVFP4) {
                float *w = malloc((size_t)n * k * sizeof(float));
                const float sd = (m == 2 ? 0.03f : 0.05f) * (0.5f + urand());
                for (size_t i = 0; i < (size_t)n * k; i++) w[i] = sd * nrand();
                if (e == 1 && m == 0) for (int i = 0; i < 64; i++) w[i] = 0.f;   /* zero blocks */
                if (gpu_quant) {
                    float *dw; uint8_t *dq, *ds; float *d2;
                    CU(cudaMalloc((void **)&dw, (size_t)n * k * 4)); CU(cudaMalloc((void **)&dq, (size_t)n * k / 2));
                    CU(cudaMalloc((void **)&ds, (size_t)n * k / 16)); CU(cudaMalloc((void **)&d2, 4));
                    CU(cudaMemcpy(dw, w, (size_t)n * k * 4, cudaMemcpyHostToDevice));
                    if (moe_cuda_quantize_nvfp4(dw, n, k, dq, ds, d2, 0)) exit(1);
                    CU(cudaMemcpy(q, dq, (size_t)n * k / 2, cudaMemcpyDeviceToHost));
                    CU(cudaMemcpy(sc, ds, (size_t)n * k / 16, cudaMemcpyDeviceToHost));
                    CU(cudaMemcpy(&s2, d2, 4, cudaMemcpyDeviceToHost));
                    cudaFree(dw); cudaFree(dq); cudaFree(ds); cudaFree(d2);
                } else {
                    quant_nvfp4(w, n, k, q, sc, &s2);
                }
                free(w);
            } else {
                for (size_t i = 0; i < (size_t)n * k / 2; i++) q[i] = (uint8_t)rnd();
                for (size_t i = 0; i < (size_t)n * k / sb; i++) sc[i] = (uint8_t)(127 - 7 + rnd() % 4);
                if (e == 1 && m == 0) sc[0] = 127 - 30;   /* a block 26 binades below the rest */
            }
            t[m] = (qtensor){.fmt = (qt_format)s->fp4_fmt, .rows = n, .cols = k, .data = q, .scale = sc, .scale2 = s2};
            M->wd[e * 3 + m] = dq_fp4(q, sc, s2, n, k, s->fp4_fmt);
        }
        if (moe_cuda_set_expert(L, e, &t[0], &t[1], &t[2])) exit(1);
        for (int m = 0; m < 3; m++) { free((void *)t[m].data); free((void *)t[m].scale); }
    }
    if (s->has_shared) make_shared(M, L, 0);
}

static void free_model(model *M, moe_cuda_layer *L)
{
    for (int i = 0; i < M->s.n_experts * 3; i++) free(M->wd[i]);
    free(M->wd); free(M->gate); free(M->bias); free(M->tid2eid);
    for (int m = 0; m < 3; m++) free(M->sh[m]);
    moe_cuda_layer_free(L);
}

/* SwiGLU expert in float64 on dequantised weights; y += wt * w2 (silu(min(g,L)) * clamp(u)) */
static void ref_expert(const moe_cuda_shape *s, float *const w[3], const float *x, double wt, double *y)
{
    const int H = s->hidden, I = s->inter;
    double *h = malloc(I * sizeof(double));
    for (int i = 0; i < I; i++) {
        double g = 0, u = 0;
        const float *a = w[0] + (size_t)i * H, *b = w[1] + (size_t)i * H;
        for (int k = 0; k < H; k++) g += (double)a[k] * x[k], u += (double)b[k] * x[k];
        if (s->swiglu_limit > 0) { g = fmin(g, s->swiglu_limit); u = fmax(fmin(u, s->swiglu_limit), -s->swiglu_limit); }
        h[i] = g / (1 + exp(-g)) * u * wt;
    }
    for (int o = 0; o < H; o++) {
        double acc = 0;
        const float *c = w[2] + (size_t)o * I;
        for (int i = 0; i < I; i++) acc += (double)c[i] * h[i];
        y[o] += acc;
    }
    free(h);
}

/* Run one forward at batch T and compare. skew: bias pushes every token to experts 0..topk-1. */
static void run_case(const char *name, model *M, moe_cuda_layer *L, moe_cuda_ws *W, int T, int skew)
{
    /* MOE_TEST_ONLY=substring: only the cases whose name holds it (a device run of one variant's new cases) */
    const char *only = getenv("MOE_TEST_ONLY");
    if (only && *only && !strstr(name, only)) return;
    const moe_cuda_shape *s = &M->s;
    const int E = s->n_experts, H = s->hidden, K = s->topk;
    float *x = malloc((size_t)T * H * sizeof(float));
    uint16_t *xb = malloc((size_t)T * H * 2);
    int32_t *tok = malloc(T * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)T * H; i++) { xb[i] = f2bf(2.f * urand() - 1.f); x[i] = bf2f(xb[i]); }
    for (int t = 0; t < T; t++) tok[t] = s->hash ? (int32_t)(rnd() % s->vocab) : t;
    float *bias = malloc(E * sizeof(float));
    memcpy(bias, M->bias, E * sizeof(float));
    if (skew) for (int e = 0; e < K; e++) bias[e] += 100.f;
    if (moe_cuda_set_router(L, M->gate, bias, M->tid2eid)) exit(1);

    uint16_t *dx; int32_t *dtok; float *dout;
    CU(cudaMalloc((void **)&dx, (size_t)T * H * 2)); CU(cudaMalloc((void **)&dtok, T * 4));
    CU(cudaMalloc((void **)&dout, (size_t)T * H * 4));
    CU(cudaMemcpy(dx, xb, (size_t)T * H * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dtok, tok, T * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(dout, 0xFF, (size_t)T * H * 4));                       /* poison: NaN */
    CU(cudaMemset(W->h, 0xFF, (size_t)W->max_tokens * (K + 1) * s->inter * 2));
    CU(cudaMemset(W->y, 0xFF, (size_t)W->max_tokens * (K + 1) * H * 4));
    if (moe_cuda_forward(L, W, dx, dtok, T, dout, 0)) exit(1);
    CU(cudaDeviceSynchronize());
    float *out = malloc((size_t)T * H * 4), *gw = malloc((size_t)T * K * 4);
    int32_t *gi = malloc((size_t)T * K * 4);
    CU(cudaMemcpy(out, dout, (size_t)T * H * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(gi, W->idx, (size_t)T * K * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(gw, W->w, (size_t)T * K * 4, cudaMemcpyDeviceToHost));

    double err2 = 0, ref2 = 0, werr = 0;
    int idx_mismatch = 0, near_ties = 0, nan_out = 0;
    double *y = malloc(H * sizeof(double)), *sc = malloc(E * sizeof(double)), *sel = malloc(E * sizeof(double));
    int *ri = malloc(K * sizeof(int));
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * H;
        double mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int k = 0; k < H; k++) l += (double)M->gate[(size_t)e * H + k] * xt[k];
            sc[e] = l;
            mx = fmax(mx, l);
        }
        for (int e = 0; e < E; e++) sum += exp(sc[e] - mx);
        for (int e = 0; e < E; e++) {
            double l = sc[e];
            sc[e] = s->score_func == MOE_SCORE_SOFTMAX ? exp(l - mx) / sum
                  : s->score_func == MOE_SCORE_SIGMOID ? 1 / (1 + exp(-l)) : sqrt(l > 20 ? l : log1p(exp(l)));
            sel[e] = sc[e] + bias[e];
        }
        int tie = 0;
        if (s->hash) {
            for (int k = 0; k < K; k++) ri[k] = M->tid2eid[tok[t] * K + k];
        } else {
            unsigned char *taken = calloc(E, 1);
            for (int k = 0; k <= K && k < E; k++) {
                int b = -1;
                for (int e = 0; e < E; e++) if (!taken[e] && (b < 0 || sel[e] > sel[b])) b = e;
                if (k < K) { ri[k] = b; taken[b] = 1; }
                else if (fabs(sel[b] - sel[ri[K - 1]]) < 1e-5 && b != ri[K - 1] &&
                         !(M->gate[(size_t)b * H] == M->gate[(size_t)ri[K - 1] * H] && bias[b] == bias[ri[K - 1]])) tie = 1;
            }
            free(taken);
        }
        int same = 1, swap_ok = !s->hash;
        for (int k = 0; k < K; k++) {
            same &= gi[t * K + k] == ri[k];
            /* a different expert at position k is a near tie when its selection value equals the reference's
             * within fp32 resolution at that magnitude (the skewed cases add 100: 1 ulp = 7.6e-6) */
            const int ge = gi[t * K + k];
            if (ge != ri[k] && !(ge >= 0 && ge < E && fabs(sel[ge] - sel[ri[k]]) <= 1e-5 + 1e-6 * fabs(sel[ri[k]])))
                swap_ok = 0;
        }
        if (!same && swap_ok) tie = 1;
        if (!same && tie) { near_ties++; for (int k = 0; k < K; k++) ri[k] = gi[t * K + k]; }
        else if (!same) idx_mismatch++;
        double ws = 0;
        for (int k = 0; k < K; k++) ws += sc[ri[k]];
        memset(y, 0, H * sizeof(double));
        for (int k = 0; k < K; k++) {
            double wt = s->score_func == MOE_SCORE_SOFTMAX ? sc[ri[k]] : sc[ri[k]] / ws;
            wt *= s->route_scale;
            werr = fmax(werr, fabs(wt - gw[t * K + k]) / fmax(fabs(wt), 1e-12));
            ref_expert(s, &M->wd[ri[k] * 3], xt, wt, y);
        }
        if (s->has_shared) ref_expert(s, M->sh, xt, 1.0, y);
        for (int o = 0; o < H; o++) {
            double g = out[(size_t)t * H + o];
            if (!isfinite(g)) nan_out++;
            err2 += (g - y[o]) * (g - y[o]);
            ref2 += y[o] * y[o];
        }
    }
    double sh_rel = -1;
    if (g_shared_check && s->has_shared) {
        float *ys = malloc((size_t)T * H * 4);
        CU(cudaMemcpy(ys, W->y + (size_t)T * K * H, (size_t)T * H * 4, cudaMemcpyDeviceToHost));
        double e2 = 0, r2 = 0;
        for (int t = 0; t < T; t++) {
            memset(y, 0, H * sizeof(double));
            ref_expert(s, M->sh, x + (size_t)t * H, 1.0, y);
            for (int o = 0; o < H; o++) {
                const double d = ys[(size_t)t * H + o] - y[o];
                e2 += isfinite(d) ? d * d : 1e30;
                r2 += y[o] * y[o];
            }
        }
        sh_rel = sqrt(e2 / r2);
        free(ys);
    }
    int graph_diff = 0;
    if (g_graph_check) {
        cudaStream_t gst;
        cudaGraph_t gr;
        cudaGraphExec_t gx;
        float *og = malloc((size_t)T * H * 4);
        CU(cudaStreamCreateWithFlags(&gst, cudaStreamNonBlocking));
        CU(cudaStreamBeginCapture(gst, cudaStreamCaptureModeThreadLocal));
        if (moe_cuda_forward(L, W, dx, dtok, T, dout, gst)) exit(1);
        CU(cudaStreamEndCapture(gst, &gr));
        CU(cudaGraphInstantiateWithFlags(&gx, gr, cudaGraphInstantiateFlagUseNodePriority));
        for (int r = 0; r < 2; r++) {
            CU(cudaMemsetAsync(dout, 0xFF, (size_t)T * H * 4, gst));
            CU(cudaMemsetAsync(W->y, 0xFF, (size_t)W->max_tokens * (K + 1) * H * 4, gst));
            CU(cudaGraphLaunch(gx, gst));
            CU(cudaStreamSynchronize(gst));
            CU(cudaMemcpy(og, dout, (size_t)T * H * 4, cudaMemcpyDeviceToHost));
            graph_diff += memcmp(og, out, (size_t)T * H * 4) != 0;
        }
        CU(cudaGraphExecDestroy(gx));
        CU(cudaGraphDestroy(gr));
        CU(cudaStreamDestroy(gst));
        free(og);
    }
    const double rel = sqrt(err2 / ref2);
    printf("%-34s T=%-4d rel_l2=%.3e  weight_err=%.1e  idx_mismatch=%d near_ties=%d nonfinite=%d\n", name, T, rel, werr,
           idx_mismatch, near_ties, nan_out);
    if (g_graph_check) printf("  (2 graph replays: %s)\n", graph_diff ? "DIFFER" : "bit-identical to the stream run");
    if (sh_rel >= 0) printf("  (the shared expert alone: rel_l2=%.3e)\n", sh_rel);
    CHECK(sh_rel < 5e-3, "%s T=%d: the shared expert's own rows: relative L2 %.3e >= 5e-3", name, T, sh_rel);
    CHECK(rel < 1e-2, "%s T=%d: relative L2 %.3e >= 1e-2", name, T, rel);
    CHECK(nan_out == 0, "%s T=%d: %d outputs not written / not finite", name, T, nan_out);
    CHECK(idx_mismatch == 0, "%s T=%d: %d tokens routed differently from the reference", name, T, idx_mismatch);
    CHECK(werr < 1e-4, "%s T=%d: routing weight error %.1e", name, T, werr);
    CHECK(near_ties <= T / 50 + 1, "%s T=%d: too many near ties (%d)", name, T, near_ties);
    CHECK(graph_diff == 0, "%s T=%d: %d of 2 graph replays differ from the stream run", name, T, graph_diff);
    free(x); free(xb); free(tok); free(bias); free(out); free(gw); free(gi); free(y); free(sc); free(sel); free(ri);
    cudaFree(dx); cudaFree(dtok); cudaFree(dout);
}

/* Force plan fields for the next cases: "name=value,name=value" (moe_plan_set); "" returns to the default plan. */
static void plan(moe_cuda_ws *W, const char *fields)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", fields);
    W->n_set = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        if (moe_plan_set(W, t)) exit(1);
}

/* Tensor-core router logits (moe_router_logits_tc) against float64 on fresh random inputs, for several
 * token-group sizes, K parts (up to MOE_LOGITS_KS_MAX where hidden allows) and block shapes (ntt 1, 2, 4 n-tiles
 * per block, moe_router_logits_tc_shape): |gpu - ref| <= 1e-5 * sum_k |g x| (fp32 accumulation; products are
 * exact). And exactness of the three-plane gate split: a token whose input is one 1.0 at input k must
 * get gate[e][k] bit for bit for every expert (all other products are zero). */
static void test_logits_tc(const model *M, const moe_cuda_layer *L, moe_cuda_ws *W)
{
    const int E = M->s.n_experts, H = M->s.hidden, Tmax = W->max_tokens;
    uint16_t *xb = malloc((size_t)Tmax * H * 2), *dx;
    float *lg = malloc((size_t)MOE_LOGITS_KS_MAX * Tmax * E * 4);
    double *ref = malloc((size_t)Tmax * E * sizeof(double)), *mag = malloc((size_t)Tmax * E * sizeof(double));
    CU(cudaMalloc((void **)&dx, (size_t)Tmax * H * 2));
    const int Ts[5] = {1, 7, 33, 130, 257};
    for (int ti = 0; ti < 5; ti++) {
        const int T = Ts[ti] < Tmax ? Ts[ti] : Tmax;
        for (size_t i = 0; i < (size_t)T * H; i++) xb[i] = f2bf(nrand());
        CU(cudaMemcpy(dx, xb, (size_t)T * H * 2, cudaMemcpyHostToDevice));
        for (int t = 0; t < T; t++)
            for (int e = 0; e < E; e++) {
                double r = 0, m = 0;
                for (int k = 0; k < H; k++) {
                    const double p = (double)M->gate[(size_t)e * H + k] * bf2f(xb[(size_t)t * H + k]);
                    r += p;
                    m += fabs(p);
                }
                ref[(size_t)t * E + e] = r, mag[(size_t)t * E + e] = m;
            }
        for (int ks = 1; ks <= MOE_LOGITS_KS_MAX; ks *= 2)
            for (int ntt = 0; ntt <= 4; ntt += ntt ? ntt : 1) {   /* 0 (by T), 1, 2, 4 */
                if (H % (256 * ks)) continue;
                CU(cudaMemset(W->logits, 0xFF, (size_t)ks * T * E * 4));
                CU(ntt ? moe_router_logits_tc_shape(dx, L->gate_tc, T, H, E, W->logits, ntt, ks, 0)
                       : moe_router_logits_tc(dx, L->gate_tc, T, H, E, W->logits, ks, 0));
                CU(cudaMemcpy(lg, W->logits, (size_t)ks * T * E * 4, cudaMemcpyDeviceToHost));
                double worst = 0;
                for (int t = 0; t < T; t++)
                    for (int e = 0; e < E; e++) {
                        double got = 0;
                        for (int z = 0; z < ks; z++) got += lg[((size_t)z * T + t) * E + e];
                        worst = fmax(worst, fabs(got - ref[(size_t)t * E + e]) / mag[(size_t)t * E + e]);
                    }
                CHECK(worst <= 1e-5, "tensor-core logits T=%d ks=%d ntt=%d: error %.2e of sum |g x|", T, ks, ntt, worst);
                if ((ti == 4 && ntt == 0) || worst > 1e-5)
                    printf("tensor-core logits T=%d ks=%d ntt=%d (H %d): max error %.2e of sum |g x|\n", T, ks, ntt, H, worst);
            }
    }
    free(ref);
    free(mag);
    const int T = Tmax < 40 ? Tmax : 40;   /* one-hot tokens: exact */
    int kk[40], bad = 0;
    memset(xb, 0, (size_t)T * H * 2);
    for (int t = 0; t < T; t++) kk[t] = (int)(rnd() % H), xb[(size_t)t * H + kk[t]] = f2bf(1.f);
    CU(cudaMemcpy(dx, xb, (size_t)T * H * 2, cudaMemcpyHostToDevice));
    CU(moe_router_logits_tc(dx, L->gate_tc, T, H, E, W->logits, 1, 0));
    CU(cudaMemcpy(lg, W->logits, (size_t)T * E * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) bad += lg[(size_t)t * E + e] != M->gate[(size_t)e * H + kk[t]];
    CHECK(bad == 0, "tensor-core logits of one-hot tokens differ from the gate in %d places (plane split not exact)", bad);
    CU(cudaFree(dx));
    free(xb);
    free(lg);
}

static void test_quantiser(void)
{
    const int n = 256, k = 1024;
    float *w = malloc((size_t)n * k * 4);
    for (size_t i = 0; i < (size_t)n * k; i++) w[i] = 0.1f * nrand() * (i % 97 == 0 ? 8.f : 1.f);
    for (int i = 0; i < 32; i++) w[i] = 0.f;
    uint8_t *q = malloc(n * k / 2), *sc = malloc(n * k / 16), *gq = malloc(n * k / 2), *gs = malloc(n * k / 16);
    float s2, gs2;
    quant_nvfp4(w, n, k, q, sc, &s2);
    float *dw, *d2; uint8_t *dq, *ds;
    CU(cudaMalloc((void **)&dw, (size_t)n * k * 4)); CU(cudaMalloc((void **)&dq, n * k / 2));
    CU(cudaMalloc((void **)&ds, n * k / 16)); CU(cudaMalloc((void **)&d2, 4));
    CU(cudaMemcpy(dw, w, (size_t)n * k * 4, cudaMemcpyHostToDevice));
    if (moe_cuda_quantize_nvfp4(dw, n, k, dq, ds, d2, 0)) exit(1);
    CU(cudaMemcpy(gq, dq, n * k / 2, cudaMemcpyDeviceToHost)); CU(cudaMemcpy(gs, ds, n * k / 16, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&gs2, d2, 4, cudaMemcpyDeviceToHost));
    int dq_diff = 0, ds_diff = 0;
    for (int i = 0; i < n * k / 2; i++) dq_diff += q[i] != gq[i];
    for (int i = 0; i < n * k / 16; i++) ds_diff += sc[i] != gs[i];
    float *r = dq_fp4(gq, gs, gs2, n, k, QT_NVFP4);
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < (size_t)n * k; i++) e2 += (r[i] - w[i]) * (double)(r[i] - w[i]), r2 += (double)w[i] * w[i];
    printf("quantiser: GPU vs host: %d code bytes and %d scales differ, scale2 %s; round-trip rel_l2=%.3f\n", dq_diff,
           ds_diff, s2 == gs2 ? "equal" : "DIFFERS", sqrt(e2 / r2));
    CHECK(dq_diff == 0 && ds_diff == 0 && s2 == gs2, "CUDA NVFP4 quantiser differs from the host one");
    CHECK(sqrt(e2 / r2) < 0.12, "NVFP4 round trip error too large");
    for (int i = 0; i < 32; i++) CHECK(r[i] == 0.f, "zero block did not round-trip to zero");
    free(w); free(q); free(sc); free(gq); free(gs); free(r);
    cudaFree(dw); cudaFree(dq); cudaFree(ds); cudaFree(d2);
}

/* The shared expert's bf16 GEMMs (form: the case names' word for the scales the layer has now): one 128-token tile with
 * 112 rows past T, partial and whole tiles, three tiles, skewed, back to back; the graph against the stream run */
static void shared_gemm_cases(const char *form, model *M, moe_cuda_layer *L, moe_cuda_ws *W)
{
    char nm[128], nms[128], ng[128];
    snprintf(nm, sizeof nm, "nvfp4, shared expert %s", form);
    snprintf(nms, sizeof nms, "nvfp4 skewed, shared expert %s", form);
    snprintf(ng, sizeof ng, "nvfp4, shared expert %s, graph", form);
    plan(W, "shared_gemm=1");
    run_case(nm, M, L, W, 16, 0);    /* one block, 112 rows past T */
    run_case(nm, M, L, W, 100, 0);
    run_case(nm, M, L, W, 128, 0);   /* one whole block */
    run_case(nm, M, L, W, 129, 0);   /* one token in the second */
    run_case(nms, M, L, W, 200, 1);
    run_case(nm, M, L, W, 257, 0);
    run_case(nm, M, L, W, 257, 0);   /* back to back */
    g_graph_check = 1;
    run_case(ng, M, L, W, 257, 0);
    g_graph_check = 0;
    plan(W, "");
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    g_rng = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) * 2654435761u + 1;
    printf("seed %llu\n", (unsigned long long)g_rng);
    test_quantiser();

    moe_cuda_layer L;
    moe_cuda_ws W;
    model M;
    /* A: small V4-like layer, NVFP4 (host quantiser), sqrtsoftplus + bias, top-6, shared FP8, clamp */
    moe_cuda_shape a = {.n_experts = 32, .hidden = 1024, .inter = 512, .topk = 6, .score_func = MOE_SCORE_SQRTSOFTPLUS,
                        .route_scale = 1.5f, .swiglu_limit = 1.0f, .has_shared = 1, .fp4_fmt = QT_NVFP4,
                        .shared_bf16 = 1};
    make_model(&M, &L, &a, 0, 1);
    if (moe_cuda_ws_init(&W, &L, 257)) return 1;
    /* the default plan: the one expert launch (1-8), the fused 1-tile stages beside the shared launches (9-320), the
       separate launches with wide experts (257 here), the shared expert's bf16 GEMMs (256, 257) */
    static const int batches[] = {1, 2, 3, 4, 7, 8, 9, 12, 16, 17, 64, 224, 256, 257};
    for (int i = 0; i < 14; i++) run_case("nvfp4 sqrtsoftplus", &M, &L, &W, batches[i], 0);
    static const int skewed[] = {3, 4, 8, 9, 17, 64, 224, 257};   /* 6 experts with every token */
    for (int i = 0; i < 8; i++) run_case("nvfp4 skewed (6 experts, rest 0)", &M, &L, &W, skewed[i], 1);
    test_logits_tc(&M, &L, &W);
    /* forced plan fields: each form a forward can take */
    plan(&W, "own_shared=1,shared_fork=1");   /* the shared launches below 9 tokens, the one launch without them */
    for (int t = 1; t <= 7; t += 3) run_case("nvfp4, shared launches below 9", &M, &L, &W, t, 0);
    plan(&W, "own_shared=1,shared_fork=0");   /* ... in the layer's stream */
    run_case("nvfp4, shared launches in one stream", &M, &L, &W, 2, 0);
    run_case("nvfp4, shared launches in one stream", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, shared launches in one stream", &M, &L, &W, 257, 1);
    plan(&W, "own_shared=0");   /* the shared items inline in the routed launches above 8 tokens */
    run_case("nvfp4, shared inline", &M, &L, &W, 12, 0);
    run_case("nvfp4 skewed, shared inline", &M, &L, &W, 64, 1);
    plan(&W, "experts=2");   /* separate gate/up and down launches, tiles handed out */
    run_case("nvfp4, separate launches", &M, &L, &W, 9, 0);
    run_case("nvfp4, separate launches", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, separate launches", &M, &L, &W, 64, 1);
    plan(&W, "experts=2,dyn=0");   /* ... with a static item walk */
    run_case("nvfp4, static item walk", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, static item walk", &M, &L, &W, 33, 1);
    plan(&W, "dyn=3");   /* tiles handed out in both launches of a stage */
    run_case("nvfp4, tiles handed out in both launches", &M, &L, &W, 33, 0);
    run_case("nvfp4 skewed, tiles handed out in both launches", &M, &L, &W, 257, 1);
    for (int v = 0; v < 3; v++) {   /* experts with 9..tok1 tokens as 8-token chunks of the 1-tile launches */
        static const char *f[3] = {"tok1=16", "tok1=24", "tok1=64,experts=2,dyn=0"};
        char nm[96];
        snprintf(nm, sizeof nm, "nvfp4, %s", f[v]);
        plan(&W, f[v]);
        run_case(nm, &M, &L, &W, 64, 0);
        run_case(nm, &M, &L, &W, 64, 0);   /* back to back: the counts it leaves must be zero */
        run_case(nm, &M, &L, &W, 12, 1);   /* skewed: 6 experts x 12 tokens (chunks of 8 and 4) */
        run_case(nm, &M, &L, &W, 257, 1);
    }
    plan(&W, "nt2_all=1,experts=2,dyn=0");   /* every routed expert with tokens in the 2-tile launches */
    run_case("nvfp4, every expert 2-tile", &M, &L, &W, 12, 0);
    run_case("nvfp4, every expert 2-tile", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, every expert 2-tile", &M, &L, &W, 257, 1);
    plan(&W, "wide=16");   /* wide launches for experts above 16 tokens, in the fused and the separate launches */
    run_case("nvfp4, wide above 16", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, wide above 16", &M, &L, &W, 64, 1);
    plan(&W, "wide=16,experts=2,dyn=0");
    run_case("nvfp4 skewed, wide above 16, separate launches", &M, &L, &W, 64, 1);
    plan(&W, "shared_xl=1,shared_gemm=0");   /* the shared gate/up in 64-token blocks (the default at 512) */
    run_case("nvfp4, shared gate/up in 64-token blocks", &M, &L, &W, 130, 0);
    run_case("nvfp4 skewed, shared gate/up in 64-token blocks", &M, &L, &W, 257, 1);
    plan(&W, "shared_tile=0");   /* 16-token shared gate/up blocks up to 64 */
    run_case("nvfp4, shared tile 16", &M, &L, &W, 33, 0);
    run_case("nvfp4, shared tile 16", &M, &L, &W, 64, 0);
    plan(&W, "topk_lists=1");   /* top-k and lists as one launch at larger batches */
    run_case("nvfp4, top-k + lists one launch", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, top-k + lists one launch", &M, &L, &W, 200, 1);
    plan(&W, "topk_group=0");   /* one warp per token in the top-k + lists launch */
    run_case("nvfp4, one-warp top-k", &M, &L, &W, 1, 0);
    run_case("nvfp4, one-warp top-k", &M, &L, &W, 4, 0);
    plan(&W, "logits_tc=0,logits_ks=2,down_rm=1");   /* CUDA-core router logits in 2 K parts, 64-row down items */
    run_case("nvfp4, CUDA-core logits, 64-row down", &M, &L, &W, 2, 0);
    run_case("nvfp4, CUDA-core logits, 64-row down", &M, &L, &W, 64, 0);
    run_case("nvfp4 skewed, CUDA-core logits, 64-row down", &M, &L, &W, 257, 1);
    plan(&W, "logits_tc=1,logits16=1");
    run_case("nvfp4, tensor-core logits", &M, &L, &W, 1, 0);
    plan(&W, "");
    shared_gemm_cases("bf16 GEMMs", &M, &L, &W);           /* fp32 scales of any mantissa: mma.sync, partials */
    make_shared(&M, &L, 1);
    shared_gemm_cases("bf16 GEMMs, folded scales", &M, &L, &W);   /* power-of-two scales: wgmma by TMA */
    {   /* the default plan replayed from a CUDA graph, against the stream run bit for bit */
        static const int gt[] = {1, 8, 9, 64, 200};
        g_graph_check = 1;
        for (int i = 0; i < 5; i++) run_case("nvfp4, graph replay", &M, &L, &W, gt[i], 0);
        run_case("nvfp4 skewed, graph replay", &M, &L, &W, 257, 1);
        g_graph_check = 0;
    }
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* B: top-1, all tokens to one expert (33 token chunks), softmax, no shared */
    moe_cuda_shape b = a;
    b.topk = 1; b.score_func = MOE_SCORE_SOFTMAX; b.has_shared = 0; b.route_scale = 1.f;
    make_model(&M, &L, &b, 0, 0);
    if (moe_cuda_ws_init(&W, &L, 257)) return 1;
    run_case("nvfp4 softmax top-1 skewed", &M, &L, &W, 257, 1);
    run_case("nvfp4 softmax top-1", &M, &L, &W, 64, 0);
    run_case("nvfp4 softmax top-1, no shared, one expert launch", &M, &L, &W, 4, 0);
    run_case("nvfp4 softmax top-1 skewed, no shared, one expert launch", &M, &L, &W, 8, 1);
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* C: MXFP4 (DeepSeek official format), sigmoid, and hash routing */
    moe_cuda_shape c = a;
    c.fp4_fmt = QT_MXFP4; c.score_func = MOE_SCORE_SIGMOID;
    make_model(&M, &L, &c, 0, 0);
    if (moe_cuda_ws_init(&W, &L, 64)) return 1;
    run_case("mxfp4 sigmoid", &M, &L, &W, 64, 0);
    run_case("mxfp4 sigmoid, one expert launch", &M, &L, &W, 2, 0);
    run_case("mxfp4 sigmoid, one expert launch", &M, &L, &W, 6, 0);
    run_case("mxfp4 sigmoid, grouped top-k", &M, &L, &W, 4, 0);
    plan(&W, "wide=16");   /* the MXFP4 scales in the wide kernels */
    run_case("mxfp4 sigmoid, wide experts above 16", &M, &L, &W, 64, 0);
    run_case("mxfp4 sigmoid skewed, wide experts above 16", &M, &L, &W, 64, 1);
    plan(&W, "");
    moe_cuda_ws_free(&W);
    free_model(&M, &L);
    c.hash = 1; c.vocab = 1000; c.score_func = MOE_SCORE_SQRTSOFTPLUS; c.fp4_fmt = QT_NVFP4;
    make_model(&M, &L, &c, 0, 0);
    if (moe_cuda_ws_init(&W, &L, 64)) return 1;
    run_case("nvfp4 hash routing", &M, &L, &W, 33, 0);
    run_case("nvfp4 hash routing", &M, &L, &W, 1, 0);   /* one warp per token where the others are grouped */
    run_case("nvfp4 hash routing", &M, &L, &W, 4, 0);
    run_case("nvfp4 hash routing", &M, &L, &W, 5, 0);
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* hidden 256 (2 chunks of 128: the 4 K parts of the shared gate/up must shrink to 2, as for the engine's tiny test
       model), one expert launch */
    moe_cuda_shape t = a;
    t.n_experts = 16; t.hidden = 256; t.inter = 128;
    make_model(&M, &L, &t, 0, 0);
    if (moe_cuda_ws_init(&W, &L, 16)) return 1;
    run_case("hidden 256, one expert launch", &M, &L, &W, 1, 0);
    run_case("hidden 256, one expert launch", &M, &L, &W, 2, 0);
    plan(&W, "ks_gu=4");
    run_case("hidden 256, one expert launch, 4 K parts asked", &M, &L, &W, 8, 0);
    plan(&W, "");
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* E: V4-Flash's 256 experts (top-6, sqrtsoftplus + bias, duplicated gate rows for exact ties) on small expert
       dims: every warp of the grouped top-k has 32 experts */
    moe_cuda_shape f = a;
    f.n_experts = 256; f.hidden = 256; f.inter = 128;
    make_model(&M, &L, &f, 1, 1);
    if (moe_cuda_ws_init(&W, &L, 512)) return 1;
    {
        static const int fb[] = {1, 2, 4, 8, 16, 33, 64, 257, 512};
        for (int i = 0; i < 9; i++) run_case("256 experts", &M, &L, &W, fb[i], 0);
        run_case("256 experts skewed", &M, &L, &W, 4, 1);
        run_case("256 experts skewed", &M, &L, &W, 6, 1);
        run_case("256 experts skewed", &M, &L, &W, 17, 1);
        run_case("256 experts skewed", &M, &L, &W, 64, 1);
        run_case("256 experts skewed", &M, &L, &W, 512, 1);
        plan(&W, "topk_lists=1");
        run_case("256 experts, top-k + lists one launch", &M, &L, &W, 8, 0);
        run_case("256 experts skewed, top-k + lists one launch", &M, &L, &W, 6, 1);
        plan(&W, "");
    }
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* G: hidden 2048, so the tensor-core logits take up to 8 K parts, and 16 experts (E % 16 == 0 for the gate
       planes) */
    moe_cuda_shape gs = a;
    gs.n_experts = 16; gs.hidden = 2048; gs.inter = 128;
    make_model(&M, &L, &gs, 1, 1);
    if (moe_cuda_ws_init(&W, &L, 257)) return 1;
    test_logits_tc(&M, &L, &W);
    run_case("hidden 2048", &M, &L, &W, 130, 0);
    run_case("hidden 2048", &M, &L, &W, 257, 0);
    run_case("hidden 2048 skewed", &M, &L, &W, 33, 1);
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    /* D: V4-Flash expert dims (hidden 4096, inter 2048), 8 experts, GPU quantiser */
    moe_cuda_shape d = a;
    d.n_experts = 8; d.hidden = 4096; d.inter = 2048; d.swiglu_limit = 10.f;
    make_model(&M, &L, &d, 1, 0);
    if (moe_cuda_ws_init(&W, &L, 16)) return 1;
    run_case("V4-Flash dims, GPU-quantised", &M, &L, &W, 7, 0);
    run_case("V4-Flash dims, GPU-quantised, one expert launch", &M, &L, &W, 1, 0);
    run_case("V4-Flash dims, one expert launch", &M, &L, &W, 8, 0);
    run_case("V4-Flash dims skewed, one expert launch", &M, &L, &W, 8, 1);
    plan(&W, "ks_gu=4");
    run_case("V4-Flash dims, one expert launch, 4 K parts", &M, &L, &W, 2, 0);
    plan(&W, "own_shared=1");   /* the shared expert's own launches at full K (ring refills) */
    run_case("V4-Flash dims, shared launches", &M, &L, &W, 16, 0);
    plan(&W, "own_shared=1,shared_gemm=1");   /* its bf16 GEMMs at full K (64 steps of 64 inputs) */
    g_shared_check = 1;
    run_case("V4-Flash dims, shared expert bf16 GEMMs", &M, &L, &W, 3, 0);
    run_case("V4-Flash dims, shared expert bf16 GEMMs", &M, &L, &W, 16, 0);
    make_shared(&M, &L, 1);   /* on wgmma by TMA at full K: 64 and 32 steps through its 4 stages' mbarrier phases */
    run_case("V4-Flash dims, shared expert GEMMs by TMA", &M, &L, &W, 3, 0);
    run_case("V4-Flash dims, shared expert GEMMs by TMA", &M, &L, &W, 16, 0);
    make_shared(&M, &L, 0);
    g_shared_check = 0;
    plan(&W, "");
    g_graph_check = 1;   /* the one expert launch, replayed from a graph */
    run_case("V4-Flash dims, graph replay", &M, &L, &W, 1, 0);
    run_case("V4-Flash dims, graph replay", &M, &L, &W, 8, 0);
    run_case("V4-Flash dims skewed, graph replay", &M, &L, &W, 16, 1);
    g_graph_check = 0;
    moe_cuda_ws_free(&W);
    free_model(&M, &L);

    printf(g_fail ? "test_moe_gpu: FAILED\n" : "test_moe_gpu: all passed\n");
    return g_fail;
}
