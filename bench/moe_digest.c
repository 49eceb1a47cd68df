/* moe_digest.c — sluice-moe-digest: a fingerprint of the GPU MoE layer's output, to check that a change to the
 * kernels or the launch plan leaves every output bit as it was.
 *
 * It builds V4-Flash-shaped layers (hidden 4096, inter 2048, 256 experts, top-6, sqrtsoftplus, route_scale 1.5,
 * swiglu_limit 10, one FP8 shared expert) from fixed-seed pseudo-random weights, for MXFP4 and NVFP4 experts, with
 * the shared expert's bf16 copy off and on (its block scales powers of two, as DeepSeek's ue8m0 are, and once fp32
 * scales of any mantissa), and once with hash routing; runs moe_cuda_forward at the default plan for a set of batch
 * sizes and prints one line per (layer, batch):
 *     fmt shared_bf16 routing T fnv1a64(out bytes)
 * Each forward runs twice; a batch whose two outputs differ is reported on stderr ("NONDETERMINISTIC") and the
 * program exits 3. It uses only entry points that every version of engine/cuda/moe_cuda.h since the shared
 * expert's bf16 copy has (layer_init, set_router, set_expert, set_shared, ws_init, forward, the frees), so the
 * same file builds against an older tree and the two outputs can be diffed (bench/gpu_run.sh moe-ab).
 *   sluice-moe-digest [--batches 1,2,...]   (exit 77 without a CUDA device)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "sluice-moe-digest: built without CUDA: nothing to run\n");
    return 77;
}
#else
#include <cuda_runtime_api.h>
#include "moe_cuda.h"
#include "moe_kernels.h"

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "sluice-moe-digest: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

enum { H = 4096, I = 2048, E = 256, TOPK = 6, VOCAB = 1024, MAXT = 512 };

static uint64_t g_rng;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; }
static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }

static uint64_t fnv1a64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Pools the expert matrices take slices of (a fresh random draw per matrix would cost seconds of host time for
 * 3.4 GB of weights): FP4 codes, and block-scale bytes in a range that keeps the layer's values finite and its
 * SwiGLU clamp sometimes active. */
#define QPOOL ((size_t)64 << 20)
#define SPOOL ((size_t)8 << 20)
static uint8_t *g_q, *g_s_nv, *g_s_mx;

static void make_pools(void)
{
    g_q = malloc(QPOOL + (size_t)I * H / 2);
    g_s_nv = malloc(SPOOL + (size_t)I * H / 16);
    g_s_mx = malloc(SPOOL + (size_t)I * H / 32);
    if (!g_q || !g_s_nv || !g_s_mx) { fprintf(stderr, "sluice-moe-digest: out of host memory\n"); exit(1); }
    g_rng = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < QPOOL + (size_t)I * H / 2; i++) g_q[i] = (uint8_t)rnd();
    for (size_t i = 0; i < SPOOL + (size_t)I * H / 16; i++) g_s_nv[i] = (uint8_t)(0x18 + rnd() % 16);   /* E4M3 2^-4..2^-2 */
    for (size_t i = 0; i < SPOOL + (size_t)I * H / 32; i++) g_s_mx[i] = (uint8_t)(127 - 7 + rnd() % 4);   /* E8M0 2^-7..2^-4 */
}

/* One layer: fmt QT_NVFP4 or QT_MXFP4; bf16: the shared expert's bf16 copy; f32_scales: its block scales fp32 of any
 * mantissa (else powers of two); hash: hash routing (tid2eid). Seeds depend on the layer's kind only. */
static void make_layer(moe_cuda_layer *L, int fmt, int bf16, int f32_scales, int hash, uint64_t seed)
{
    const moe_cuda_shape s = {.n_experts = E, .hidden = H, .inter = I, .topk = TOPK,
                              .score_func = MOE_SCORE_SQRTSOFTPLUS, .route_scale = 1.5f, .swiglu_limit = 10.f,
                              .hash = hash, .vocab = VOCAB, .has_shared = 1, .fp4_fmt = fmt, .shared_bf16 = bf16};
    if (moe_cuda_layer_init(L, &s)) exit(1);
    g_rng = seed;
    float *gate = malloc((size_t)E * H * sizeof(float)), *bias = malloc(E * sizeof(float));
    int32_t *t2e = malloc((size_t)VOCAB * TOPK * sizeof(int32_t));
    if (!gate || !bias || !t2e) { fprintf(stderr, "sluice-moe-digest: out of host memory\n"); exit(1); }
    for (size_t i = 0; i < (size_t)E * H; i++) gate[i] = (urand() - 0.5f) * 0.05f;
    for (int e = 0; e < E; e++) bias[e] = (urand() - 0.5f) * 0.1f;
    for (int v = 0; v < VOCAB; v++)
        for (int k = 0; k < TOPK; k++) {
            int e, dup;
            do {
                e = (int)(rnd() % E), dup = 0;
                for (int j = 0; j < k; j++) dup |= t2e[v * TOPK + j] == e;
            } while (dup);
            t2e[v * TOPK + k] = e;
        }
    if (moe_cuda_set_router(L, gate, bias, hash ? t2e : NULL)) exit(1);
    free(gate); free(bias); free(t2e);
    const uint8_t *sp = fmt == QT_NVFP4 ? g_s_nv : g_s_mx;
    for (int e = 0; e < E; e++) {
        qtensor t[3];
        for (int m = 0; m < 3; m++) {
            const int n = m < 2 ? I : H, k = m < 2 ? H : I;
            t[m] = (qtensor){.fmt = (qt_format)fmt, .rows = n, .cols = k, .data = g_q + (rnd() % (QPOOL / 16)) * 16,
                             .scale = sp + rnd() % SPOOL, .scale2 = fmt == QT_NVFP4 ? 0.02f + 0.01f * (float)(rnd() % 4) : 1.f};
        }
        if (moe_cuda_set_expert(L, e, &t[0], &t[1], &t[2])) exit(1);
    }
    qtensor t[3];
    for (int m = 0; m < 3; m++) {
        const int n = m < 2 ? I : H, k = m < 2 ? H : I;
        const size_t nb = (size_t)(n / 128) * (k / 128);
        uint8_t *d = malloc((size_t)n * k);
        float *sc = malloc(nb * sizeof(float));
        if (!d || !sc) { fprintf(stderr, "sluice-moe-digest: out of host memory\n"); exit(1); }
        for (size_t i = 0; i < (size_t)n * k; i++) {
            uint8_t b = (uint8_t)rnd();
            if ((b & 0x7F) == 0x7F) b = 0x10;   /* no NaN codes */
            d[i] = b;
        }
        for (size_t i = 0; i < nb; i++)
            sc[i] = f32_scales ? (0.5f + urand()) * 4e-3f : (float)(1.0 / (1 << (7 + rnd() % 3)));
        t[m] = (qtensor){.fmt = QT_FP8_B128, .rows = n, .cols = k, .data = d, .scale = sc, .scale_is_f32 = 1};
    }
    if (moe_cuda_set_shared(L, &t[0], &t[1], &t[2])) exit(1);
    for (int m = 0; m < 3; m++) { free((void *)t[m].data); free((void *)t[m].scale); }
}

int main(int argc, char **argv)
{
    int batches[64] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512}, nb = 19;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            nb = 0;
            for (char *t = strtok(argv[++i], ","); t && nb < 64; t = strtok(NULL, ",")) batches[nb++] = atoi(t);
        } else {
            fprintf(stderr, "usage: sluice-moe-digest [--batches 1,2,...]\n");
            return 2;
        }
    }
    for (int i = 0; i < nb; i++)
        if (batches[i] < 1 || batches[i] > MAXT) { fprintf(stderr, "sluice-moe-digest: batch %d out of 1..%d\n", batches[i], MAXT); return 2; }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { fprintf(stderr, "sluice-moe-digest: no CUDA device\n"); return 77; }
    make_pools();
    /* inputs: bf16 activations in [-1, 1), token ids in [0, VOCAB) */
    uint16_t *hx = malloc((size_t)MAXT * H * 2);
    int32_t htok[MAXT];
    g_rng = 0x1234567887654321ull;
    for (size_t i = 0; i < (size_t)MAXT * H; i++) hx[i] = f2bf(2.f * urand() - 1.f);
    for (int i = 0; i < MAXT; i++) htok[i] = (int32_t)(rnd() % VOCAB);
    uint16_t *x; int32_t *tok; float *out;
    CU(cudaMalloc((void **)&x, (size_t)MAXT * H * 2));
    CU(cudaMalloc((void **)&tok, MAXT * 4));
    CU(cudaMalloc((void **)&out, (size_t)MAXT * H * 4));
    CU(cudaMemcpy(x, hx, (size_t)MAXT * H * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(tok, htok, MAXT * 4, cudaMemcpyHostToDevice));
    float *h1 = malloc((size_t)MAXT * H * 4), *h2 = malloc((size_t)MAXT * H * 4);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    static const struct { int fmt, bf16, f32_scales, hash; const char *fn, *bn, *rn; } cfg[] = {
        {QT_MXFP4, 0, 0, 0, "mxfp4", "0", "score"},
        {QT_MXFP4, 1, 0, 0, "mxfp4", "1", "score"},
        {QT_NVFP4, 0, 0, 0, "nvfp4", "0", "score"},
        {QT_NVFP4, 1, 0, 0, "nvfp4", "1", "score"},
        {QT_NVFP4, 1, 1, 0, "nvfp4", "1-f32scales", "score"},
        {QT_MXFP4, 1, 0, 1, "mxfp4", "1", "hash"},
    };
    int nondet = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        moe_cuda_layer L;
        moe_cuda_ws W;
        make_layer(&L, cfg[c].fmt, cfg[c].bf16, cfg[c].f32_scales, cfg[c].hash, 1000003ull * (c + 1));
        if (moe_cuda_ws_init(&W, &L, MAXT)) return 1;
        for (int bi = 0; bi < nb; bi++) {
            const int T = batches[bi];
            for (int rep = 0; rep < 2; rep++) {
                CU(cudaMemsetAsync(out, 0xFF, (size_t)T * H * 4, st));
                if (moe_cuda_forward(&L, &W, x, tok, T, out, st)) return 1;
                CU(cudaStreamSynchronize(st));
                CU(cudaMemcpy(rep ? h2 : h1, out, (size_t)T * H * 4, cudaMemcpyDeviceToHost));
            }
            const uint64_t d1 = fnv1a64(h1, (size_t)T * H * 4);
            if (memcmp(h1, h2, (size_t)T * H * 4)) {
                fprintf(stderr, "NONDETERMINISTIC %s %s %s %d: two forwards differ\n", cfg[c].fn, cfg[c].bn, cfg[c].rn, T);
                nondet = 1;
            }
            size_t nonfinite = 0;
            for (size_t i = 0; i < (size_t)T * H; i++) nonfinite += !(h1[i] - h1[i] == 0.f);
            printf("%s %s %s %d %016llx%s\n", cfg[c].fn, cfg[c].bn, cfg[c].rn, T, (unsigned long long)d1,
                   nonfinite ? " (non-finite values)" : "");
            fflush(stdout);
        }
        moe_cuda_ws_free(&W);
        moe_cuda_layer_free(&L);
    }
    CU(cudaStreamDestroy(st));
    cudaFree(x); cudaFree(tok); cudaFree(out);
    free(hx); free(h1); free(h2); free(g_q); free(g_s_nv); free(g_s_mx);
    return nondet ? 3 : 0;
}
#endif
