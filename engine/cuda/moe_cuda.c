/* moe_cuda.c — host side of the GPU MoE layer: allocation, load-time upload + repack, and the
 * launch sequence of one forward (router logits -> top-k -> lists -> gate/up -> down -> combine; top-k and
 * lists are one launch for batches of <= topk_lists_max_t tokens (4; v9-v27: 32, v28: 8), above it the top-k is one block of
 * 8 warps per token (v28); the shared expert's items ride in the routed launches
 * below shared_min_t tokens, from there it has two launches of its own: on a second stream beside the
 * router and the routed launches (shared_fork, v15), or before the routed gate/up).
 */
#include "moe_cuda.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "moe_kernels.h"

#define CK(call, what)                                                                    \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "moe_cuda: %s failed: %s\n", what, cudaGetErrorString(e_));   \
            return -1;                                                                    \
        }                                                                                 \
    } while (0)

static int fail(const char *msg)
{
    fprintf(stderr, "moe_cuda: %s\n", msg);
    return -1;
}

int moe_cuda_layer_init(moe_cuda_layer *L, const moe_cuda_shape *s)
{
    memset(L, 0, sizeof *L);
    if (s->n_experts < 1 || s->n_experts > 512 || s->topk < 1 || s->topk > s->n_experts || s->topk > 32)
        return fail("bad expert count / topk (need 1 <= topk <= 32, experts <= 512)");
    if (s->hidden % 256 || s->inter % 128 || s->hidden > 8192 || s->inter > 8192)
        return fail("hidden must be a multiple of 256, inter of 128, both and <= 8192");
    if (s->fp4_fmt != QT_NVFP4 && s->fp4_fmt != QT_MXFP4) return fail("routed experts must be QT_NVFP4 or QT_MXFP4");
    if (s->hash && s->vocab < 1) return fail("hash routing needs vocab > 0");
    L->s = *s;
    L->kfmt = s->fp4_fmt == QT_NVFP4 ? MOE_FP4_NVFP4 : MOE_FP4_MXFP4;
    const int E = s->n_experts, H = s->hidden, I = s->inter;
    L->w13_stride = 2 * moe_fp4_matrix_bytes(L->kfmt, I, H);
    L->w2_stride = moe_fp4_matrix_bytes(L->kfmt, H, I);
    L->expert_bytes = L->w13_stride + L->w2_stride;
    CK(cudaMalloc((void **)&L->w13, (size_t)E * L->w13_stride), "cudaMalloc(w13)");
    CK(cudaMalloc((void **)&L->w2, (size_t)E * L->w2_stride), "cudaMalloc(w2)");
    CK(cudaMalloc((void **)&L->post13, (size_t)E * 2 * sizeof(float)), "cudaMalloc(post13)");
    CK(cudaMalloc((void **)&L->post2, (size_t)E * sizeof(float)), "cudaMalloc(post2)");
    CK(cudaMalloc((void **)&L->gate, (size_t)E * H * sizeof(float)), "cudaMalloc(gate)");
    if (E % 16 == 0) CK(cudaMalloc((void **)&L->gate_tc, (size_t)3 * E * H * sizeof(uint16_t)), "cudaMalloc(gate planes)");
    if (s->hash) CK(cudaMalloc((void **)&L->tid2eid, (size_t)s->vocab * s->topk * sizeof(int32_t)), "cudaMalloc(tid2eid)");
    if (s->has_shared) {
        const size_t nb13 = (size_t)(I / 128) * (H / 128), nb2 = (size_t)(H / 128) * (I / 128);
        CK(cudaMalloc((void **)&L->sh_w13, (size_t)2 * I * H), "cudaMalloc(shared w13)");
        CK(cudaMalloc((void **)&L->sh_w2, (size_t)H * I), "cudaMalloc(shared w2)");
        CK(cudaMalloc((void **)&L->sh_s13, 2 * nb13 * sizeof(float)), "cudaMalloc(shared s13)");
        CK(cudaMalloc((void **)&L->sh_s2, nb2 * sizeof(float)), "cudaMalloc(shared s2)");
        if (s->shared_bf16 && moe_cuda_alloc_shared_bf16(L)) return -1;
        L->shared_bytes = (size_t)3 * I * H + (2 * nb13 + nb2) * sizeof(float);
    }
    return 0;
}

int moe_cuda_alloc_shared_bf16(moe_cuda_layer *L)
{
    if (!L->s.has_shared) return fail("layer was created without a shared expert");
    if (L->sh_b13) return 0;
    const size_t n = (size_t)L->s.inter * L->s.hidden;
    uint16_t *b13 = NULL, *b2 = NULL;
    if (cudaMalloc((void **)&b13, 2 * n * sizeof(uint16_t)) != cudaSuccess ||
        cudaMalloc((void **)&b2, n * sizeof(uint16_t)) != cudaSuccess) {
        cudaGetLastError();   /* the failed allocation is not sticky; clear it for the caller's next check */
        if (b13) cudaFree(b13);
        return fail("cudaMalloc(shared expert bf16 copy)");
    }
    L->sh_b13 = b13;
    L->sh_b2 = b2;
    L->s.shared_bf16 = 1;
    return 0;
}

void moe_cuda_layer_free(moe_cuda_layer *L)
{
    void *p[] = {L->w13, L->w2, L->post13, L->post2, L->gate, L->gate_tc, L->bias, L->tid2eid,
                 L->sh_w13, L->sh_w2, L->sh_s13, L->sh_s2, L->sh_b13, L->sh_b2};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) cudaFree(p[i]);
    memset(L, 0, sizeof *L);
}

/* The gate as three bf16 planes in the tensor-core logits kernel's fragment order (moe_kernels.h,
 * moe_router_logits_tc): hi = bf16(g), mid = bf16(g - hi), lo = bf16(g - hi - mid); each residual is
 * exact in fp32 and the last has at most 8 significant bits, so hi + mid + lo == g exactly. */
static int upload_gate_planes(moe_cuda_layer *L, const float *gate_w)
{
    const int E = L->s.n_experts, H = L->s.hidden, nkb = H / 32;
    uint16_t *pl = malloc((size_t)3 * E * H * sizeof(uint16_t));
    if (!pl) return fail("out of host memory (gate planes)");
    for (int et = 0; et < E / 16; et++)
        for (int kb = 0; kb < nkb; kb++)
            for (int f = 0; f < 6; f++)
                for (int lane = 0; lane < 32; lane++) {
                    const int p = f / 2, st = f % 2, g = lane / 4, q = lane % 4, c = 32 * kb + 8 * q + 4 * st;
                    uint16_t *d = pl + ((((size_t)et * nkb + kb) * 6 + f) * 32 + lane) * 8;
                    for (int r = 0; r < 4; r++)   /* a0..a3: (row g | g + 8) x (inputs c, c+1 | c+2, c+3) */
                        for (int h = 0; h < 2; h++) {
                            const int e = 16 * et + g + (r & 1) * 8, k = c + (r >> 1) * 2 + h;
                            float v = gate_w[(size_t)e * H + k];
                            uint16_t b = 0;
                            for (int i = 0; i <= p; i++) {
                                b = qt_f32_to_bf16(v);
                                v -= qt_bf16_to_f32(b);
                            }
                            d[r * 2 + h] = b;
                        }
                }
    const cudaError_t e = cudaMemcpy(L->gate_tc, pl, (size_t)3 * E * H * sizeof(uint16_t), cudaMemcpyHostToDevice);
    free(pl);
    CK(e, "upload gate planes");
    return 0;
}

int moe_cuda_set_router(moe_cuda_layer *L, const float *gate_w, const float *bias, const int32_t *tid2eid)
{
    const int E = L->s.n_experts, H = L->s.hidden;
    for (size_t i = 0; i < (size_t)E * H; i++)
        if (!isfinite(gate_w[i])) return fail("router weight holds a non-finite value");
    CK(cudaMemcpy(L->gate, gate_w, (size_t)E * H * sizeof(float), cudaMemcpyHostToDevice), "upload router weight");
    if (L->gate_tc && upload_gate_planes(L, gate_w)) return -1;
    if (bias) {
        if (!L->bias) CK(cudaMalloc((void **)&L->bias, (size_t)E * sizeof(float)), "cudaMalloc(bias)");
        CK(cudaMemcpy(L->bias, bias, (size_t)E * sizeof(float), cudaMemcpyHostToDevice), "upload bias");
    }
    if (L->s.hash) {
        if (!tid2eid) return fail("hash layer needs tid2eid");
        const size_t n = (size_t)L->s.vocab * L->s.topk;
        for (size_t i = 0; i < n; i++)
            if (tid2eid[i] < 0 || tid2eid[i] >= E) return fail("tid2eid holds an expert index out of range");
        CK(cudaMemcpy(L->tid2eid, tid2eid, n * sizeof(int32_t), cudaMemcpyHostToDevice), "upload tid2eid");
    }
    return 0;
}

/* Repack one FP4 matrix from device checkpoint bytes; returns the per-tensor multiplier. */
static int repack_one(moe_cuda_layer *L, const uint8_t *q, const uint8_t *sc, float scale2, int n, int k,
                      uint8_t *dst, int nm, int m, float *post)
{
    const int sb = L->kfmt == MOE_FP4_NVFP4 ? 16 : 32;
    int *scratch;
    int init[2] = {INT_MAX, 0}, got[2];
    CK(cudaMalloc((void **)&scratch, 2 * sizeof(int)), "cudaMalloc(scratch)");
    int rc = -1;
    cudaError_t e = cudaMemcpy(scratch, init, sizeof init, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = moe_scale_emin(sc, (size_t)n * (k / sb), L->kfmt, scratch, 0);
    if (e == cudaSuccess) e = cudaMemcpy(got, scratch, sizeof(int), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) {
        const int emin = got[0] == INT_MAX ? 0 : got[0];
        e = moe_repack_fp4(q, sc, L->kfmt, n, k, emin, dst, nm, m, scratch + 1, 0);
        if (e == cudaSuccess) e = cudaMemcpy(got, scratch, sizeof got, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) {
            L->clamped_scales += got[1];
            *post = ldexpf(scale2, 253 + emin - moe_repack_f0());
            rc = 0;
        }
    }
    cudaFree(scratch);
    if (rc) fprintf(stderr, "moe_cuda: repack failed: %s\n", cudaGetErrorString(e));
    return rc;
}

int moe_cuda_set_expert_dev(moe_cuda_layer *L, int e, const uint8_t *const q[3], const uint8_t *const sc[3],
                            const float scale2[3])
{
    if (e < 0 || e >= L->s.n_experts) return fail("expert index out of range");
    const int H = L->s.hidden, I = L->s.inter;
    float post[3];
    uint8_t *d13 = L->w13 + (size_t)e * L->w13_stride, *d2 = L->w2 + (size_t)e * L->w2_stride;
    if (repack_one(L, q[0], sc[0], scale2[0], I, H, d13, 2, 0, &post[0])) return -1;
    if (repack_one(L, q[1], sc[1], scale2[1], I, H, d13, 2, 1, &post[1])) return -1;
    if (repack_one(L, q[2], sc[2], scale2[2], H, I, d2, 1, 0, &post[2])) return -1;
    CK(cudaMemcpy(L->post13 + 2 * e, post, 2 * sizeof(float), cudaMemcpyHostToDevice), "upload post13");
    CK(cudaMemcpy(L->post2 + e, post + 2, sizeof(float), cudaMemcpyHostToDevice), "upload post2");
    return 0;
}

int moe_cuda_set_expert(moe_cuda_layer *L, int e, const qtensor *w1, const qtensor *w3, const qtensor *w2)
{
    const qtensor *w[3] = {w1, w3, w2};
    const int H = L->s.hidden, I = L->s.inter, sb = L->kfmt == MOE_FP4_NVFP4 ? 16 : 32;
    uint8_t *q[3] = {0}, *sc[3] = {0};
    float s2[3];
    int rc = -1;
    for (int m = 0; m < 3; m++) {
        const int n = m < 2 ? I : H, k = m < 2 ? H : I;
        if ((int)w[m]->fmt != L->s.fp4_fmt || w[m]->rows != n || w[m]->cols != k) {
            fprintf(stderr, "moe_cuda: expert %d tensor %d: expected format %d [%d, %d], got %d [%d, %d]\n", e, m,
                    L->s.fp4_fmt, n, k, w[m]->fmt, w[m]->rows, w[m]->cols);
            goto out;
        }
        const size_t qb = (size_t)n * k / 2, sbytes = (size_t)n * (k / sb);
        if (cudaMalloc((void **)&q[m], qb) != cudaSuccess || cudaMalloc((void **)&sc[m], sbytes) != cudaSuccess ||
            cudaMemcpy(q[m], w[m]->data, qb, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(sc[m], w[m]->scale, sbytes, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "moe_cuda: uploading expert %d failed\n", e);
            goto out;
        }
        s2[m] = L->kfmt == MOE_FP4_NVFP4 ? w[m]->scale2 : 1.f;
    }
    rc = moe_cuda_set_expert_dev(L, e, (const uint8_t *const *)q, (const uint8_t *const *)sc, s2);
out:
    for (int m = 0; m < 3; m++) {
        if (q[m]) cudaFree(q[m]);
        if (sc[m]) cudaFree(sc[m]);
    }
    return rc;
}

int moe_cuda_set_shared_dev(moe_cuda_layer *L, const uint8_t *const w[3], const float *const s[3])
{
    if (!L->s.has_shared) return fail("layer was created without a shared expert");
    const int H = L->s.hidden, I = L->s.inter;
    const size_t nb = (size_t)(I / 128) * (H / 128);
    CK(moe_repack_fp8(w[0], I, H, L->sh_w13, 2, 0, 0), "repack shared w1");
    CK(moe_repack_fp8(w[1], I, H, L->sh_w13, 2, 1, 0), "repack shared w3");
    CK(moe_repack_fp8(w[2], H, I, L->sh_w2, 1, 0, 0), "repack shared w2");
    CK(cudaMemcpy(L->sh_s13, s[0], nb * sizeof(float), cudaMemcpyHostToDevice), "upload shared s1");
    CK(cudaMemcpy(L->sh_s13 + nb, s[1], nb * sizeof(float), cudaMemcpyHostToDevice), "upload shared s3");
    CK(cudaMemcpy(L->sh_s2, s[2], nb * sizeof(float), cudaMemcpyHostToDevice), "upload shared s2");
    L->sh_pow2 = 1;   /* v25: may the scales fold into the dequantised bf16 weights exactly (k_shared_wg FOLD)? */
    for (int m = 0; m < 3 && L->sh_pow2; m++)
        for (size_t i = 0; i < nb && L->sh_pow2; i++) {
            int ex;
            const float fr = frexpf(s[m][i], &ex);   /* s = fr * 2^ex, fr in [0.5, 1) */
            L->sh_pow2 = isfinite(s[m][i]) && fr == 0.5f && ex - 1 >= -117 && ex - 1 <= 7;
        }
    if (L->sh_b13) {   /* v36: the bf16 copy the shared GEMMs read (gate / up rows interleaved); scales folded if exact */
        const float *f1 = L->sh_pow2 ? L->sh_s13 : NULL, *f3 = L->sh_pow2 ? L->sh_s13 + nb : NULL,
                    *f2 = L->sh_pow2 ? L->sh_s2 : NULL;
        CK(moe_shared_to_bf16(w[0], f1, I, H, L->sh_b13, 2, 0, 0), "shared w1 to bf16");
        CK(moe_shared_to_bf16(w[1], f3, I, H, L->sh_b13, 2, 1, 0), "shared w3 to bf16");
        CK(moe_shared_to_bf16(w[2], f2, H, I, L->sh_b2, 1, 0, 0), "shared w2 to bf16");
    }
    CK(cudaDeviceSynchronize(), "shared expert repack");
    return 0;
}

int moe_cuda_set_shared(moe_cuda_layer *L, const qtensor *w1, const qtensor *w3, const qtensor *w2)
{
    const qtensor *w[3] = {w1, w3, w2};
    const int H = L->s.hidden, I = L->s.inter;
    uint8_t *d[3] = {0};
    float *s[3] = {0};
    int rc = -1;
    for (int m = 0; m < 3; m++) {
        const int n = m < 2 ? I : H, k = m < 2 ? H : I;
        if (w[m]->fmt != QT_FP8_B128 || w[m]->rows != n || w[m]->cols != k) {
            fprintf(stderr, "moe_cuda: shared tensor %d: expected QT_FP8_B128 [%d, %d]\n", m, n, k);
            goto out;
        }
        const size_t nb = (size_t)(n / 128) * (k / 128);
        s[m] = malloc(nb * sizeof(float));
        if (!s[m]) { fprintf(stderr, "moe_cuda: out of host memory\n"); goto out; }
        for (size_t i = 0; i < nb; i++)
            s[m][i] = w[m]->scale_is_f32 ? ((const float *)w[m]->scale)[i]
                                         : ldexpf(1.f, (int)((const uint8_t *)w[m]->scale)[i] - 127);
        if (cudaMalloc((void **)&d[m], (size_t)n * k) != cudaSuccess ||
            cudaMemcpy(d[m], w[m]->data, (size_t)n * k, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "moe_cuda: uploading the shared expert failed\n");
            goto out;
        }
    }
    rc = moe_cuda_set_shared_dev(L, (const uint8_t *const *)d, (const float *const *)s);
out:
    for (int m = 0; m < 3; m++) {
        if (d[m]) cudaFree(d[m]);
        free(s[m]);
    }
    return rc;
}

/* The defaults of moe_cuda_ws's tuning fields. No CUDA call: sluice-bench reads them before it has a GPU or a
 * workspace (its --variants defaults). */
void moe_cuda_ws_defaults(moe_cuda_ws *W)
{
    /* v11 defaults (bench/NOTES.md, runs 3-6) */
    W->early_pdl = 1;
    W->down_rm_min_t = 16;
    W->logits16_min_t = 33;
    W->logits_ks = 4;
    W->logits_ks_max_t = 16;   /* v13: 8 -> 16 (K-split logits measured 1.5-3 % faster at batch 16) */
    W->fused_max_t = 0;        /* v13: the one-launch layer stays opt-in */
    W->logits_tc_min_t = 8;    /* v14: tensor-core router logits from this batch on (32); v29: 8 (NOTES v29 (1)-(2): 16
                                  -1.0..1.2 %, skewed 16 -6.5..7 %, skewed 8 -2.5 %, 8 -0.5 %, 4 equal) */
    W->nt2_overlap = 0;
    W->shared_min_t = 9;       /* the shared expert as its own launches from this batch on (v14: 64; v15
                                  with the second stream and handed-out tiles: 16; v29: 9, so 9-15 take the fused
                                  1-tile launch (fuse1_min_t), which carries no shared items) */
    W->dyn_items = 1;          /* v15: tiles handed out to warps where the launches carry no shared items
                                  (bit 0: the 1-tile launches, bit 1: the 2-tile ones, measured slower) */
    W->dyn_max_t = 320;        /* v15: 256 (at 512 handed-out tiles read 3-5 % slower); v30 (5): 320 -3.5..5.5 %,
                                  512 +1..2.5 % with them (one process) */
    W->fuse1 = 3;              /* v16: the 1-tile stages as one launch, releasing the 2-tile down at its start
                                  (A/B in bench/NOTES.md v16: 32-256 -0.5..-2 %, skewed 64-128 -2.5..-3.5 %) */
    W->fuse1_min_t = 9;        /* (v16 at 16: +2.5 %; v18, fewer dequant ops: -4.5 %); v29: from 9 with shared_min_t 9
                                  (NOTES v29 (5): 9 -4 %, 12 -5.6 %, 15 -7.5 %, skewed 9-15 -25..27 %) */
    W->fuse_small = 8;         /* v17: T <= 2 ran the whole expert work as that one launch (NOTES v17: batch 1
                                  -5.5 %, 2 -8 %; 4 and 8 +1..1.5 %); v18 (fewer dequant ops): up to 8 (4 -3 %, 8 -2 %) */
    W->fs_ks_gu = 2;           /* ... routed gate/up tiles in 2 K parts */
    W->fs_ks_max_t = 1;        /* ... up to this batch */
    W->fs_ks_sh = 4;           /* ... the shared gate/up tiles in 4 */
    W->fs_rm = 2;              /* ... 128-row down items */
    W->fs_early_sh_max_t = 4;  /* v18: shared gate/up before the lists (A/B: batch 1 -1.9 %, 2 -3.3 %, 4 +1.4 %,
                                  8 -1.9 %: kept up to 2); v30 (3), one process: up to 4, 3 -2 %, skewed 3-4 -3 %,
                                  4 -0.3 % */
    W->fs_b5_min_t = 0;        /* v31 (3)-(4): 5 blocks per SM (128-row down items only) at 2-7 (4 -2.5 %, 6 -1.5 %, */
    W->fs_b5_max_t = 0;        /* 7 -2.8 %, skewed 2-7 -3.7..6 %); v32 (3)-(4): off (0-0), the 4-block form with the
                                  early refill (MOE_ER_S) is faster at random 1-6 (1 -4 %, 2 -3 %, 3 -2.7 %, 4 -4 %,
                                  5 -3.5 %, 6 -2.4 %, 8 -2 %), 7 equal, skewed 2-7 +1..2 %, skewed 8 -3 % */
    W->fs_cmb_early_max_t = 8; /* v33 (6): the one launch releasing the combine early (one process, two pairs: 1 -2.2 %,
                                  skewed 1 -3.2 %, 2 -0.4 %, skewed 2 -1.6 %, 4 -0.7 %, 8 and skewed 4-8 equal) */
    W->tok1_max = 16;          /* v19: experts with 9..16 tokens as two token chunks of the 1-tile launches ... */
    W->tok1_min_t = 64;        /* ... at batches 64-128, where such experts are rare and the 2-tile launches they */
    W->tok1_max_t = 128;       /* needed made a tail (128: -1 %, bench/NOTES.md v19); where they carry much of the
                                  work (random 256-512: 15-85 % of experts; skewed 16: all 6) dequantising their
                                  weights twice cost 6-40 % */
    W->shared_xl_min_t = 512;  /* v24: NOTES v24 (5): 512 -2.4 %, 256 +4 %, 128 +2 % */
    W->shared_wg_min_t = 0;    /* v25: off (NOTES v25 (2), (5): correct, no faster at 256-512; +6 % at 256) */
    W->shared_wg_fold = 1;     /* v25: SWF where the scales allow it (prepared, not yet measured: NOTES v25 (10)) */
    W->shared_wg_n128_min_t = 512;
    W->x4_min_t = 224;         /* v26: NOTES v26 (2)-(4): skewed 512 -20 %, 256 -17 %, random equal; (32-token items:)
                                  from 128 +0.8 % at skewed 128, from 64 +11 % at skewed 64; v30 (5): from 224
                                  (was 256), skewed 224 -11.5 %, random 224 -5 % unqueued, -1 % queued */
    W->x4_tok = 32;
    W->x4_early = 1;           /* v27: NOTES v27 (1)-(4): skewed 256 -3..4.5 % in every reading; random 256 -3..5 %
                                  unqueued, +0.9 % queued; after the fused launch (2) 0.4-3 % slower than 1 */
    W->nt2_all_min_t = 512;    /* v24: from 512 no 1-tile launches (NOTES v24 (2): random 512 equal, skewed 512 -4 %:
                                  the empty 1-tile gate/up's exit let the shared down's blocks in before the 2-tile
                                  gate/up's; random 256 with it (fused stages off) +10 %) */
    W->topk_lists_max_t = 4;   /* v9: 32; v28: 8, above it the grouped top-k blocks (NOTES v28 (3): 32 -0.7 %, skewed 32
                                  -6.5 %, 16 -0.3 %, skewed 16 -2.8 %); v29: 4 (v28 (5): 8 -0.9 %, 6 -1.3 %, skewed
                                  6-8 -2.7..3.2 %) */
    W->topk_group_max_t = 4;   /* v22: up to 2 tokens, each token's top-k over 8 warps of the top-k + lists block; v28:
                                  3-4 tokens in a 1024-thread block (NOTES v28 (3): 4 -1.2 %, 3 -0.9 %, skewed -1.9 %) */
    W->topk_blocks_max_t = 1 << 30;   /* v28: above topk_lists_max_t, every batch: each token's top-k one block of 8 warps */
    W->lists_runs_max_t = 1 << 30;    /* v28: the lists launch with its pairs in registers and run scans (as measured with
                                         the grouped blocks) */
    W->logits_tc_shape = 0;    /* v29: moe_router_logits_tc_parts' shape (NOTES v29 (1)) */
    W->topk_excl_min_t = 9;    /* v21: the top-k + lists block alone on its SM at 9-32 tokens (bench/NOTES.md v21 */
    W->topk_excl_max_t = 0;    /* (6)-(8): beside the shared expert's own launches its span at 32 shrinks 25 -> 16 us,
                                  random 32 -0.5..2 %, skewed 32 -7.5 %; not at <= 8, where the one expert launch's
                                  warps own their first items by number and the blocks held off that SM start
                                  theirs late (skewed 4 +3.8 %); the separate top-k from 64 gained nothing). v28: off (0),
                                  9-32 take the grouped top-k blocks, which an exclusive top-k would turn off */
    W->pf = 0;                 /* v16 L2 prefetch: measured in bench/NOTES.md */
    W->pf_max_t = 8;
    W->pf_dn_mb = 24;
    W->shared_fork = 1;        /* v15: ... on a second stream beside the router and the routed launches
                                  (1: forked before the router, 2: after it, beside the routed launches only) */
    W->side_prio = 0;
    W->shared_gemm_min_t = 256;   /* v37 (with GW): 256 -1.6 % (queued -1.4 %), skewed 256 +2.8 %; v36: NOTES v36
                                     (2)-(4): random 512 -2.3 / -2.9 % (queued -2.9 %), skewed 512 -7..8 %;
                                     256 and 128 within the noise (-0.5 % queued at 256), 64 +2.5 % (half of its 128-token
                                     tiles padding); needs moe_cuda_shape.shared_bf16 */
    W->shared_gemm_wg = 4;     /* v37 (GW): on wgmma where the scales fold; NOTES v37 (1): 512 -0.5..1 %, 256 (with SG
                                  from 256) -1.6 %, 128 +1 % (so SG stays off there); v38 (3): 4, the tiles by TMA (GWT):
                                  alone its gate/up 53 us at 512 against 71, in the layer 512 -1.2 %, 256 -0.4..0.6 % */
    W->shared_tile_max_t = 64; /* v35: NOTES v35 (3)-(5): 64 -0.7..2.1 % (queued -2.6..3.4 %), 24 -0.9 %, 32 -0.4 %;
                                  48 lost (skewed +6 %), so 33-48 keep 16-token blocks; 128 equal and skewed 128
                                  +3.6..4.6 %, so not above 64 */
}

int moe_cuda_ws_init(moe_cuda_ws *W, const moe_cuda_layer *L, int max_tokens)
{
    memset(W, 0, sizeof *W);
    if (max_tokens < 1) return fail("max_tokens must be >= 1");
    const int E = L->s.n_experts, K = L->s.topk, H = L->s.hidden, I = L->s.inter;
    const size_t pairs = (size_t)max_tokens * K + (size_t)max_tokens;
    W->max_tokens = max_tokens;
    /* room for MOE_LOGITS_KS_MAX K parts of the logits at every batch (v12) */
    CK(cudaMalloc((void **)&W->logits, (size_t)MOE_LOGITS_KS_MAX * max_tokens * E * sizeof(float)), "cudaMalloc(logits)");
    CK(cudaMalloc((void **)&W->idx, (size_t)max_tokens * K * sizeof(int32_t)), "cudaMalloc(idx)");
    CK(cudaMalloc((void **)&W->w, (size_t)max_tokens * K * sizeof(float)), "cudaMalloc(w)");
    CK(cudaMalloc((void **)&W->off, (size_t)(E + 2) * sizeof(int32_t)), "cudaMalloc(off)");
    CK(cudaMalloc((void **)&W->items_gu, (size_t)(E + 2) * sizeof(int32_t)), "cudaMalloc(items)");
    CK(cudaMalloc((void **)&W->items_dn, (size_t)(E + 2) * sizeof(int32_t)), "cudaMalloc(items)");
    CK(cudaMalloc((void **)&W->pair_tok, pairs * sizeof(int32_t)), "cudaMalloc(pair_tok)");
    CK(cudaMalloc((void **)&W->pair_w, pairs * sizeof(float)), "cudaMalloc(pair_w)");
    CK(cudaMalloc((void **)&W->inv, (size_t)max_tokens * K * sizeof(int32_t)), "cudaMalloc(inv)");
    CK(cudaMalloc((void **)&W->h, pairs * I * sizeof(uint16_t)), "cudaMalloc(h)");
    CK(cudaMalloc((void **)&W->y, pairs * H * sizeof(float)), "cudaMalloc(y)");
    CK(cudaMalloc((void **)&W->fused_sync, MOE_FUSED_SYNC_WORDS(E) * sizeof(unsigned)), "cudaMalloc(fused sync)");
    CK(cudaMemset(W->fused_sync, 0, MOE_FUSED_SYNC_WORDS(E) * sizeof(unsigned)), "cudaMemset(fused sync)");
    /* the ticket counters and the token chunks' done counts (moe_expert_args.tickets) */
    const size_t ntw = MOE_TICKET_WORDS(E, (size_t)max_tokens * K);
    CK(cudaMalloc((void **)&W->tickets, ntw * sizeof(unsigned)), "cudaMalloc(tickets)");
    CK(cudaMemset(W->tickets, 0, ntw * sizeof(unsigned)), "cudaMemset(tickets)");
    moe_cuda_ws_defaults(W);
    CK(cudaStreamCreateWithFlags(&W->side, cudaStreamNonBlocking), "cudaStreamCreate(side)");
    int prio_lo;
    CK(cudaDeviceGetStreamPriorityRange(&prio_lo, &W->prio_hi), "cudaDeviceGetStreamPriorityRange");
    CK(cudaStreamCreateWithPriority(&W->side_hi, cudaStreamNonBlocking, W->prio_hi), "cudaStreamCreate(side, high)");
    CK(cudaEventCreateWithFlags(&W->ev_fork, cudaEventDisableTiming), "cudaEventCreate(fork)");
    CK(cudaEventCreateWithFlags(&W->ev_join, cudaEventDisableTiming), "cudaEventCreate(join)");
    int dev, sms, fb;
    CK(cudaGetDevice(&dev), "cudaGetDevice");
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "device attributes");
    CK(moe_kernels_carveout(), "shared memory carveout");
    CK(moe_fused_occupancy(L->kfmt, &fb), "occupancy (fused)");
    W->grid_fused = sms * fb;
    if (fb < 1) W->fused_max_t = 0;   /* the one-launch layer cannot be resident: never take it */
    CK(moe_experts1_occupancy(L->kfmt, E, 0, &fb), "occupancy (fused 1-tile stages)");
    if (fb < 1) return fail("the fused expert kernel cannot be resident on this device");
    W->grid_f1 = sms * fb;
    CK(moe_experts1_occupancy(L->kfmt, E, 1, &fb), "occupancy (one expert launch)");
    if (fb < 1) return fail("the fused expert kernel cannot be resident on this device");
    W->grid_f1s = sms * fb;
    {   /* v17: K-part partial sums of the T <= 8 fused launch (moe_expert_args.part, .pcnt): the shared expert's gate/up
           tiles, then those of at most 8 * topk routed experts */
        const size_t ptiles = MOE_PART_TILES(I, K, E);
        CK(cudaMalloc((void **)&W->part, ptiles * MOE_PARTS_MAX * 1024), "cudaMalloc(part)");
        CK(cudaMalloc((void **)&W->pcnt, ptiles * sizeof(unsigned)), "cudaMalloc(pcnt)");
        CK(cudaMemset(W->pcnt, 0, ptiles * sizeof(unsigned)), "cudaMemset(pcnt)");
    }
    CK(moe_experts1_occupancy(L->kfmt, E, 2, &fb), "occupancy (one expert launch, 5 blocks per SM)");
    if (fb < 1) return fail("the fused expert kernel cannot be resident on this device");
    W->grid_f1s5 = sms * fb;
    for (int i = 0; i < 3; i++) {   /* 1, 2 tiles, the wide kernels */
        int gu, dn;
        CK(moe_expert_occupancy(L->kfmt, E, 1 << i, &gu, &dn), "occupancy");
        if (gu < 1 || dn < 1) return fail("expert kernels cannot be resident on this device");
        W->grid_gu[i] = sms * gu;
        W->grid_dn[i] = sms * dn;
    }
    return 0;
}

void moe_cuda_ws_free(moe_cuda_ws *W)
{
    void *p[] = {W->logits, W->idx, W->w, W->off, W->items_gu, W->items_dn, W->pair_tok, W->pair_w, W->inv,
                 W->h, W->y, W->fused_sync, W->tickets, W->part, W->pcnt};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) cudaFree(p[i]);
    if (W->ev_fork) cudaEventDestroy(W->ev_fork);
    if (W->ev_join) cudaEventDestroy(W->ev_join);
    if (W->side) cudaStreamDestroy(W->side);
    if (W->side_hi) cudaStreamDestroy(W->side_hi);
    memset(W, 0, sizeof *W);
}

int moe_cuda_forward(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids, int T,
                     float *out, cudaStream_t st)
{
    return moe_cuda_forward_timed(L, W, x, token_ids, T, out, st, NULL);
}

/* K parts for a gate/up tile of nc = H/128 chunks: the largest count <= want (1..MOE_PARTS_MAX) dividing nc */
static int parts_fit(int want, int nc)
{
    int k = want < 1 ? 1 : want > MOE_PARTS_MAX ? MOE_PARTS_MAX : want;
    while (nc % k) k--;
    return k;
}

/* The shared expert's own launches: from shared_gemm_min_t tokens its two bf16 GEMMs (v36), else moe_shared_experts */
static cudaError_t shared_launches(const moe_cuda_layer *L, const moe_cuda_ws *W, const moe_expert_args *a,
                                   const uint16_t *x, int T, int topk, cudaStream_t st)
{
    if (W->shared_gemm_min_t > 0 && T >= W->shared_gemm_min_t && L->sh_b13)
        return moe_shared_gemms(a, L->sh_b13, L->sh_b2, L->sh_pow2, W->shared_gemm_wg, x, T, topk, W->h, W->y, st);
    return moe_shared_experts(a, x, T, topk, W->h, W->y, st);
}

/* The shared expert's own launches on W->side, after what st has queued so far; ev_join marks their end. */
static int fork_shared(const moe_cuda_layer *L, moe_cuda_ws *W, const moe_expert_args *a, const uint16_t *x, int T,
                       int topk, cudaStream_t st)
{
    cudaStream_t side = W->side_prio ? W->side_hi : W->side;
    moe_expert_args b = *a;
    b.sh_prio_on = W->side_prio != 0;
    b.sh_prio = W->prio_hi;
    CK(cudaEventRecord(W->ev_fork, st), "cudaEventRecord(fork)");
    CK(cudaStreamWaitEvent(side, W->ev_fork, 0), "cudaStreamWaitEvent(fork)");
    CK(shared_launches(L, W, &b, x, T, topk, side), "shared expert");
    CK(cudaEventRecord(W->ev_join, side), "cudaEventRecord(join)");
    return 0;
}

int moe_cuda_forward_timed(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids,
                           int T, float *out, cudaStream_t st, cudaEvent_t ev[7])
{
    if (T < 1 || T > W->max_tokens) return fail("batch larger than the workspace (or < 1)");
    if (L->s.hash && !token_ids) return fail("hash routing needs token ids");
    const moe_cuda_shape *s = &L->s;
    const int E = s->n_experts, H = s->hidden, I = s->inter, K = s->topk;
    const int tok1 = T >= W->tok1_min_t && T <= W->tok1_max_t ? W->tok1_max : MOE_TOK_CHUNK;
    int wide = 0;   /* X4: above 16 tokens and above the 1-tile chunks' tok1 (moe_expert_args.wide_min) */
    if (W->x4_min_t > 0 && T >= W->x4_min_t) {
        wide = W->x4_tok > tok1 ? W->x4_tok : tok1;
        if (wide < 2 * MOE_TOK_CHUNK) wide = 2 * MOE_TOK_CHUNK;
    }
    const moe_expert_args a = {
        .E = E, .H = H, .I = I, .fmt = L->kfmt, .has_shared = s->has_shared,
        .w13 = L->w13, .w13_stride = L->w13_stride, .w2 = L->w2, .w2_stride = L->w2_stride,
        .post13 = L->post13, .post2 = L->post2,
        .sh_w13 = L->sh_w13, .sh_w2 = L->sh_w2, .sh_s13 = L->sh_s13, .sh_s2 = L->sh_s2,
        .limit = s->swiglu_limit, .early = W->early_pdl,
        .down_rm = T >= W->down_rm_min_t && H % 128 == 0 ? 2 : 1,
        .overlap = W->nt2_overlap, .nt2_first = W->nt2_first,
        .tok1_max = tok1,
        .sh_xl_min_t = W->shared_xl_min_t, .sh_wg_min_t = W->shared_wg_min_t,
        .sh_wg_fold = W->shared_wg_fold && L->sh_pow2, .sh_wg_n128_min_t = W->shared_wg_n128_min_t,
        .wide_min = wide, .wide_early = W->x4_early, .sh_tile_max_t = W->shared_tile_max_t,
    };
#define MARK(i) do { if (ev) CK(cudaEventRecord(ev[i], st), "cudaEventRecord"); } while (0)
    MARK(0);
    const int fks = moe_fused_ks(H);
    /* one launch up to the combine (v13, opt-in); shapes it does not take use the launch sequence */
    if (T <= W->fused_max_t && T <= MOE_FUSED_MAX_T && fks > 0 && E <= MOE_FUSED_MAX_E && T * K <= 256) {
        const moe_fused_args f = {
            .ex = a, .x = x, .gate = L->gate, .bias = L->bias, .tid2eid = s->hash ? L->tid2eid : NULL,
            .token_ids = token_ids, .T = T, .topk = K, .score_func = s->score_func, .ks = fks, .opt = W->fused_opt,
            .route_scale = s->route_scale, .logits = W->logits, .idx = W->idx, .w = W->w, .off = W->off,
            .pair_tok = W->pair_tok, .inv = W->inv, .pair_w = W->pair_w, .h = W->h, .y = W->y,
            .sync = W->fused_sync,
            .trace = W->fused_trace,
        };
        CK(moe_fused_small(&f, W->grid_fused, st), "fused layer");
        MARK(1); MARK(2); MARK(3); MARK(4); MARK(5);
        CK(moe_combine(W->y, W->inv, s->has_shared ? W->y + (size_t)T * K * H : NULL, T, H, K, 0, out, st), "combine");
        MARK(6);
        return 0;
    }
    /* from shared_min_t tokens the shared expert runs as its own launches (v14) and the routed launches
     * carry routed experts only; its rows stay where the lists put them (after the T * topk routed pairs).
     * With shared_fork (v15) they go to a second stream now, as they need only x: they run beside the
     * router (which leaves most SMs idle) and take the slots the routed launches leave; the combine waits
     * for them (ev_join). */
    const int own_shared = s->has_shared && (T >= W->shared_min_t || !moe_expert_inline_shared_ok()),
              fork = own_shared && W->shared_fork;
    moe_expert_args ar = a;
    if (own_shared) ar.has_shared = 0;
    if (W->dyn_items && !ar.has_shared && T <= W->dyn_max_t) ar.tickets = W->tickets, ar.dyn = W->dyn_items;
    /* v16 L2 prefetch: the logits launch asks for the shared expert's weights, the gate/up launch for the
     * down weights, so the later stages read them from L2 */
    const int pf = T <= W->pf_max_t ? W->pf : 0, sh_in = ar.has_shared;
    moe_l2_ranges lpf = {.last = (pf & 16) != 0};
    if (sh_in && (pf & 1)) {
        lpf.p[0] = L->sh_w13, lpf.n[0] = (size_t)2 * I * H;
        lpf.p[1] = L->sh_s13, lpf.n[1] = (size_t)2 * (I / 128) * (H / 128) * sizeof(float);
    }
    if (sh_in && (pf & 2)) lpf.p[2] = L->sh_w2, lpf.n[2] = (size_t)H * I;
    ar.pf_sh_dn = sh_in && (pf & 4) && !(pf & 2);
    ar.pf_dn = (pf & 8) ? (int)(((size_t)W->pf_dn_mb << 20) / L->w2_stride) : 0;
    ar.pf_last = (pf & 16) != 0;
    if (fork && (W->shared_fork == 1 || W->shared_fork == 4) && fork_shared(L, W, &a, x, T, K, st)) return -1;
    int ks = T <= W->logits_ks_max_t && W->logits_ks > 1 && W->logits_ks <= MOE_LOGITS_KS_MAX &&
                     H % (256 * W->logits_ks) == 0 ? W->logits_ks : 1;
    if (L->gate_tc && T >= W->logits_tc_min_t) {
        int ntt = 0;
        ks = moe_router_logits_tc_parts(T, H, E);
        if (W->logits_tc_shape) {   /* v29 (bench/NOTES.md v29 (1)) */
            ntt = W->logits_tc_shape / 10, ks = W->logits_tc_shape % 10;
            if ((ntt != 1 && ntt != 2 && ntt != 4) || ks < 1 || ks > MOE_LOGITS_KS_MAX || (ks & (ks - 1)))
                return fail("logits_tc_shape must be 10 ntt + ksplit with ntt 1, 2 or 4 and ksplit 1, 2, 4 or 8");
            while (H % (256 * ks)) ks /= 2;
        }
        CK(moe_router_logits_tc_shape(x, L->gate_tc, T, H, E, W->logits, ntt, ks, st), "router logits (tensor cores)");
    } else {
        CK(moe_router_logits(x, L->gate, T, H, E, W->logits, W->logits16_min_t, ks, lpf.p[0] || lpf.p[2] ? &lpf : NULL,
                             st), "router logits");
    }
    MARK(1);
    /* forked after the logits (3): the logits launch has the SMs to itself, the shared expert's blocks take
     * them while top-k and lists run on a few */
    if (fork && W->shared_fork == 3 && fork_shared(L, W, &a, x, T, K, st)) return -1;
    const int nt = moe_tok_tiles(T), lsh = s->has_shared, excl = T >= W->topk_excl_min_t && T <= W->topk_excl_max_t ? MOE_TOPK_EXCL_MAX : 0;
    if (T <= W->topk_lists_max_t && T <= MOE_FUSED_ROUTER_MAX_T) {   /* one launch for top-k + lists (the "topk" stage reads ~0) */
        MARK(2);
        CK(moe_router_topk_lists(W->logits, ks, T, E, K, s->score_func, L->bias, s->hash ? L->tid2eid : NULL, token_ids,
                                 s->route_scale, W->idx, W->w, lsh, I / MOE_ROWS_PER_ITEM, H / MOE_ROWS_PER_ITEM,
                                 MOE_TOK_CHUNK * nt, W->off, W->pair_tok, W->pair_w, W->inv, W->items_gu,
                                 W->items_dn, excl, W->topk_group_max_t, st), "router top-k + lists");
    } else {
        CK(moe_router_topk(W->logits, ks, T, E, K, s->score_func, L->bias, s->hash ? L->tid2eid : NULL,
                           token_ids, s->route_scale, W->idx, W->w, excl, W->topk_blocks_max_t, st), "router top-k");
        MARK(2);
        CK(moe_build_lists(W->idx, W->w, T, E, K, lsh, I / MOE_ROWS_PER_ITEM, H / MOE_ROWS_PER_ITEM,
                           MOE_TOK_CHUNK * nt, W->off, W->pair_tok, W->pair_w, W->inv, W->items_gu, W->items_dn,
                           T <= W->lists_runs_max_t, st), "expert lists");
    }
    MARK(3);
    /* forked after the router: beside the routed launches only */
    if (fork && W->shared_fork == 2 && fork_shared(L, W, &a, x, T, K, st)) return -1;
    if (own_shared && !fork) CK(shared_launches(L, W, &a, x, T, K, st), "shared expert");
    /* forked before the router and joined before the routed launches (4): the shared expert overlaps only the
     * router, as it does in stream mode when the host's launches are slower than the router */
    if (fork && W->shared_fork == 4) CK(cudaStreamWaitEvent(st, W->ev_join, 0), "cudaStreamWaitEvent(join)");
    int inv_ready = 0;   /* moe_combine's: set where the launch before it releases it only after the lists */
    if (T <= W->fuse_small && T <= MOE_TOK_CHUNK) {   /* v17: the whole expert work, shared expert included, in one launch */
        ar.tickets = W->tickets;
        ar.ks_gu = parts_fit(T <= W->fs_ks_max_t ? W->fs_ks_gu : 1, H / 128);
        ar.ks_sh = parts_fit(W->fs_ks_sh, H / 128);
        ar.part = W->part;
        ar.pcnt = W->pcnt;
        ar.down_rm = W->fs_rm;
        ar.early_sh = T <= W->fs_early_sh_max_t;
        ar.one_launch = T >= W->fs_b5_min_t && T <= W->fs_b5_max_t && W->fs_rm != 1 ? 2 : 1;   /* 5 blocks: rm 2 */
        ar.fuse_early = inv_ready = T <= W->fs_cmb_early_max_t;   /* v33: the combine launched during the drain */
        CK(moe_experts_fused1(&ar, x, W->off, W->pair_tok, W->pair_w, T, K, W->grid_gu,
                              ar.one_launch == 2 ? W->grid_f1s5 : W->grid_f1s, W->h, W->y, st),
           "experts (one launch)");
        MARK(4);
    } else if (W->fuse1 && ar.tickets && T >= W->fuse1_min_t) {   /* v16: down items start per expert; v31: also at
                                                                      T <= 8 above fuse_small (needs the shared launches) */
        ar.fuse_early = (W->fuse1 & 2) != 0;
        CK(moe_experts_fused1(&ar, x, W->off, W->pair_tok, W->pair_w, T, K, W->grid_gu, W->grid_f1, W->h, W->y, st),
           "experts (fused 1-tile stages)");
        MARK(4);
    } else {
        if (W->nt2_all_min_t > 0 && T >= W->nt2_all_min_t && T > MOE_TOK_CHUNK && !ar.overlap) ar.tok1_max = -1;
        CK(moe_gate_up(&ar, x, W->off, W->pair_tok, W->pair_w, W->items_gu, T, K, W->grid_gu, W->h, st), "gate/up");
        MARK(4);
        CK(moe_down(&ar, W->h, W->off, W->items_dn, T, K, W->grid_dn, W->y, st), "down");
    }
    MARK(5);
    /* the shared expert's rows follow the routed pairs (off[E] = T * topk: every router index is valid) */
    const float *ysh = s->has_shared ? W->y + (size_t)T * K * H : NULL;
    if (fork) CK(cudaStreamWaitEvent(st, W->ev_join, 0), "cudaStreamWaitEvent(join)");
    CK(moe_combine(W->y, W->inv, ysh, T, H, K, inv_ready, out, st), "combine");
    MARK(6);
#undef MARK
    return 0;
}

int moe_cuda_quantize_nvfp4(const float *w, int rows, int cols, uint8_t *q, uint8_t *scale, float *scale2,
                            cudaStream_t st)
{
    CK(moe_quantize_nvfp4(w, rows, cols, q, scale, scale2, st), "NVFP4 quantisation");
    return 0;
}
