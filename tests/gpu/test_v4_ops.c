/* test_v4_ops.c — the V4 layer kernels (kernels/v4_ops.h) against plain CPU references on fresh
 * random inputs, at V4-Flash sizes the tiny fixtures cannot reach:
 *   - indexer top-k: 512 of N candidates (N up to 65536) with many exactly tied scores and -0 / +0
 *     zeros: the chosen set must be the reference's (higher score first, ties -> lower index);
 *   - compressors: CSA (ratio 4, d 512, overlapping windows) and HCA (ratio 128), 700 tokens fed in
 *     uneven chunks, against the two-pass softmax of engine/cpu/attention.c (fp32), entries bf16, and as FP8 KV rows;
 *   - sparse attention: 64 heads x 512, window 128 split between the ring and this step's rows, plus
 *     HCA entries or a CSA top-512 with empty slots, one row to many, one split to ten, against a
 *     double-precision reference, with bf16 keys and with FP8 KV rows (the reference on their values); a few
 *     heads of 128 dims (the CUDA-core kernel) and 3 heads of 512 the same way;
 *   - the kv norm + RoPE writing FP8 KV rows, against engine/quant.c's quantiser of the CPU's values;
 *   - sampling on the device against the CPU sampler (greedy, temperature, top-k/p, min-p, penalty);
 *   - mHC pre (mixes split over chunks, Sinkhorn, collapse + RMSNorm) against a double reference;
 *   - indexer scores (64 heads x 128, tensor cores) against a double reference, and the top-512 they pick, for one
 *     row and for batches whose scoring blocks take several tiles, with bf16 keys and with FP8 keys (the reference
 *     on the dequantised keys); the compressor's FP8 keys against engine/quant.c's quantiser of the CPU's entry.
 * Exit 77 without a CUDA device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "sampler.h"
#include "v4_ops.h"

static int failures = 0;
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } while (0)
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA: %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float urand(void) { return (float)(next_u32() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }
static uint16_t bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float fb(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void *dup_dev(const void *h, size_t bytes)
{
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* A step of one span (slot 0) of n rows at positions pos0.., pages 0.. in order. */
typedef struct {
    v4_step s;
    int32_t *dbuf;
} one_span;
static void span_make(one_span *o, int n, int pos0, int max_blocks)
{
    int32_t *h = calloc((size_t)3 * n + 4 + max_blocks, sizeof(int32_t));
    for (int i = 0; i < n; i++) { h[i] = 0; h[n + i] = pos0 + i; h[2 * n + i] = 0; }
    int32_t *sp = h + 3 * n;
    sp[0] = 0; sp[1] = pos0; sp[2] = 0; sp[3] = n;
    for (int b = 0; b < max_blocks; b++) sp[4 + b] = b;
    o->dbuf = dup_dev(h, ((size_t)3 * n + 4 + max_blocks) * sizeof(int32_t));
    free(h);
    const int32_t *d = o->dbuf;
    o->s = (v4_step){n, 1, d, d + n, d + 2 * n, d + 3 * n, d + 3 * n + 1, d + 3 * n + 2, d + 3 * n + 3, d + 3 * n + 4,
                     max_blocks};
}

/* Key rows (v4_ops.h, "KV rows"): x [hd] stored as bf16, or as an FP8 KV row by engine/quant.c's rules (the CPU
 * reference's); kv_get reads value d back. */
static void kv_put(uint8_t *row, const float *x, int hd, int rope_half, int kv8)
{
    if (!kv8) {
        for (int d = 0; d < hd; d++) ((uint16_t *)row)[d] = bf(x[d]);
        return;
    }
    const int nope = hd - 2 * rope_half;
    memset(row, 0, v4_kv_row_bytes(hd, rope_half, 1));
    for (int b = 0; b < nope / 64; b++) {
        float amax = 0.0f;
        for (int d = 64 * b; d < 64 * b + 64; d++) amax = fabsf(x[d]) > amax ? fabsf(x[d]) : amax;
        const uint8_t e = qt_fp8_block_exp(amax);
        row[nope + 4 * rope_half + b] = e;
        for (int d = 64 * b; d < 64 * b + 64; d++) row[d] = qt_f32_to_e4m3(ldexpf(x[d], 127 - e));
    }
    for (int d = nope; d < hd; d++) ((uint16_t *)(row + nope))[d - nope] = bf(x[d]);
}
static float kv_get(const uint8_t *row, int d, int hd, int rope_half, int kv8)
{
    const int nope = hd - 2 * rope_half;
    if (!kv8) return fb(((const uint16_t *)row)[d]);
    if (d < nope) return ldexpf(qt_e4m3_to_f32(row[d]), row[nope + 4 * rope_half + d / 64] - 127);
    return fb(((const uint16_t *)(row + nope))[d - nope]);
}

/* ------------------------------------------------------------------------------ sampling */
/* v4_sample against the CPU sampler (engine/sampler.c) on the same logits and RNG states: greedy with planted ties,
 * temperature alone, top-k, top-p, min-p, all three, and the repetition penalty over a history with repeats, then
 * one launch mixing rows that keep every token (the wide path) with rows that truncate or penalise (the block-a-row
 * path), at V4's vocabulary and a small one; 16 rows each. The token must be the CPU's and the logprob within 1e-4. */
static void test_sample(int V)
{
    const sl_sampling base = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f,
                              .max_tokens = 1};
    sl_sampling cases[8];
    for (int k = 0; k < 8; k++) cases[k] = base;
    cases[1].temperature = 0.7f;
    cases[2].temperature = 1.0f, cases[2].top_k = 50;
    cases[3].temperature = 0.9f, cases[3].top_p = 0.9f;
    cases[4].temperature = 1.2f, cases[4].min_p = 0.05f;
    cases[5].temperature = 0.8f, cases[5].top_k = 40, cases[5].top_p = 0.8f, cases[5].min_p = 0.02f;
    cases[6].repetition_penalty = 1.3f;
    cases[7].temperature = 0.8f, cases[7].repetition_penalty = 1.3f, cases[7].top_p = 0.95f;
    const int R = 16, NH = 300;
    float *lg = malloc((size_t)R * V * sizeof(float));
    int32_t *hist = malloc((size_t)R * NH * sizeof(int32_t)), tok[16];
    float lp[16];
    v4_sample_req req[16];
    float *dlg, *dprobs, *dlp;
    int32_t *dhist, *dtok;
    uint32_t *dmarks;
    v4_sample_req *dreq;
    CK(cudaMalloc((void **)&dlg, (size_t)R * V * sizeof(float)));
    CK(cudaMalloc((void **)&dprobs, (size_t)R * V * sizeof(float)));
    CK(cudaMalloc((void **)&dmarks, (size_t)R * ((V + 31) / 32) * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&dhist, (size_t)R * NH * sizeof(int32_t)));
    CK(cudaMalloc((void **)&dtok, R * sizeof(int32_t)));
    CK(cudaMalloc((void **)&dlp, R * sizeof(float)));
    CK(cudaMalloc((void **)&dreq, R * sizeof(v4_sample_req)));
    sl_sampler smp;
    if (sl_sampler_init(&smp, V)) { FAIL("sampler init"); return; }
    int bad = 0, worst_case = -1;
    double worst_lp = 0;
    for (int cs = 0; cs < 9; cs++) {   /* 8: rows alternate settings 0, 1, 5, 7 (wide, wide, narrow, narrow) */
        for (size_t i = 0; i < (size_t)R * V; i++) lg[i] = 6.0f * urand();
        for (int r = 0; r < R; r++) {
            lg[(size_t)r * V + 3] = lg[(size_t)r * V + 17] = 7.0f;   /* tied maxima: the lower id wins */
            for (int j = 0; j < NH; j++) hist[r * NH + j] = (int)(next_u32() % (uint32_t)(j % 3 ? 64 : V));
            const sl_sampling *sm = cs < 8 ? &cases[cs] : &cases[(int[]){0, 1, 5, 7}[r % 4]];
            req[r] = (v4_sample_req){r, sm->temperature, sm->top_p, sm->min_p, sm->repetition_penalty, sm->top_k,
                                     ((uint64_t)next_u32() << 32) | next_u32(), r * NH, NH};
        }
        CK(cudaMemcpy(dlg, lg, (size_t)R * V * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dhist, hist, (size_t)R * NH * sizeof(int32_t), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dreq, req, R * sizeof(v4_sample_req), cudaMemcpyHostToDevice));
        CK(v4_sample(dlg, R, V, dreq, dhist, dprobs, dmarks, dtok, dlp, 0));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(tok, dtok, R * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(lp, dlp, R * sizeof(float), cudaMemcpyDeviceToHost));
        for (int r = 0; r < R; r++) {
            sl_rng rng = {req[r].rng};
            float lpc = 0;
            const sl_sampling *sm = cs < 8 ? &cases[cs] : &cases[(int[]){0, 1, 5, 7}[r % 4]];
            const int32_t t = sl_sample(&smp, sm, lg + (size_t)r * V, hist + r * NH, NH, &rng, &lpc);
            if (t != tok[r]) {
                bad++;
                worst_case = cs;
            } else if (fabs(lpc - lp[r]) > worst_lp) {
                worst_lp = fabs(lpc - lp[r]);
            }
        }
    }
    printf("sampling, vocabulary %d, 8 settings and a mix x 16 rows: %d tokens differ from the CPU sampler's%s, worst logprob "
           "difference %.1e\n", V, bad, bad ? " (see the FAIL)" : "", worst_lp);
    if (bad) FAIL("sampling (vocabulary %d): %d tokens differ, e.g. in setting %d", V, bad, worst_case);
    if (!(worst_lp < 1e-4)) FAIL("sampling (vocabulary %d): logprob off by %.3e", V, worst_lp);
    sl_sampler_free(&smp);
    free(lg); free(hist);
    cudaFree(dlg); cudaFree(dprobs); cudaFree(dmarks); cudaFree(dhist); cudaFree(dtok); cudaFree(dlp); cudaFree(dreq);
}

/* ------------------------------------------------------------------------------- mHC pre */
static double sigm_d(double v) { return 1.0 / (1.0 + exp(-v)); }

/* mHC pre at V4-Flash's width (hc 4 x 4096, 20 Sinkhorn iterations) for n rows (head: the head's collapse over a row
 * list; pend: the previous sublayer's mHC post applied first) against a double-precision reference of V4_SPEC 2.3:
 * xn (bf16), post and comb, and the streams written back. */
static void test_hc_pre(int n, int head, int pend)
{
    const int hc = 4, dim = 4096, width = hc * dim, n_mix = head ? hc : (2 + hc) * hc, iters = head ? 0 : 20;
    const float hc_eps = 1e-6f, norm_eps = 1e-6f;
    float *X = malloc((size_t)n * width * 4), *fn = malloc((size_t)n_mix * width * 4), *nw = malloc(dim * 4);
    float scale[3], base[(2 + 4) * 4];
    for (size_t i = 0; i < (size_t)n * width; i++) X[i] = 2.0f * urand();
    float *dX0 = dup_dev(X, (size_t)n * width * 4);   /* the streams before the pending post */
    for (size_t i = 0; i < (size_t)n_mix * width; i++) fn[i] = 0.02f * urand();
    for (int d = 0; d < dim; d++) nw[d] = 1.0f + 0.5f * urand();
    for (int k = 0; k < 3; k++) scale[k] = 0.5f + urand();
    for (int k = 0; k < n_mix; k++) base[k] = urand();
    float *pf = malloc((size_t)n * dim * 4), *pp = malloc((size_t)n * hc * 4), *pc = malloc((size_t)n * hc * hc * 4);
    for (size_t i = 0; i < (size_t)n * dim; i++) pf[i] = urand();
    for (int i = 0; i < n * hc; i++) pp[i] = 1.0f + urand();
    for (int i = 0; i < n * hc * hc; i++) pc[i] = 0.25f + 0.2f * urand();
    float *dpf = dup_dev(pf, (size_t)n * dim * 4), *dpp = dup_dev(pp, (size_t)n * hc * 4);
    float *dpc = dup_dev(pc, (size_t)n * hc * hc * 4);
    if (pend)   /* the reference's streams: the post applied in double */
        for (int i = 0; i < n; i++)
            for (int d = 0; d < dim; d++) {
                double old[4], v[4];
                for (int j = 0; j < hc; j++) old[j] = X[(size_t)i * width + (size_t)j * dim + d];
                for (int k = 0; k < hc; k++) {
                    v[k] = (double)pp[i * hc + k] * pf[(size_t)i * dim + d];
                    for (int j = 0; j < hc; j++) v[k] += (double)pc[(i * hc + j) * hc + k] * old[j];
                }
                for (int k = 0; k < hc; k++) X[(size_t)i * width + (size_t)k * dim + d] = (float)v[k];
            }
    int32_t *rows = malloc((size_t)n * sizeof(int32_t));
    for (int r = 0; r < n; r++) rows[r] = head ? n - 1 - r : r;   /* the head reads rows in a given order */
    float *dX = dX0, *dfn = dup_dev(fn, (size_t)n_mix * width * 4), *dnw = dup_dev(nw, dim * 4);
    float *dsc = dup_dev(scale, sizeof scale), *dbase = dup_dev(base, sizeof base), *dpost, *dcomb, *dscr;
    int32_t *drows = dup_dev(rows, (size_t)n * sizeof(int32_t));
    uint16_t *dxn;
    CK(cudaMalloc((void **)&dxn, (size_t)n * dim * 2));
    CK(cudaMalloc((void **)&dpost, (size_t)n * hc * 4));
    CK(cudaMalloc((void **)&dcomb, (size_t)n * hc * hc * 4));
    CK(cudaMalloc((void **)&dscr, v4_hc_pre_scratch_floats(n, dim, hc) * 4));
    CK(v4_hc_pre(dX, n, head ? drows : NULL, dim, hc, dfn, dsc, dbase, iters, hc_eps, norm_eps, dnw, head,
                 pend ? dpf : NULL, dpp, dpc, dxn, head ? NULL : dpost, head ? NULL : dcomb, dscr, 0));
    CK(cudaDeviceSynchronize());
    uint16_t *xn = malloc((size_t)n * dim * 2);
    float *post = malloc((size_t)n * hc * 4), *comb = malloc((size_t)n * hc * hc * 4);
    CK(cudaMemcpy(xn, dxn, (size_t)n * dim * 2, cudaMemcpyDeviceToHost));
    if (!head) {
        CK(cudaMemcpy(post, dpost, (size_t)n * hc * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(comb, dcomb, (size_t)n * hc * hc * 4, cudaMemcpyDeviceToHost));
    }
    double worst_x = 0, worst_pc = 0, worst_s = 0;
    if (pend) {   /* the streams written back */
        float *gx = malloc((size_t)n * width * 4);
        CK(cudaMemcpy(gx, dX, (size_t)n * width * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t k = 0; k < (size_t)n * width; k++) {
            num += ((double)gx[k] - X[k]) * ((double)gx[k] - X[k]);
            den += (double)X[k] * X[k];
        }
        worst_s = sqrt(num / den);
        free(gx);
    }
    double *xr = malloc(dim * sizeof(double));
    for (int r = 0; r < n; r++) {
        const float *Xi = X + (size_t)rows[r] * width;
        double ss = 0, mix[24], pre[4], C[16];
        for (int k = 0; k < width; k++) ss += (double)Xi[k] * Xi[k];
        const double rs = 1.0 / sqrt(ss / width + norm_eps);
        for (int m = 0; m < n_mix; m++) {
            double a = 0;
            for (int k = 0; k < width; k++) a += (double)fn[(size_t)m * width + k] * Xi[k];
            mix[m] = a * rs;
        }
        for (int j = 0; j < hc; j++) pre[j] = sigm_d(mix[j] * scale[0] + base[j]) + hc_eps;
        if (!head) {
            for (int j = 0; j < hc; j++) {
                const double pj = 2.0 * sigm_d(mix[hc + j] * scale[1] + base[hc + j]);
                worst_pc = fmax(worst_pc, fabs(post[r * hc + j] - pj));
                double mx = -1e300, z = 0;
                for (int k = 0; k < hc; k++) mx = fmax(mx, mix[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k]);
                for (int k = 0; k < hc; k++) z += exp(mix[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k] - mx);
                for (int k = 0; k < hc; k++)
                    C[j * hc + k] = exp(mix[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k] - mx) / z + hc_eps;
            }
            for (int it = 0; it < iters; it++) {
                if (it > 0)
                    for (int j = 0; j < hc; j++) {
                        double t = 0;
                        for (int k = 0; k < hc; k++) t += C[j * hc + k];
                        for (int k = 0; k < hc; k++) C[j * hc + k] /= t + hc_eps;
                    }
                for (int k = 0; k < hc; k++) {
                    double t = 0;
                    for (int j = 0; j < hc; j++) t += C[j * hc + k];
                    for (int j = 0; j < hc; j++) C[j * hc + k] /= t + hc_eps;
                }
            }
            for (int e = 0; e < hc * hc; e++) worst_pc = fmax(worst_pc, fabs(comb[r * hc * hc + e] - C[e]));
        }
        double sx = 0;
        for (int d = 0; d < dim; d++) {
            double v = 0;
            for (int j = 0; j < hc; j++) v += pre[j] * Xi[(size_t)j * dim + d];
            xr[d] = v;
            sx += v * v;
        }
        const double rx = 1.0 / sqrt(sx / dim + norm_eps);
        double num = 0, den = 0;
        for (int d = 0; d < dim; d++) {
            const double ref = xr[d] * rx * nw[d], g = fb(xn[(size_t)r * dim + d]);
            num += (g - ref) * (g - ref);
            den += ref * ref;
        }
        worst_x = fmax(worst_x, sqrt(num / den));
    }
    printf("mHC pre%s%s 4 x 4096, %d rows: xn worst rel L2 %.2e (bf16), post/comb worst abs error %.2e, streams "
           "rel L2 %.2e\n", pend ? " after a post" : "", head ? " (head, row list)" : "", n, worst_x, worst_pc, worst_s);
    if (!(worst_s < 1e-6)) FAIL("mHC post in pre (%d rows): streams rel L2 %.3e", n, worst_s);
    if (!(worst_x < 4e-3)) FAIL("mHC pre (%d rows, head %d): xn rel L2 %.3e", n, head, worst_x);
    if (!(worst_pc < 1e-4)) FAIL("mHC pre (%d rows): post/comb error %.3e", n, worst_pc);
    free(X); free(fn); free(nw); free(rows); free(xn); free(post); free(comb); free(xr); free(pf); free(pp); free(pc);
    cudaFree(dpf); cudaFree(dpp); cudaFree(dpc);
    cudaFree(dX); cudaFree(dfn); cudaFree(dnw); cudaFree(dsc); cudaFree(dbase); cudaFree(dpost); cudaFree(dcomb);
    cudaFree(dscr); cudaFree(drows); cudaFree(dxn);
}

/* ------------------------------------------------------------------------- indexer scores */
/* nr rows at positions 4N-1.. of one span (row r has (4N + r) / 4 candidates) of the V4 indexer (64 heads x 128):
 * every score against a double reference sum_h w_h ReLU(q_h . K_e), and each row's chosen top-512 against the
 * reference's order: no chosen entry may score below an unchosen one by more than the scores' rounding. Enough rows
 * make the scoring blocks take several tiles each (v4_indexer_tiles_per_block). */
static void test_index_scores(int N, int nr, int fp8, int dI)
{
    const int nI = 64, topk = 512, bt = 128, t = 4 * N - 1, max_blocks = (t + nr) / bt + 1;
    const int max_ent = (t + nr) / 4, per_page = bt / 4;
    const size_t page_bytes = fp8 ? v4_fp8_rows_bytes(per_page, dI) : (size_t)per_page * dI * 2;
    uint16_t *pages = calloc(1, (size_t)max_blocks * page_bytes), *q = malloc((size_t)nr * nI * dI * 2);
    float *wI = malloc((size_t)nr * nI * sizeof(float));
    float *keys = malloc((size_t)max_blocks * per_page * dI * sizeof(float));   /* the keys' values, page-major */
    for (size_t i = 0; i < (size_t)max_blocks * per_page * dI; i++)   /* rows of several magnitudes, small dims */
        keys[i] = urand() * ldexpf(1.0f, (int)(i / dI % 5) - 2) * (i % 3 ? 1.0f : 0.01f);
    for (int b = 0; b < max_blocks; b++)
        for (int k = 0; k < per_page; k++) {
            float *x = keys + ((size_t)b * per_page + k) * dI;
            uint8_t *region = (uint8_t *)pages + (size_t)b * page_bytes;
            if (!fp8) {
                for (int j = 0; j < dI; j++) ((uint16_t *)region)[k * dI + j] = bf(x[j]), x[j] = fb(bf(x[j]));
                continue;
            }
            for (int blk = 0; blk < dI / 64; blk++) {   /* the FP8 row (v4_ops.h): codes, then the exponents */
                float amax = 0.0f;
                for (int j = 0; j < 64; j++) amax = fabsf(x[64 * blk + j]) > amax ? fabsf(x[64 * blk + j]) : amax;
                const uint8_t e = qt_fp8_block_exp(amax);
                region[(size_t)per_page * dI + (size_t)k * V4_FP8_SCALE_STRIDE(dI) + blk] = e;
                for (int j = 0; j < 64; j++) {
                    const uint8_t c = qt_f32_to_e4m3(ldexpf(x[64 * blk + j], 127 - e));
                    region[(size_t)k * dI + 64 * blk + j] = c;
                    x[64 * blk + j] = ldexpf(qt_e4m3_to_f32(c), e - 127);
                }
            }
        }
    for (int i = 0; i < nr * nI * dI; i++) q[i] = bf(urand());
    for (int h = 0; h < nr * nI; h++) wI[h] = urand();
    v4_arena ar = {NULL, 0, dup_dev(pages, (size_t)max_blocks * page_bytes), page_bytes, bt};
    uint16_t *dq = dup_dev(q, (size_t)nr * nI * dI * 2);
    float *dw = dup_dev(wI, (size_t)nr * nI * sizeof(float)), *dsc;
    int32_t *dsel;
    CK(cudaMalloc((void **)&dsc, (size_t)nr * max_ent * sizeof(float)));
    CK(cudaMalloc((void **)&dsel, (size_t)nr * topk * sizeof(int32_t)));
    one_span o;
    span_make(&o, nr, t, max_blocks);
    const float wsc = 0.125f;
    CK(v4_indexer(&o.s, &ar, 0, fp8, 0, nr, dq, nI, dI, dw, nI, wsc, topk, dsel, dsc, max_ent, 0));
    CK(cudaDeviceSynchronize());
    float *got = malloc((size_t)nr * max_ent * sizeof(float));
    int32_t *sel = malloc((size_t)nr * topk * sizeof(int32_t));
    CK(cudaMemcpy(got, dsc, (size_t)nr * max_ent * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sel, dsel, (size_t)nr * topk * sizeof(int32_t), cudaMemcpyDeviceToHost));
    double *ref = malloc((size_t)max_ent * sizeof(double)), worst = 0, worst_slack = 0;
    unsigned char *chosen = malloc((size_t)max_ent);
    int bad = 0;
    for (int r = 0; r < nr; r++) {
        const int n = (t + r + 1) / 4;
        const uint16_t *qr = q + (size_t)r * nI * dI;
        double scale = 0;
        for (int e = 0; e < n; e++) {
            const float *K = keys + ((size_t)(e * 4 / bt) * per_page + (e * 4 % bt) / 4) * dI;
            double acc = 0;
            for (int h = 0; h < nI; h++) {
                double d = 0;
                for (int j = 0; j < dI; j++) d += (double)fb(qr[h * dI + j]) * K[j];
                acc += (double)wI[r * nI + h] * wsc * (d > 0 ? d : 0);
            }
            ref[e] = acc;
            if (fabs(acc) > scale) scale = fabs(acc);
        }
        double w = 0;
        for (int e = 0; e < n; e++) {
            const double d = fabs(got[(size_t)r * max_ent + e] - ref[e]) / scale;
            if (d > w) w = d;
        }
        memset(chosen, 0, (size_t)max_ent);
        const int32_t *sr = sel + (size_t)r * topk;
        for (int j = 0; j < topk; j++) {
            if (sr[j] < 0 || sr[j] >= n || chosen[sr[j]]) bad = 1;
            else chosen[sr[j]] = 1;
        }
        double min_in = 1e300, max_out = -1e300;
        for (int e = 0; e < n; e++) {
            if (chosen[e] && ref[e] < min_in) min_in = ref[e];
            if (!chosen[e] && ref[e] > max_out) max_out = ref[e];
        }
        const double slack = (max_out - min_in) / scale;
        if (slack > 4 * w + 1e-6) bad = 1;
        if (w > worst) worst = w;
        if (slack > worst_slack) worst_slack = slack;
    }
    int dev = 0, n_sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev));
    printf("indexer 64 x %d, %s keys, %d rows of %d+ candidates (%d tiles a scoring block): worst score error %.2e of "
           "the largest; top-512 %s (order slack %.1e)\n", dI, fp8 ? "FP8" : "bf16", nr, N,
           v4_indexer_tiles_per_block(nr, (max_ent + 127) / 128, n_sms), worst, bad ? "WRONG" : "distinct, in order",
           worst_slack);
    if (!(worst < 1e-5)) FAIL("indexer scores (%s keys, %d rows, %d candidates): error %.3e", fp8 ? "FP8" : "bf16", nr, N, worst);
    if (bad) FAIL("indexer top-k (%s keys, %d rows, %d candidates): not the reference's order", fp8 ? "FP8" : "bf16", nr, N);
    free(pages); free(q); free(wI); free(got); free(sel); free(ref); free(chosen); free(keys);
    cudaFree(ar.pages); cudaFree(dq); cudaFree(dw); cudaFree(dsc); cudaFree(dsel); cudaFree(o.dbuf);
}

/* ------------------------------------------------------------------------------ top-k */
static const float *g_sc;
static int cmp_desc(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    const float sx = g_sc[x] == 0.0f ? 0.0f : g_sc[x], sy = g_sc[y] == 0.0f ? 0.0f : g_sc[y];
    if (sx != sy) return sx > sy ? -1 : 1;
    return x < y ? -1 : 1;
}
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void test_topk(int N, int topk)
{
    /* scores with ties: values from a small set, half of the zeros negative */
    float *sc = malloc((size_t)N * sizeof(float));
    for (int e = 0; e < N; e++) {
        const uint32_t r = next_u32();
        sc[e] = (r & 3) == 0 ? ((r >> 2) & 1 ? -0.0f : 0.0f) : (float)((int)(r % 61) - 20) * 0.25f;
    }
    /* one row at position t with (t+1)/4 == N candidates */
    const int t = 4 * N - 1;
    one_span o;
    span_make(&o, 1, t, 1);
    float *dsc = dup_dev(sc, (size_t)N * sizeof(float));
    int32_t *dsel;
    CK(cudaMalloc((void **)&dsel, (size_t)topk * sizeof(int32_t)));
    v4_arena ar = {0};
    /* the scores given (q NULL): the top-k alone, its keys in shared memory up to the device's limit */
    CK(v4_indexer(&o.s, &ar, 0, 0, 0, 1, NULL, 0, 0, NULL, 0, 0.0f, topk, dsel, dsc, N, 0));
    CK(cudaDeviceSynchronize());
    int k = N < topk ? N : topk;
    int32_t *got = malloc((size_t)topk * sizeof(int32_t));
    CK(cudaMemcpy(got, dsel, (size_t)topk * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int *ref = malloc((size_t)N * sizeof(int));
    for (int e = 0; e < N; e++) ref[e] = e;
    g_sc = sc;
    qsort(ref, (size_t)N, sizeof(int), cmp_desc);
    qsort(ref, (size_t)k, sizeof(int), cmp_int);
    int *g = malloc((size_t)topk * sizeof(int));
    for (int j = 0; j < topk; j++) g[j] = got[j];
    qsort(g, (size_t)k, sizeof(int), cmp_int);
    int bad = memcmp(g, ref, (size_t)k * sizeof(int)) != 0;
    for (int j = k; j < topk; j++) bad |= got[j] != -1;
    printf("top-%d of %6d candidates (ties, +-0): %s\n", topk, N, bad ? "DIFFERENT" : "the reference's set");
    if (bad) FAIL("top-k of %d differs from the reference", N);
    free(sc); free(got); free(ref); free(g);
    cudaFree(dsc); cudaFree(dsel); cudaFree(o.dbuf);
}

/* ------------------------------------------------------------------------- compressor */
/* engine/cpu/attention.c's compress_push without RoPE/norm: pooled entry of window w */
static void cpu_pool_entry(int r, int d, const float *C, const float *Z, const float *ape, long w, float *out)
{
    const int csa = r == 4, width = (csa ? 2 : 1) * d;
    for (int j = 0; j < d; j++) {
        double mx = -INFINITY, z = 0, acc = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int half = 0; half < (csa ? 2 : 1); half++) {
                const long ww = csa ? (half ? w : w - 1) : w;
                if (ww < 0) continue;
                for (int s = 0; s < r; s++) {
                    const long t = ww * r + s;
                    const int col = csa ? (half ? d + j : j) : j;
                    const double zz = (double)Z[(size_t)t * width + col] + ape[(size_t)s * width + col];
                    if (pass == 0) mx = zz > mx ? zz : mx;
                    else { const double e = exp(zz - mx); z += e; acc += e * C[(size_t)t * width + col]; }
                }
            }
        out[j] = (float)(acc / z);
    }
}

/* entry: V4_ENTRY_* (FP8 rows: the indexer's keys; KV8: the main compressor's entries with FP8 KV) */
static void test_compress(int r, int d, int T, int bt, int entry)
{
    const int csa = r == 4, width = (csa ? 2 : 1) * d, half = 32, fp8 = entry != V4_ENTRY_BF16;
    const int kv8 = entry == V4_ENTRY_KV8, nope = kv8 ? d - 2 * half : d;   /* the FP8 dims */
    const size_t rb = v4_kv_row_bytes(d, half, 1);
    float *C = malloc((size_t)T * width * 4), *Z = malloc((size_t)T * width * 4), *ape = malloc((size_t)r * width * 4);
    float *nw = malloc((size_t)d * 4);
    for (size_t i = 0; i < (size_t)T * width; i++) { C[i] = urand(); Z[i] = 3.0f * urand(); }
    for (size_t i = 0; i < (size_t)r * width; i++) ape[i] = urand();
    for (int j = 0; j < d; j++) nw[j] = 1.0f + 0.5f * urand();
    double inv[32];
    for (int i = 0; i < half; i++) inv[i] = pow(160000.0, -2.0 * i / 64.0);
    const int n_ent = T / r, max_blocks = (T + bt - 1) / bt;
    const size_t page_bytes = kv8 ? (size_t)(bt / r) * rb : fp8 ? v4_fp8_rows_bytes(bt / r, d) : (size_t)(bt / r) * d * 2;
    v4_arena ar = {0};
    CK(cudaMalloc((void **)&ar.slots, (size_t)9 * d * 4));
    CK(cudaMemset(ar.slots, 0, (size_t)9 * d * 4));
    CK(cudaMalloc((void **)&ar.pages, (size_t)max_blocks * page_bytes));
    ar.slot_bytes = (size_t)9 * d * 4;
    ar.page_bytes = page_bytes;
    ar.block_tokens = bt;
    float *dC = dup_dev(C, (size_t)T * width * 4), *dZ = dup_dev(Z, (size_t)T * width * 4);
    float *dape = dup_dev(ape, (size_t)r * width * 4), *dnw = dup_dev(nw, (size_t)d * 4);
    double *dinv = dup_dev(inv, sizeof inv);
    /* uneven chunks: 1, 7, 3, 130, 1, ... */
    const int steps[] = {1, 7, 3, 130, 1, 64, 5, 200};
    for (int t0 = 0, k = 0; t0 < T; k++) {
        const int n = t0 + steps[k % 8] <= T ? steps[k % 8] : T - t0;
        one_span o;
        span_make(&o, n, t0, max_blocks);
        CK(v4_compress(&o.s, &ar, 0, 0, r, d, dC + (size_t)t0 * width, dZ + (size_t)t0 * width, width, dape, dnw, 1e-6f, half,
                       dinv, entry, 0));
        CK(cudaDeviceSynchronize());
        cudaFree(o.dbuf);
        t0 += n;
    }
    uint16_t *got = malloc((size_t)max_blocks * page_bytes);
    CK(cudaMemcpy(got, ar.pages, (size_t)max_blocks * page_bytes, cudaMemcpyDeviceToHost));
    float *e = malloc((size_t)d * 4), *g = malloc((size_t)d * 4), *q = malloc((size_t)d * 4);
    double worst = 0, worst_q = 0;
    long n_codes = 0, n_same = 0;
    for (int w = 0; w < n_ent; w++) {
        cpu_pool_entry(r, d, C, Z, ape, w, e);
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)e[j] * e[j];
        const float rs = (float)(1.0 / sqrt(ss / d + 1e-6));
        for (int j = 0; j < d; j++) e[j] = e[j] * rs * nw[j];
        for (int i = 0; i < half; i++) {
            const double a = (double)w * r * inv[i];
            const float cs = (float)cos(a), sn = (float)sin(a);
            float *x = e + d - 2 * half + 2 * i;
            const float re = x[0], im = x[1];
            x[0] = re * cs - im * sn;
            x[1] = re * sn + im * cs;
        }
        const long tok = (long)w * r;
        const int row = (int)(tok % bt) / r;
        const uint8_t *region = (const uint8_t *)got + (size_t)(tok / bt) * page_bytes;
        uint8_t ce = 0;   /* the CPU's exponent of the block of j */
        for (int j = 0; j < d; j++) {   /* the stored value g, against the CPU's entry e */
            if (kv8 && j >= nope) {   /* the rotated dims: bf16 */
                g[j] = fb(((const uint16_t *)(region + (size_t)row * rb + nope))[j - nope]);
                q[j] = fb(bf(e[j]));
            } else if (fp8) {   /* the CPU's own FP8 row of e: the GPU's codes and exponents, up to the pooling's rounding */
                const uint8_t ge = kv8 ? region[(size_t)row * rb + nope + 4 * half + j / 64]
                                       : region[(size_t)(bt / r) * d + (size_t)row * V4_FP8_SCALE_STRIDE(d) + j / 64];
                const uint8_t gc = kv8 ? region[(size_t)row * rb + j] : region[(size_t)row * d + j];
                if (j % 64 == 0) {
                    float amax = 0.0f;
                    for (int k = j; k < j + 64; k++) amax = fabsf(e[k]) > amax ? fabsf(e[k]) : amax;
                    ce = qt_fp8_block_exp(amax);
                }
                const uint8_t cc = qt_f32_to_e4m3(ldexpf(e[j], 127 - ce));
                n_codes++;
                n_same += ge == ce && gc == cc;
                g[j] = ldexpf(qt_e4m3_to_f32(gc), ge - 127);
                q[j] = ldexpf(qt_e4m3_to_f32(cc), ce - 127);
            } else {
                g[j] = fb(((const uint16_t *)region)[(size_t)row * d + j]);
            }
        }
        double num = 0, den = 0, qn = 0;
        for (int j = 0; j < d; j++) {
            num += (g[j] - e[j]) * (double)(g[j] - e[j]);
            den += (double)e[j] * e[j];
            if (fp8) qn += (g[j] - q[j]) * (double)(g[j] - q[j]);
        }
        const double rel = sqrt(num / den), qrel = sqrt(qn / den);
        if (!(rel <= worst)) worst = rel;
        if (!(qrel <= worst_q)) worst_q = qrel;
    }
    if (fp8) {
        printf("compressor ratio %3d d %d, %s, %d tokens in uneven chunks: %d entries, worst rel L2 %.2e (the CPU's own "
               "FP8 row of its entry: %.2e; codes and exponents the same %.4f)\n", r, d, kv8 ? "FP8 KV rows" : "FP8 rows",
               T, n_ent, worst, worst_q, (double)n_same / n_codes);
        if (!(worst < 4e-2) || !(worst_q < 8e-3) || n_same < 0.99 * n_codes)
            FAIL("compressor ratio %d, FP8: rel L2 %.3e, against the CPU's FP8 row %.3e, codes the same %.4f", r, worst,
                 worst_q, (double)n_same / n_codes);
    } else {
        printf("compressor ratio %3d d %d, %d tokens in uneven chunks: %d entries, worst rel L2 %.2e\n", r, d, T, n_ent, worst);
        if (!(worst < 8e-3)) FAIL("compressor ratio %d: rel L2 %.3e", r, worst);
    }
    free(C); free(Z); free(ape); free(nw); free(got); free(e); free(g); free(q);
    cudaFree(ar.slots); cudaFree(ar.pages); cudaFree(dC); cudaFree(dZ); cudaFree(dape); cudaFree(dnw); cudaFree(dinv);
}

/* ----------------------------------------------------------------------- kv norm + RoPE */
/* v4_norm_rope's FP8 KV rows (the attention's keys with FP8 KV): n rows of 512 (RMSNorm with a weight, RoPE on the
 * last 64 at positions pos0..) against the CPU's values quantised by engine/quant.c (kv_put): the codes and exponents
 * the same up to the norm's summation order, the rotated dims bf16. */
static void test_norm_kv8(int n, int pos0)
{
    const int d = 512, rh = 32, ld = 640;
    const size_t rb = v4_kv_row_bytes(d, rh, 1);
    float *x = malloc((size_t)n * ld * 4), *w = malloc(d * 4), *y = malloc(d * 4);
    for (size_t i = 0; i < (size_t)n * ld; i++) x[i] = urand() * (i % ld < 128 ? 5.0f : 1.0f);
    for (int j = 0; j < d; j++) w[j] = 1.0f + 0.5f * urand();
    double inv[32];
    for (int k = 0; k < rh; k++) inv[k] = pow(10000.0, -(double)k / rh);
    float *dx = dup_dev(x, (size_t)n * ld * 4), *dw = dup_dev(w, d * 4);
    double *dinv = dup_dev(inv, sizeof inv);
    uint8_t *dout, *got = malloc((size_t)n * rb), *want = malloc(rb);
    CK(cudaMalloc((void **)&dout, (size_t)n * rb));
    one_span o;
    span_make(&o, n, pos0, 1);
    const v4_norm_job jb = {dx, ld, n, 1, d, 1, dw, rh, dinv, NULL, d, 0, dout};
    CK(v4_norm_rope(&o.s, &jb, 1, 1e-6f, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, dout, (size_t)n * rb, cudaMemcpyDeviceToHost));
    long same = 0, total = 0;
    double worst = 0;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * ld;
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)xr[j] * xr[j];
        const float rs = (float)(1.0 / sqrt(ss / d + 1e-6));
        for (int j = 0; j < d; j++) y[j] = xr[j] * rs * w[j];
        for (int k = 0; k < rh; k++) {
            const double a = (double)(pos0 + r) * inv[k];
            const float cs = (float)cos(a), sn = (float)sin(a), re = y[d - 2 * rh + 2 * k], im = y[d - 2 * rh + 2 * k + 1];
            y[d - 2 * rh + 2 * k] = re * cs - im * sn;
            y[d - 2 * rh + 2 * k + 1] = re * sn + im * cs;
        }
        kv_put(want, y, d, rh, 1);
        const uint8_t *g = got + (size_t)r * rb;
        for (int j = 0; j < d - 2 * rh; j++) same += g[j] == want[j];
        for (int b = 0; b < (d - 2 * rh) / 64; b++) same += g[d + 2 * rh + b] == want[d + 2 * rh + b];
        total += d - 2 * rh + (d - 2 * rh) / 64;
        double num = 0, den = 0;
        for (int j = 0; j < d; j++) {
            const double dv = kv_get(g, j, d, rh, 1) - (double)y[j];
            num += dv * dv;
            den += (double)y[j] * y[j];
        }
        if (!(sqrt(num / den) <= worst)) worst = sqrt(num / den);
    }
    printf("kv norm + RoPE into FP8 KV rows, %d rows at %d: codes and exponents the same %.4f, worst rel L2 %.2e\n", n,
           pos0, (double)same / total, worst);
    if (same < 0.99 * total || !(worst < 4e-2)) FAIL("kv norm FP8 KV rows: the same %.4f, rel L2 %.3e", (double)same / total, worst);
    free(x); free(w); free(y); free(got); free(want);
    cudaFree(dx); cudaFree(dw); cudaFree(dinv); cudaFree(dout); cudaFree(o.dbuf);
}

/* -------------------------------------------------------------------------- attention */
/* n rows at positions pos0.. of one span; ratio 128: every HCA entry; ratio 4: a random top-k of `topk` slots per
 * row (some -1, the rest distinct entries); scratch for scratch_rows rows a launch (fewer than n: several
 * launches). Keys bf16 or (kv8) FP8 KV rows, the ring's, the pages' and this step's alike. Against a double-precision
 * reference on the stored keys' values, de-rotated as the kernel's output is; the GPU rounds the probabilities and the
 * output to bf16 (V4's 64 x 512 runs on the tensor cores), hence the tolerance. */
static void test_attention_shape(int H, int hd, int ratio, int n, int pos0, int scratch_rows, int split, int kv8)
{
    const int W = 128, bt = 128, topk = 512, rh = 32;   /* V4's 64 rotated dims */
    const int t_last = pos0 + n - 1, n_ent = (t_last + 1) / ratio, max_blocks = (t_last + bt) / bt;
    const int max_keys = W + (ratio == 4 ? (n_ent < topk ? n_ent : topk) : n_ent);
    const size_t rb = v4_kv_row_bytes(hd, rh, kv8), slot_bytes = (size_t)W * rb, page_bytes = (size_t)(bt / ratio) * rb;
    uint8_t *ring = malloc(slot_bytes), *pages = malloc((size_t)max_blocks * page_bytes), *kv = malloc((size_t)n * rb);
    uint16_t *q = malloc((size_t)n * H * hd * 2);
    int32_t *sel = malloc((size_t)n * topk * sizeof(int32_t));
    float *sink = malloc(H * 4), *x = malloc(hd * sizeof(float));
    for (size_t r = 0; r < slot_bytes / rb + (size_t)max_blocks * (bt / ratio) + (size_t)n; r++) {
        for (int d = 0; d < hd; d++) x[d] = urand() * (d < 64 ? 4.0f : 1.0f);   /* blocks of unlike scales */
        uint8_t *row = r < (size_t)W ? ring + r * rb
                     : r < (size_t)W + (size_t)max_blocks * (bt / ratio) ? pages + (r - W) * rb
                     : kv + (r - W - (size_t)max_blocks * (bt / ratio)) * rb;
        kv_put(row, x, hd, rh, kv8);
    }
    for (size_t i = 0; i < (size_t)n * H * hd; i++) q[i] = bf(3.0f * urand());
    for (int h = 0; h < H; h++) sink[h] = urand();
    for (int i = 0; i < n; i++) {   /* distinct entries (a partial shuffle), every 7th slot empty */
        const int ne = (pos0 + i + 1) / 4, k = ne < topk ? ne : topk;
        int *perm = malloc((size_t)(ne > 0 ? ne : 1) * sizeof(int));
        for (int e = 0; e < ne; e++) perm[e] = e;
        for (int j = 0; j < topk; j++) {
            if (j < k) {
                const int r = j + (int)(next_u32() % (uint32_t)(ne - j)), tmp = perm[j];
                perm[j] = perm[r];
                perm[r] = tmp;
            }
            sel[(size_t)i * topk + j] = j < k && j % 7 != 3 ? perm[j] : -1;
        }
        free(perm);
    }
    v4_arena ar = {dup_dev(ring, slot_bytes), slot_bytes, dup_dev(pages, (size_t)max_blocks * page_bytes), page_bytes, bt};
    uint8_t *dkv = dup_dev(kv, (size_t)n * rb);
    uint16_t *dq = dup_dev(q, (size_t)n * H * hd * 2);
    int32_t *dsel = dup_dev(sel, (size_t)n * topk * sizeof(int32_t));
    float *dsink = dup_dev(sink, H * 4), *dscr = NULL;
    uint16_t *dout;
    const size_t scr = v4_attention_scratch_floats(H, hd, scratch_rows, max_keys);
    if (scr) CK(cudaMalloc((void **)&dscr, scr * sizeof(float)));
    CK(cudaMalloc((void **)&dout, (size_t)n * H * hd * 2));
    one_span o;
    span_make(&o, n, pos0, max_blocks);
    const float scale = 1.0f / sqrtf((float)hd);
    double inv_freq[32];
    for (int k = 0; k < rh; k++) inv_freq[k] = pow(10000.0, -(double)k / rh);
    double *dinv = dup_dev(inv_freq, sizeof inv_freq);
    CK(v4_attention(&o.s, &ar, 0, W, 0, ratio, dsel, topk, dq, dkv, kv8, H, hd, scale, dsink, max_keys, dscr, scr, rh,
                    dinv, split, dout, 0));
    CK(cudaDeviceSynchronize());
    uint16_t *got = malloc((size_t)n * H * hd * 2);
    CK(cudaMemcpy(got, dout, (size_t)n * H * hd * 2, cudaMemcpyDeviceToHost));
    double worst = 0, *acc = malloc(hd * sizeof(double)), *sc = malloc(max_keys * sizeof(double));
    float *kf = malloc((size_t)max_keys * hd * sizeof(float));   /* the row's keys' values */
    for (int i = 0; i < n; i++) {
        const int t = pos0 + i, nk0 = t + 1 < W ? t + 1 : W, ne = (t + 1) / ratio;
        int nk = 0;
        for (int p = t - nk0 + 1; p <= t; p++, nk++) {
            const uint8_t *row = p >= pos0 ? kv + (size_t)(p - pos0) * rb : ring + (size_t)(p % W) * rb;
            for (int d = 0; d < hd; d++) kf[(size_t)nk * hd + d] = kv_get(row, d, hd, rh, kv8);
        }
        for (int j = 0; j < (ratio == 4 ? (ne < topk ? ne : topk) : ne); j++) {
            const int e = ratio == 4 ? sel[(size_t)i * topk + j] : j;
            if (e < 0) continue;
            const uint8_t *row = pages + (size_t)((long)e * ratio / bt) * page_bytes + (size_t)(((long)e * ratio % bt) / ratio) * rb;
            for (int d = 0; d < hd; d++) kf[(size_t)nk * hd + d] = kv_get(row, d, hd, rh, kv8);
            nk++;
        }
        for (int h = 0; h < H; h++) {
            const uint16_t *qh = q + ((size_t)i * H + h) * hd;
            double mx = sink[h], z = 0;
            for (int k = 0; k < nk; k++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += (double)fb(qh[j]) * kf[(size_t)k * hd + j];
                sc[k] = d * scale;
                if (sc[k] > mx) mx = sc[k];
            }
            memset(acc, 0, hd * sizeof(double));
            for (int k = 0; k < nk; k++) {
                const double e = exp(sc[k] - mx);
                z += e;
                for (int j = 0; j < hd; j++) acc[j] += e * kf[(size_t)k * hd + j];
            }
            z += exp(sink[h] - mx);
            for (int j = 0; j < hd; j++) acc[j] /= z;
            for (int k = 0; k < rh; k++) {   /* de-rotate: RoPE by -t on the last 2 rh dims */
                const int j = hd - 2 * rh + 2 * k;
                const double a = acc[j], b = acc[j + 1], c = cos(t * inv_freq[k]), sn = sin(t * inv_freq[k]);
                acc[j] = a * c + b * sn;
                acc[j + 1] = -a * sn + b * c;
            }
            double num = 0, den = 0;
            const uint16_t *g = got + ((size_t)i * H + h) * hd;
            for (int j = 0; j < hd; j++) {
                const double ref = acc[j];
                num += (fb(g[j]) - ref) * (fb(g[j]) - ref);
                den += ref * ref;
            }
            const double rel = sqrt(num / den);
            if (!(rel <= worst)) worst = rel;
        }
    }
    printf("attention %d x %d%s, %d rows at %d, window 128 (ring + step rows) + %s, %d keys max, splits of %d, "
           "scratch for %d rows: worst rel L2 %.2e\n", H, hd, kv8 ? " FP8 KV" : "", n, pos0,
           ratio == 4 ? "CSA top-512" : "HCA entries", max_keys, split ? split : 64, scratch_rows, worst);
    if (!(worst < 5e-3))
        FAIL("attention %d x %d%s (ratio %d, %d rows at %d): rel L2 %.3e", H, hd, kv8 ? " FP8 KV" : "", ratio, n, pos0, worst);
    free(ring); free(pages); free(kv); free(q); free(sel); free(sink); free(x); free(got); free(acc); free(sc); free(kf);
    cudaFree(ar.slots); cudaFree(ar.pages); cudaFree(dkv); cudaFree(dq); cudaFree(dsel); cudaFree(dsink); cudaFree(dout);
    if (dscr) cudaFree(dscr);
    cudaFree(dinv);
    cudaFree(o.dbuf);
}

/* V4's 64 heads x 512: the tensor cores */
static void test_attention(int ratio, int n, int pos0, int scratch_rows, int split, int kv8)
{
    test_attention_shape(64, 512, ratio, n, pos0, scratch_rows, split, kv8);
}

/* The all-reduces: the in-place one over n buffers of one stream, and the peer one with two ranks on this GPU's two
 * streams (its blocks wait for each other, so both launches must be resident at once: 2 x V4_AR_BLOCKS blocks), over
 * four consecutive launches alternating the inputs as the backend does, each with fresh inputs and one rank late;
 * every result bit-equal to the sum in rank order. Then a rank alone: its wait times out and it names the missing
 * rank in the fault word. */
static void test_allreduce(int n, size_t count)
{
    float *h = malloc((size_t)n * count * sizeof(float)), *want = malloc(count * sizeof(float));
    float *got = malloc(count * sizeof(float));
    for (size_t i = 0; i < (size_t)n * count; i++) h[i] = urand() * 8;
    for (size_t i = 0; i < count; i++) {
        float s = h[i];
        for (int r = 1; r < n; r++) s += h[(size_t)r * count + i];
        want[i] = s;
    }
    v4_ar_local a = {.n = n};
    for (int r = 0; r < n; r++) a.buf[r] = dup_dev(h + (size_t)r * count, count * sizeof(float));
    int bad = v4_allreduce_local(&a, count, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
    for (int r = 0; r < n && !bad; r++) {
        cudaMemcpy(got, a.buf[r], count * sizeof(float), cudaMemcpyDeviceToHost);
        bad |= memcmp(got, want, count * sizeof(float)) != 0;
    }
    if (bad) FAIL("all-reduce in place, %d ranks, %zu floats: not the rank-order sum on every rank", n, count);
    for (int r = 0; r < n; r++) cudaFree(a.buf[r]);

    /* two ranks, two streams; launch k reads input k % 2, written just before it on the rank's own stream with values
       of that launch; rank 1's write comes after a 512 MB fill on its stream, so a rank 0 that read its peer's input
       before the peer's flag would read the values of two launches back */
    cudaStream_t st[2];
    float *in[2][2], *out[2], *hk = NULL;
    unsigned *inbox[2], *epoch[2], *fault;
    uint8_t *delay = NULL;
    const size_t delay_bytes = (size_t)512 << 20;
    cudaMalloc((void **)&delay, delay_bytes);
    cudaHostAlloc((void **)&fault, sizeof(unsigned), cudaHostAllocMapped);
    cudaHostAlloc((void **)&hk, 2 * count * sizeof(float), cudaHostAllocDefault);
    *fault = 0;
    for (int r = 0; r < 2; r++) {
        cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking);
        for (int b = 0; b < 2; b++) cudaMalloc((void **)&in[r][b], count * sizeof(float));
        cudaMalloc((void **)&out[r], count * sizeof(float));
        cudaMalloc((void **)&inbox[r], V4_AR_BLOCKS * V4_AR_MAX_RANKS * sizeof(unsigned));
        cudaMalloc((void **)&epoch[r], V4_AR_BLOCKS * sizeof(unsigned));
        cudaMemset(inbox[r], 0, V4_AR_BLOCKS * V4_AR_MAX_RANKS * sizeof(unsigned));
        cudaMemset(epoch[r], 0, V4_AR_BLOCKS * sizeof(unsigned));
    }
    float s2[1];
    /* every kernel of the loop loaded before it: a kernel's first launch may load it (lazy loading), which waits for the
       device's running kernels, among them a rank's all-reduce waiting for the launch behind it */
    bad = v4_fill_random(delay, 1024, 1, 0, 256, st[1]) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
    for (int k = 0; k < 4 && !bad; k++) {
        for (size_t i = 0; i < 2 * count; i++) hk[i] = urand() * 8;   /* this launch's inputs, rank 0 then rank 1 */
        v4_ar_peer p = {.n = 2, .fault = fault, .timeout_ns = 5000000000ull};
        for (int r = 0; r < 2; r++) {
            p.in[r] = in[r][k % 2];
            p.inbox[r] = inbox[r];
        }
        for (int r = 0; r < 2; r++) {   /* rank 0's launch waits for rank 1's, which its stream holds back */
            if (r == 1) bad |= v4_fill_random(delay, delay_bytes, (uint64_t)k + 1, 0, 256, st[1]) != cudaSuccess;
            bad |= cudaMemcpyAsync(in[r][k % 2], hk + (size_t)r * count, count * sizeof(float), cudaMemcpyHostToDevice,
                                   st[r]) != cudaSuccess;
            p.me = r;
            p.epoch = epoch[r];
            bad |= v4_allreduce_peer(&p, count, out[r], st[r]) != cudaSuccess;
        }
        bad |= cudaDeviceSynchronize() != cudaSuccess || *fault != 0;
        for (int r = 0; r < 2 && !bad; r++) {
            cudaMemcpy(got, out[r], count * sizeof(float), cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < count && !bad; i++) {
                s2[0] = hk[i] + hk[count + i];
                bad |= memcmp(&got[i], s2, sizeof(float)) != 0;
            }
        }
    }
    if (bad) FAIL("peer all-reduce, 2 ranks on two streams, %zu floats: wrong sum or a fault (%u)", count, *fault);
    /* rank 0 alone: times out waiting for rank 1 */
    v4_ar_peer p = {.n = 2, .me = 0, .in = {in[0][0], in[1][0]}, .inbox = {inbox[0], inbox[1]}, .epoch = epoch[0],
                    .fault = fault, .timeout_ns = 2000000ull};
    if (v4_allreduce_peer(&p, count, out[0], st[0]) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
        *fault != 2)
        FAIL("peer all-reduce with a missing rank: fault word %u, want 2 (1 + the missing rank)", *fault);
    for (int r = 0; r < 2; r++) {
        for (int b = 0; b < 2; b++) cudaFree(in[r][b]);
        cudaFree(out[r]);
        cudaFree(inbox[r]);
        cudaFree(epoch[r]);
        cudaStreamDestroy(st[r]);
    }
    cudaFreeHost(fault);
    cudaFree(delay);
    cudaFreeHost(hk);
    free(h);
    free(want);
    free(got);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    test_allreduce(2, 4096);
    test_allreduce(3, 64 * 4096 + 3);
    test_allreduce(8, 1000);
    const int ns[] = {5, 512, 513, 600, 2048, 3000, 16384, 16385, 65536};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) test_topk(ns[i], 512);
    test_sample(129280);
    test_sample(1000);
    test_hc_pre(1, 0, 0);
    test_hc_pre(19, 0, 1);
    test_hc_pre(5, 1, 1);
    test_hc_pre(70, 0, 1);   /* several rows a block of the mixes, the last block short */
    test_hc_pre(41, 1, 1);
    for (int fp8 = 0; fp8 < 2; fp8++) {
        test_index_scores(2048, 1, fp8, 128);
        test_index_scores(5000, 1, fp8, 128);
        test_index_scores(2000, 64, fp8, 128);   /* batch 64 near 8K: 16 tiles of 128, the last partial, several a block */
        test_index_scores(16384, 8, fp8, 128);
        test_index_scores(3000, 3, fp8, 64);     /* another key width: the CUDA-core scorer */
    }
    test_compress(4, 512, 700, 128, 0);
    test_compress(4, 128, 700, 128, 0);
    test_compress(128, 512, 700, 128, 0);
    test_compress(4, 128, 700, 128, V4_ENTRY_FP8_ROWS);   /* the indexer's keys as FP8 rows */
    test_compress(4, 128, 700, 256, V4_ENTRY_FP8_ROWS);
    test_compress(4, 1024, 300, 128, V4_ENTRY_FP8_ROWS);  /* more 64-dim blocks than the block has warps */
    test_compress(4, 512, 700, 128, V4_ENTRY_KV8);        /* the main entries as FP8 KV rows: CSA, HCA */
    test_compress(128, 512, 700, 128, V4_ENTRY_KV8);
    test_norm_kv8(1, 8191);
    test_norm_kv8(37, 100);
    for (int kv8 = 0; kv8 < 2; kv8++) {   /* bf16 keys, then FP8 KV rows */
        test_attention(128, 40, 2000, 64, 0, kv8);      /* 143-144 keys: 3 splits */
        test_attention(128, 3, 20, 64, 0, kv8);         /* <= 23 keys: one split, normalised in the block */
        test_attention(4, 1, 8191, 1, 0, kv8);          /* batch-1 decode at 8K: 640 keys, 10 splits */
        test_attention(4, 24, 3000, 5, 0, kv8);         /* 24 rows, 5 a launch */
        test_attention(4, 17, 300, 64, 0, kv8);         /* fewer entries than top-k slots */
        /* the longer splits of larger batches (v4_attention_split): 64 rows at 8K, 2 splits of 320 keys; 2 of 128 */
        test_attention(4, 64, 8191, 64, v4_attention_split(64, 640, 132), kv8);
        test_attention(128, 40, 2000, 64, 128, kv8);
        test_attention(4, 5, 8191, 5, 640, kv8);        /* one split of every key, normalised in the block */
        test_attention(128, 2, 200000, 2, 1728, kv8);   /* 1690 HCA keys in one split: key addresses resolved twice */
        /* other shapes on the CUDA cores (the fixtures' 128-dim heads: 64 codes, 64 rotated dims) */
        test_attention_shape(8, 128, 4, 3, 3000, 3, 0, kv8);
        test_attention_shape(8, 128, 128, 5, 1000, 5, 0, kv8);
        test_attention_shape(3, 512, 4, 2, 8191, 2, 0, kv8);
    }
    if (v4_attention_split(64, 640, 132) != 320 || v4_attention_split(1, 640, 132) != 64 ||
        v4_attention_split(256, 640, 132) != 640 || v4_attention_split(16, 640, 132) != 128)
        FAIL("v4_attention_split: %d %d %d %d", v4_attention_split(64, 640, 132), v4_attention_split(1, 640, 132),
             v4_attention_split(256, 640, 132), v4_attention_split(16, 640, 132));
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
