/* test_dense_gpu.c — dense projections (kernels/dense_gemm.h) against a float64 CPU reference on the same
 * dequantised weights. Fresh random inputs each run (seed printed; argv seed to repeat): bf16 activations, bf16
 * weights and e4m3 weights from random floats with random power-of-two block scales (one case with arbitrary fp32
 * scales). Shapes: every (n, k) of a small odd set x m of another, two calls each (the whole range; a random n0
 * sub-range with ldx > k, an unaligned x and ldy > nn), a few larger odd shapes (K slices, clusters, partial
 * chunks), and V4-Flash's projection shapes at m = 1..256 (sampled output rows). Every output in range is written
 * (y is poisoned before each call) and nothing outside it; per token row relative L2 <= 5e-5 and per element
 * |err| <= 1e-4 * sum |x w|. Batch invariance: row i computed with m = 1 (x at row i), inside m = 2..130 and
 * inside m = 256 bitwise equal, for every kernel variant; a replayed CUDA graph bitwise equal to the stream call.
 * --bench: for the V4-Flash shapes at m = 1, 4, 16, 64, 128, 256 the median time over graph replays (each graph
 * calls several weight copies in turn so L2 does not serve them), the weight bytes' GB/s and % of the HBM read rate
 * measured here (moe_hbm_read over 4 GB). Exit 77 without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "dense_gemm.h"
#include "moe_bench_kernels.h"

static int g_fail = 0;
static double g_max_rel = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); g_fail = 1; } } while (0)
#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

/* ---- random */
static uint64_t g_rng;
static uint32_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return (uint32_t)(g_rng >> 11); }
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; }
static int irand(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }   /* [lo, hi] */

/* ---- reference codecs */
static float e4m3(uint8_t b)
{
    int ex = (b >> 3) & 15, man = b & 7;
    float m = ex ? ldexpf(1.f + man / 8.f, ex - 7) : ldexpf((float)man, -9);
    return (b & 0x80) ? -m : m;
}
static uint8_t f32_to_e4m3(float f)   /* round to nearest even, saturate to 448 */
{
    const uint8_t s = f < 0 ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.f) return s | 0x7E;
    if (a < 0.015625f) return s | (uint8_t)nearbyintf(a * 512.f);   /* subnormals (code 8 is 2^-6, the first normal) */
    int e;
    const float fr = frexpf(a, &e);   /* a = fr 2^e, fr in [0.5, 1) */
    int q = (int)nearbyintf((fr * 2.f - 1.f) * 8.f), ex = e - 1;
    if (q == 8) q = 0, ex++;
    const int code = ((ex + 7) << 3) | q;
    return s | (uint8_t)(code > 0x7E ? 0x7E : code);
}
static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static float g_e4m3[256];

/* a random bf16 in +-[1/64, 1): never zero */
static uint16_t rand_bf16(void)
{
    const float v = (1.f / 64) + urand() * (1.f - 1.f / 64);
    return f2bf(rnd() & 1 ? -v : v);
}

/* ---- a host weight and its device form */
typedef struct {
    int fmt, n, k, nkb;
    uint16_t *wb;   /* bf16 [n][k] */
    uint8_t *wq;    /* e4m3 [n][k] */
    float *sc;      /* [ceil(n/128)][nkb] */
    dense_weight dw;
} weight;

static double wval(const weight *w, int j, int c)
{
    if (w->fmt == DENSE_BF16) return bf2f(w->wb[(size_t)j * w->k + c]);
    return (double)g_e4m3[w->wq[(size_t)j * w->k + c]] * w->sc[(size_t)(j / 128) * w->nkb + c / 128];
}

/* pow2 0: arbitrary positive fp32 scales */
static void weight_make(weight *w, int fmt, int n, int k, int pow2)
{
    memset(w, 0, sizeof *w);
    w->fmt = fmt, w->n = n, w->k = k, w->nkb = (k + 127) / 128;
    const size_t nk = (size_t)n * k;
    void *dsrc;
    float *dsc = NULL;
    if (fmt == DENSE_BF16) {
        w->wb = malloc(nk * 2);
        for (size_t i = 0; i < nk; i++) w->wb[i] = rand_bf16();
        CU(cudaMalloc(&dsrc, nk * 2));
        CU(cudaMemcpy(dsrc, w->wb, nk * 2, cudaMemcpyHostToDevice));
    } else {
        w->wq = malloc(nk);
        for (size_t i = 0; i < nk; i++) {
            const float v = (4.f + urand() * 444.f) * (rnd() & 1 ? -1.f : 1.f);
            w->wq[i] = f32_to_e4m3(v * (rnd() % 8 == 0 ? 1.f / 4096 : 1.f));   /* some small codes and subnormals */
        }
        const size_t ns = (size_t)((n + 127) / 128) * w->nkb;
        w->sc = malloc(ns * sizeof(float));
        for (size_t i = 0; i < ns; i++)
            w->sc[i] = pow2 ? ldexpf(1.f, irand(-14, -6)) : ldexpf(0.5f + urand(), irand(-14, -6));
        CU(cudaMalloc(&dsrc, nk));
        CU(cudaMemcpy(dsrc, w->wq, nk, cudaMemcpyHostToDevice));
        CU(cudaMalloc((void **)&dsc, ns * sizeof(float)));
        CU(cudaMemcpy(dsc, w->sc, ns * sizeof(float), cudaMemcpyHostToDevice));
    }
    CU(dense_weight_init(&w->dw, fmt, n, k, dsrc, dsc, 0));
    CU(cudaFree(dsrc));   /* the weight owns its copy */
    if (dsc) CU(cudaFree(dsc));
    CHECK(w->dw.fmt == fmt && w->dw.n == n && w->dw.k == k && w->dw.w && w->dw.bytes > 0, "dense_weight fields");
}

static void weight_free(weight *w)
{
    dense_weight_free(&w->dw);
    free(w->wb);
    free(w->wq);
    free(w->sc);
}

/* ---- one checked call: y = x W[n0 .. n0+nn)^T with x [m][ldx] at xoff elements past a 256-aligned base;
 * nsample > 0: check that many random output rows (else all) */
static const uint32_t POISON = 0xFFFFFFFFu;

static void run_check(const char *name, weight *w, int n0, int nn, int m, int ldx, int xoff, int ldy, int nsample,
                      int groups)
{
    const size_t xn = (size_t)m * ldx + xoff, yn = (size_t)m * ldy + 16;
    uint16_t *hx = malloc(xn * 2);
    for (size_t i = 0; i < xn; i++) hx[i] = rand_bf16();
    float *hy = malloc(yn * 4);
    uint16_t *dx;
    float *dy;
    CU(cudaMalloc((void **)&dx, xn * 2));
    CU(cudaMalloc((void **)&dy, yn * 4));
    CU(cudaMemcpy(dx, hx, xn * 2, cudaMemcpyHostToDevice));
    CU(cudaMemset(dy, 0xFF, yn * 4));
    cudaError_t e = groups ? dense_gemm_grouped(&w->dw, groups, dx + xoff, ldx, w->k, m, dy, 0, ldy, 0)
                           : dense_gemm(&w->dw, n0, nn, dx + xoff, ldx, m, dy, ldy, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "%s: dense_gemm: %s", name, cudaGetErrorString(e));
    if (e != cudaSuccess) exit(1);
    CU(cudaMemcpy(hy, dy, yn * 4, cudaMemcpyDeviceToHost));
    if (groups) {   /* the bf16 output form: each element the fp32 result rounded to nearest */
        uint16_t *db, *hb = malloc((size_t)m * ldy * 2);
        CU(cudaMalloc((void **)&db, (size_t)m * ldy * 2));
        CU(dense_gemm_grouped(&w->dw, groups, dx + xoff, ldx, w->k, m, db, 1, ldy, 0));
        CU(cudaMemcpy(hb, db, (size_t)m * ldy * 2, cudaMemcpyDeviceToHost));
        size_t diff = 0;
        for (int i = 0; i < m; i++)
            for (int c = 0; c < nn; c++) diff += hb[(size_t)i * ldy + c] != f2bf(hy[(size_t)i * ldy + c]);
        CHECK(!diff, "%s grouped m %d: %zu bf16 outputs are not the fp32 ones rounded", name, m, diff);
        free(hb);
        CU(cudaFree(db));
    }
    /* written exactly in range */
    size_t unwritten = 0, stray = 0;
    for (int i = 0; i < m; i++)
        for (int c = 0; c < ldy; c++) {
            uint32_t u;
            memcpy(&u, &hy[(size_t)i * ldy + c], 4);
            if (c < nn && (u == POISON || !isfinite(hy[(size_t)i * ldy + c]))) unwritten++;
            if (c >= nn && u != POISON) stray++;
        }
    for (size_t t = (size_t)m * ldy; t < yn; t++) {
        uint32_t u;
        memcpy(&u, &hy[t], 4);
        if (u != POISON) stray++;
    }
    CHECK(!unwritten && !stray, "%s n0 %d nn %d m %d: %zu outputs unwritten or not finite, %zu written outside", name,
          n0, nn, m, unwritten, stray);
    /* values */
    const int ns = nsample > 0 && nsample < nn ? nsample : nn;
    int *cols = malloc(ns * sizeof(int));
    for (int s = 0; s < ns; s++) cols[s] = ns == nn ? s : irand(0, nn - 1);
    double *wrow = malloc((size_t)w->k * sizeof(double));
    double *num = calloc(m, sizeof(double)), *den = calloc(m, sizeof(double));
    int bad = 0;
    for (int s = 0; s < ns; s++) {
        const int j = n0 + cols[s];
        for (int c = 0; c < w->k; c++) wrow[c] = wval(w, j, c);
        for (int i = 0; i < m; i++) {
            const uint16_t *xr = hx + xoff + (size_t)i * ldx + (groups ? (size_t)(j / (w->n / groups)) * w->k : 0);
            double ref = 0, mag = 0;
            for (int c = 0; c < w->k; c++) {
                const double p = bf2f(xr[c]) * wrow[c];
                ref += p;
                mag += fabs(p);
            }
            const double got = hy[(size_t)i * ldy + cols[s]], err = got - ref;
            num[i] += err * err;
            den[i] += ref * ref;
            if (fabs(err) > 1e-4 * mag + 1e-30 && bad++ < 3)
                printf("FAIL: %s n0 %d nn %d m %d: y[%d][%d] = %.9g, reference %.9g (sum |xw| %.3g)\n", name, n0, nn, m,
                       i, cols[s], got, ref, mag);
        }
    }
    double worst = 0;
    for (int i = 0; i < m; i++) {
        const double r = den[i] > 0 ? sqrt(num[i] / den[i]) : sqrt(num[i]);
        if (r > worst) worst = r;
    }
    /* a row of a few outputs is a few dot products: cancellation makes its relative error meaningless (the
     * per-element bound above covers them); the row bound applies from 16 outputs */
    if (ns < 16) worst = 0;
    if (worst > g_max_rel) g_max_rel = worst;
    CHECK(!bad && worst <= 5e-5, "%s n0 %d nn %d m %d ldx %d: %d elements off, worst row relative L2 %.3g", name, n0, nn,
          m, ldx, bad, worst);
    free(cols), free(wrow), free(num), free(den), free(hx), free(hy);
    CU(cudaFree(dx));
    CU(cudaFree(dy));
}

/* ---- batch invariance: rows of m = 256 against the same rows computed with smaller m, and with m = 1 at row i */
static void run_invariance(const char *name, weight *w, int n0, int nn, int ldx, int xoff)
{
    const int M = 256;
    const size_t xn = (size_t)M * ldx + xoff;
    uint16_t *hx = malloc(xn * 2);
    for (size_t i = 0; i < xn; i++) hx[i] = rand_bf16();
    uint16_t *dx;
    float *dy, *dz;
    CU(cudaMalloc((void **)&dx, xn * 2));
    CU(cudaMalloc((void **)&dy, (size_t)M * nn * 4));
    CU(cudaMalloc((void **)&dz, (size_t)M * nn * 4));
    CU(cudaMemcpy(dx, hx, xn * 2, cudaMemcpyHostToDevice));
    float *full = malloc((size_t)M * nn * 4), *part = malloc((size_t)M * nn * 4);
    CU(dense_gemm(&w->dw, n0, nn, dx + xoff, ldx, M, dy, nn, 0));
    CU(cudaMemcpy(full, dy, (size_t)M * nn * 4, cudaMemcpyDeviceToHost));
    static const int ms[] = {1, 2, 3, 4, 8, 9, 16, 17, 32, 33, 64, 65, 128, 130, 256};
    for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
        const int m = ms[t];
        CU(cudaMemset(dz, 0xFF, (size_t)M * nn * 4));
        CU(dense_gemm(&w->dw, n0, nn, dx + xoff, ldx, m, dz, nn, 0));
        CU(cudaMemcpy(part, dz, (size_t)m * nn * 4, cudaMemcpyDeviceToHost));
        int diff = -1;
        for (int i = 0; i < m && diff < 0; i++)
            if (memcmp(part + (size_t)i * nn, full + (size_t)i * nn, (size_t)nn * 4)) diff = i;
        CHECK(diff < 0, "%s: batch invariance: row %d differs between m = %d and m = %d", name, diff, m, M);
    }
    static const int rows[] = {0, 5, 37, 200, 255};
    for (size_t t = 0; t < sizeof rows / sizeof rows[0]; t++) {
        const int i = rows[t];
        CU(cudaMemset(dz, 0xFF, (size_t)nn * 4));
        /* x + i rows is 16-byte aligned whenever x is and ldx % 8 == 0: the same kernel family as the batch */
        CU(dense_gemm(&w->dw, n0, nn, dx + xoff + (size_t)i * ldx, ldx, 1, dz, nn, 0));
        CU(cudaMemcpy(part, dz, (size_t)nn * 4, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(part, full + (size_t)i * nn, (size_t)nn * 4),
              "%s: batch invariance: row %d alone differs from row %d of m = %d", name, i, i, M);
    }
    /* graph replay of the m = 256 call: bitwise the stream's result */
    cudaStream_t st;
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CU(cudaMemset(dz, 0xFF, (size_t)M * nn * 4));
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CU(dense_gemm(&w->dw, n0, nn, dx + xoff, ldx, M, dz, nn, st));
    CU(cudaStreamEndCapture(st, &gr));
    CU(cudaGraphInstantiate(&ge, gr, 0));
    CU(cudaGraphLaunch(ge, st));
    CU(cudaGraphLaunch(ge, st));
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(part, dz, (size_t)M * nn * 4, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(part, full, (size_t)M * nn * 4), "%s: graph replay differs from the stream call", name);
    CU(cudaGraphExecDestroy(ge));
    CU(cudaGraphDestroy(gr));
    CU(cudaStreamDestroy(st));
    free(hx), free(full), free(part);
    CU(cudaFree(dx));
    CU(cudaFree(dy));
    CU(cudaFree(dz));
}

/* ---- V4-Flash shapes */
typedef struct {
    const char *name;
    int fmt, n, k;
    int groups;   /* > 1: called as groups of n / groups rows with x = o + g * k, ldx = groups * k (wo_a) */
} shape;
static const shape V4[] = {
    {"wq_a", DENSE_FP8_B128, 1024, 4096, 1},
    {"wq_b", DENSE_FP8_B128, 32768, 1024, 1},
    {"wkv", DENSE_FP8_B128, 512, 4096, 1},
    {"wo_a", DENSE_FP8_B128, 8192, 4096, 8},
    {"wo_b", DENSE_FP8_B128, 4096, 8192, 1},
    {"idx_wq_b", DENSE_FP8_B128, 8192, 1024, 1},
    {"shared_w13", DENSE_FP8_B128, 4096, 4096, 1},
    {"shared_w2", DENSE_FP8_B128, 4096, 2048, 1},
    {"compress_csa", DENSE_BF16, 2048, 4096, 1},
    {"compress_1024", DENSE_BF16, 1024, 4096, 1},
    {"compress_hca", DENSE_BF16, 512, 4096, 1},
    {"idx_compress", DENSE_BF16, 256, 4096, 1},
    {"lm_head", DENSE_BF16, 129280, 4096, 1},
};
#define NV4 (sizeof V4 / sizeof V4[0])
static const int BENCH_M[] = {1, 4, 16, 64, 128, 256};

static void test_v4(void)
{
    for (size_t s = 0; s < NV4; s++) {
        const shape *sh = &V4[s];
        weight w;
        weight_make(&w, sh->fmt, sh->n, sh->k, 1);
        const int rows = sh->n / sh->groups;
        for (size_t t = 0; t < sizeof BENCH_M / sizeof BENCH_M[0]; t++) {
            const int m = BENCH_M[t];
            if (sh->groups > 1) {
                /* the grouped call: rows g*rows.., x = o + g*k with o [m][groups*k]; groups 0 and last checked */
                for (int g = 0; g < sh->groups; g += sh->groups - 1)
                    run_check(sh->name, &w, g * rows, rows, m, sh->groups * sh->k, g * sh->k, rows, 48, 0);
                run_check(sh->name, &w, 0, sh->n, m, sh->groups * sh->k, 0, sh->n, 96, sh->groups);   /* one launch */
            } else {
                run_check(sh->name, &w, 0, sh->n, m, sh->k, 0, sh->n, 48, 0);
            }
        }
        if (sh->groups > 1)
            run_invariance(sh->name, &w, rows, rows, sh->groups * sh->k, sh->k);
        else if (s < 2 || sh->fmt == DENSE_BF16)
            run_invariance(sh->name, &w, 0, sh->n, sh->k, 0);
        printf("%-14s %s %6d x %-5d S %2d: ok so far (worst relative L2 %.2e)\n", sh->name,
               sh->fmt == DENSE_BF16 ? "bf16" : "fp8 ", sh->n, sh->k, dense_gemm_splits(rows, sh->k), g_max_rel);
        weight_free(&w);
    }
}

static void test_odd(void)
{
    static const int dims[] = {1, 3, 16, 33, 64, 100, 128, 130, 256};
    static const int ms[] = {1, 2, 5, 8, 17, 64, 130};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++)
            for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) {
                const int n = dims[a], k = dims[b];
                weight w;
                weight_make(&w, fmt, n, k, 1);
                for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
                    const int m = ms[t];
                    run_check("odd", &w, 0, n, m, k, 0, n, 0, 0);
                    const int n0 = irand(0, n - 1), nn = irand(1, n - n0);
                    run_check("odd sub-range", &w, n0, nn, m, k + irand(1, 9), irand(0, 1) ? 0 : irand(1, 7),
                              nn + irand(0, 5), 0, 0);
                }
                weight_free(&w);
            }
    printf("odd shapes: %s (worst relative L2 %.2e)\n", g_fail ? "FAILED" : "ok", g_max_rel);
    /* larger odd shapes: K slices up to 16 (clusters), partial chunks, arbitrary scales */
    static const int big[][3] = {{300, 4100, 1}, {2000, 1000, 1}, {1000, 2176, 0}, {77, 8200, 1}, {4111, 520, 0}};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
            weight w;
            weight_make(&w, fmt, big[i][0], big[i][1], big[i][2]);
            for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
                run_check("big odd", &w, 0, w.n, ms[t], w.k, 0, w.n, 40, 0);
                const int n0 = irand(0, w.n - 1), nn = irand(1, w.n - n0);
                run_check("big odd sub-range", &w, n0, nn, ms[t], w.k + 8 * irand(0, 2), 8 * irand(0, 1), nn, 40, 0);
            }
            run_invariance("big odd", &w, 0, w.n, w.k, 0);
            run_invariance("big odd, element loads", &w, 3, w.n - 3, w.k + 1, 1);
            weight_free(&w);
        }
    printf("larger odd shapes: %s (worst relative L2 %.2e)\n", g_fail ? "FAILED" : "ok", g_max_rel);
}

static void test_args(void)
{
    weight w;
    weight_make(&w, DENSE_BF16, 64, 128, 1);
    float *dy;
    uint16_t *dx;
    CU(cudaMalloc((void **)&dy, 64 * 64 * 4));
    CU(cudaMalloc((void **)&dx, 64 * 128 * 2));
    CHECK(dense_gemm(&w.dw, 0, 65, dx, 128, 1, dy, 65, 0) == cudaErrorInvalidValue, "nn past n accepted");
    CHECK(dense_gemm(&w.dw, 0, 64, dx, 127, 1, dy, 64, 0) == cudaErrorInvalidValue, "ldx < k accepted");
    CHECK(dense_gemm(&w.dw, 0, 64, dx, 128, 1, dy, 63, 0) == cudaErrorInvalidValue, "ldy < nn accepted");
    CHECK(dense_gemm(&w.dw, -1, 8, dx, 128, 1, dy, 8, 0) == cudaErrorInvalidValue, "n0 < 0 accepted");
    CHECK(dense_gemm(&w.dw, 0, 64, dx, 128, 0, dy, 64, 0) == cudaSuccess, "m = 0 refused");
    dense_weight bad;
    CHECK(dense_weight_init(&bad, DENSE_FP8_B128, 16, 16, dx, NULL, 0) == cudaErrorInvalidValue, "FP8 without scales");
    CU(cudaFree(dy));
    CU(cudaFree(dx));
    weight_free(&w);
}

/* ---- --bench */
static int cmp_f(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static double read_ceiling_gbs(void)
{
    const size_t bytes = (size_t)4 << 30;
    void *p;
    unsigned *sink;
    CU(cudaMalloc(&p, bytes));
    CU(cudaMalloc((void **)&sink, 65536 * 4));
    CU(cudaMemset(p, 1, bytes));
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    float t[7];
    for (int r = 0; r < 7; r++) {
        CU(cudaEventRecord(a, 0));
        CU(moe_hbm_read(p, bytes, sink, 0));
        CU(cudaEventRecord(b, 0));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&t[r], a, b));
    }
    qsort(t, 7, sizeof(float), cmp_f);
    CU(cudaEventDestroy(a));
    CU(cudaEventDestroy(b));
    CU(cudaFree(p));
    CU(cudaFree(sink));
    return bytes / (t[3] * 1e-3) / 1e9;
}

static void bench(void)
{
    const double ceil_gbs = read_ceiling_gbs();
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; HBM read ceiling (moe_hbm_read, 4 GB, median of 7): %.0f GB/s\n", prop.name,
           prop.multiProcessorCount, ceil_gbs);
    printf("%-14s %-4s %6s %5s %4s %3s %3s %9s %8s %6s %8s\n", "shape", "fmt", "n", "k", "m", "S", "cp", "us/call",
           "GB/s", "%ceil", "TFLOP/s");
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t ea, eb;
    CU(cudaEventCreate(&ea));
    CU(cudaEventCreate(&eb));
    for (size_t s = 0; s < NV4; s++) {
        const shape *sh = &V4[s];
        const int rows = sh->n / sh->groups;
        /* random bytes (timing only) */
        const size_t nk = (size_t)sh->n * sh->k, ebytes = nk * (sh->fmt == DENSE_BF16 ? 2 : 1);
        const size_t ns = (size_t)((sh->n + 127) / 128) * ((sh->k + 127) / 128);
        uint8_t *hsrc = malloc(ebytes);
        const uint32_t mask = sh->fmt == DENSE_BF16 ? 0xBFBFBFBFu : 0xF6F6F6F6u;   /* no NaN or Inf codes */
        for (size_t i = 0; i < ebytes; i += 4) {
            const uint32_t v = (rnd() ^ rnd() << 11) & mask;
            memcpy(hsrc + i, &v, ebytes - i < 4 ? ebytes - i : 4);
        }
        float *hsc = malloc(ns * 4);
        for (size_t i = 0; i < ns; i++) hsc[i] = 1.f / 256;
        void *dsrc;
        float *dsc;
        CU(cudaMalloc(&dsrc, ebytes));
        CU(cudaMalloc((void **)&dsc, ns * 4));
        CU(cudaMemcpy(dsrc, hsrc, ebytes, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dsc, hsc, ns * 4, cudaMemcpyHostToDevice));
        free(hsrc);
        free(hsc);
        /* copies: at least 512 MB of weights per replay (L2 is 50 MB), at most 64 */
        dense_weight base;
        CU(dense_weight_init(&base, sh->fmt, sh->n, sh->k, dsrc, dsc, st));
        CU(cudaFree(dsrc));
        CU(cudaFree(dsc));
        const size_t call_bytes = base.bytes / sh->groups;   /* one call's share (wo_a: one group) */
        int nc = (int)(((size_t)512 << 20) / base.bytes + 1);
        if (nc < 2) nc = 2;
        if (nc > 64) nc = 64;
        dense_weight *cp = calloc(nc, sizeof *cp);
        for (int c = 0; c < nc; c++) {
            cp[c] = base;
            if (c) {
                CU(cudaMalloc(&cp[c].w, base.bytes));
                CU(cudaMemcpy(cp[c].w, base.w, base.bytes, cudaMemcpyDeviceToDevice));
                /* FP8 scales: shared (4 bytes per 16 KB of weights) */
            }
        }
        const int M = 256, ldx = sh->groups * sh->k;
        uint16_t *dx;
        float *dy;
        CU(cudaMalloc((void **)&dx, (size_t)M * ldx * 2));
        CU(cudaMemset(dx, 0x3C, (size_t)M * ldx * 2));
        CU(cudaMalloc((void **)&dy, (size_t)M * rows * 4));
        for (size_t t = 0; t < sizeof BENCH_M / sizeof BENCH_M[0]; t++) {
            const int m = BENCH_M[t];
            cudaGraph_t gr;
            cudaGraphExec_t ge;
            CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int c = 0; c < nc; c++) {
                const int g = sh->groups > 1 ? c % sh->groups : 0;   /* wo_a: the groups in turn */
                CU(dense_gemm(&cp[c], g * rows, rows, dx + (size_t)g * sh->k, ldx, m, dy, rows, st));
            }
            CU(cudaStreamEndCapture(st, &gr));
            CU(cudaGraphInstantiate(&ge, gr, 0));
            for (int r = 0; r < 3; r++) CU(cudaGraphLaunch(ge, st));
            float tm[15];
            for (int r = 0; r < 15; r++) {
                CU(cudaEventRecord(ea, st));
                CU(cudaGraphLaunch(ge, st));
                CU(cudaEventRecord(eb, st));
                CU(cudaEventSynchronize(eb));
                CU(cudaEventElapsedTime(&tm[r], ea, eb));
            }
            qsort(tm, 15, sizeof(float), cmp_f);
            const double us = tm[7] * 1e3 / nc, gbs = call_bytes / (us * 1e-6) / 1e9;
            const double tf = 2.0 * m * rows * sh->k / (us * 1e-6) / 1e12;
            printf("%-14s %-4s %6d %5d %4d %3d %3d %9.2f %8.0f %5.1f%% %8.1f\n", sh->name,
                   sh->fmt == DENSE_BF16 ? "bf16" : "fp8", rows, sh->k, m, dense_gemm_splits(rows, sh->k), nc, us, gbs,
                   100.0 * gbs / ceil_gbs, tf);
            CU(cudaGraphExecDestroy(ge));
            CU(cudaGraphDestroy(gr));
        }
        for (int c = 1; c < nc; c++) CU(cudaFree(cp[c].w));
        free(cp);
        dense_weight_free(&base);
        CU(cudaFree(dx));
        CU(cudaFree(dy));
    }
    CU(cudaEventDestroy(ea));
    CU(cudaEventDestroy(eb));
    CU(cudaStreamDestroy(st));
    printf("GB/s: the call's weight bytes (repacked, padded to 16 x 128 chunks, + FP8 scales) per call time; wo_a: one "
           "group (n0 = g*1024, ldx 32768) per call\n");
}

int main(int argc, char **argv)
{
    int ndev = 0, do_bench = 0;
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u + 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else seed = strtoull(argv[i], NULL, 10);
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    g_rng = seed ? seed : 1;
    for (int b = 0; b < 256; b++) g_e4m3[b] = e4m3((uint8_t)b);
    if (do_bench) {
        bench();
        return 0;
    }
    printf("seed %llu\n", (unsigned long long)seed);
    test_args();
    test_odd();
    test_v4();
    printf("%s (worst row relative L2 %.3g)\n", g_fail ? "FAILED" : "all passed", g_max_rel);
    return g_fail;
}
