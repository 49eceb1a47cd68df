/* moe_cuda.c — host side of the GPU MoE layer: allocation, load-time upload + repack, and the launch sequence of one
 * forward: router logits -> top-k -> lists -> gate/up -> down -> combine, shaped per batch by moe_cuda_plan
 * (moe_plan.c): top-k and lists as one launch for the smallest batches; the shared expert's items riding in the
 * routed launches, or from 9 tokens its own launches on a second stream beside the router and the routed launches.
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
    L->sh_pow2 = 1;   /* may the scales fold into the dequantised bf16 weights exactly (moe_shared_gemms FOLD)? */
    for (int m = 0; m < 3 && L->sh_pow2; m++)
        for (size_t i = 0; i < nb && L->sh_pow2; i++) {
            int ex;
            const float fr = frexpf(s[m][i], &ex);   /* s = fr * 2^ex, fr in [0.5, 1) */
            L->sh_pow2 = isfinite(s[m][i]) && fr == 0.5f && ex - 1 >= -117 && ex - 1 <= 7;
        }
    if (L->sh_b13) {   /* the bf16 copy the shared GEMMs read (gate / up rows interleaved); scales folded if exact */
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

int moe_cuda_ws_init(moe_cuda_ws *W, const moe_cuda_layer *L, int max_tokens)
{
    memset(W, 0, sizeof *W);
    if (max_tokens < 1) return fail("max_tokens must be >= 1");
    const int E = L->s.n_experts, K = L->s.topk, H = L->s.hidden, I = L->s.inter;
    const size_t pairs = (size_t)max_tokens * K + (size_t)max_tokens;
    W->max_tokens = max_tokens;
    /* room for MOE_LOGITS_KS_MAX K parts of the logits at every batch */
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
    /* the tile counters and the token chunks' done counts (moe_expert_args.tickets) */
    const size_t ntw = MOE_TICKET_WORDS(E, (size_t)max_tokens * K);
    CK(cudaMalloc((void **)&W->tickets, ntw * sizeof(unsigned)), "cudaMalloc(tickets)");
    CK(cudaMemset(W->tickets, 0, ntw * sizeof(unsigned)), "cudaMemset(tickets)");
    /* the one launch's K-part partial sums (moe_expert_args.part, .pcnt): the shared expert's gate/up tiles, then
       those of at most 8 * topk routed experts */
    const size_t ptiles = MOE_PART_TILES(I, K, E);
    CK(cudaMalloc((void **)&W->part, ptiles * MOE_PARTS_MAX * 1024), "cudaMalloc(part)");
    CK(cudaMalloc((void **)&W->pcnt, ptiles * sizeof(unsigned)), "cudaMalloc(pcnt)");
    CK(cudaMemset(W->pcnt, 0, ptiles * sizeof(unsigned)), "cudaMemset(pcnt)");
    CK(cudaStreamCreateWithFlags(&W->side, cudaStreamNonBlocking), "cudaStreamCreate(side)");
    CK(cudaEventCreateWithFlags(&W->ev_fork, cudaEventDisableTiming), "cudaEventCreate(fork)");
    CK(cudaEventCreateWithFlags(&W->ev_join, cudaEventDisableTiming), "cudaEventCreate(join)");
    int dev, sms, fb;
    CK(cudaGetDevice(&dev), "cudaGetDevice");
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "device attributes");
    CK(moe_kernels_carveout(), "shared memory carveout");
    CK(moe_experts1_occupancy(L->kfmt, E, 0, &fb), "occupancy (fused 1-tile stages)");
    if (fb < 1) return fail("the fused expert kernel cannot be resident on this device");
    W->grid_f1 = sms * fb;
    CK(moe_experts1_occupancy(L->kfmt, E, 1, &fb), "occupancy (one expert launch)");
    if (fb < 1) return fail("the fused expert kernel cannot be resident on this device");
    W->grid_f1s = sms * fb;
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
                 W->h, W->y, W->tickets, W->part, W->pcnt};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) cudaFree(p[i]);
    if (W->ev_fork) cudaEventDestroy(W->ev_fork);
    if (W->ev_join) cudaEventDestroy(W->ev_join);
    if (W->side) cudaStreamDestroy(W->side);
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

/* The shared expert's own launches: its two bf16 GEMMs (plan.shared_gemm, with the layer's bf16 copy), else
 * moe_shared_experts */
static cudaError_t shared_launches(const moe_cuda_layer *L, const moe_cuda_ws *W, const moe_plan *p,
                                   const moe_expert_args *a, const uint16_t *x, int T, int topk, cudaStream_t st)
{
    if (p->shared_gemm && L->sh_b13)
        return moe_shared_gemms(a, L->sh_b13, L->sh_b2, L->sh_pow2, x, T, topk, W->h, W->y, st);
    return moe_shared_experts(a, x, T, topk, W->h, W->y, st);
}

int moe_cuda_forward_timed(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids,
                           int T, float *out, cudaStream_t st, cudaEvent_t ev[7])
{
    if (T < 1 || T > W->max_tokens) return fail("batch larger than the workspace (or < 1)");
    if (L->s.hash && !token_ids) return fail("hash routing needs token ids");
    const moe_cuda_shape *s = &L->s;
    const int E = s->n_experts, H = s->hidden, I = s->inter, K = s->topk;
    const moe_plan p = moe_cuda_plan(L, W, T);
    const int tok1 = p.tok1;
    int wide = 0;   /* the wide launches: above 16 tokens and above the 1-tile chunks' tok1 (moe_expert_args.wide_min) */
    if (p.wide > 0) {
        wide = p.wide > tok1 ? p.wide : tok1;
        if (wide < 2 * MOE_TOK_CHUNK) wide = 2 * MOE_TOK_CHUNK;
    }
    const moe_expert_args a = {
        .E = E, .H = H, .I = I, .fmt = L->kfmt, .has_shared = s->has_shared,
        .w13 = L->w13, .w13_stride = L->w13_stride, .w2 = L->w2, .w2_stride = L->w2_stride,
        .post13 = L->post13, .post2 = L->post2,
        .sh_w13 = L->sh_w13, .sh_w2 = L->sh_w2, .sh_s13 = L->sh_s13, .sh_s2 = L->sh_s2,
        .limit = s->swiglu_limit, .early = 1, .down_rm = p.down_rm == 2 && H % 128 == 0 ? 2 : 1,
        .tok1_max = tok1, .sh_xl_min_t = p.shared_xl ? 1 : 0, .wide_min = wide, .wide_early = 1,
        .sh_tile_max_t = p.shared_tile ? T : 0,
    };
#define MARK(i) do { if (ev) CK(cudaEventRecord(ev[i], st), "cudaEventRecord"); } while (0)
    MARK(0);
    /* with own_shared the shared expert runs as its own launches and the routed launches carry routed experts only;
     * its rows stay where the lists put them (after the T * topk routed pairs). With shared_fork they go to a second
     * stream now, as they need only x: they run beside the router (which leaves most SMs idle) and take the slots the
     * routed launches leave; the combine waits for them (ev_join). */
    const int own_shared = s->has_shared && p.own_shared, fork = own_shared && p.shared_fork;
    moe_expert_args ar = a;
    if (own_shared) ar.has_shared = 0;
    if (p.dyn && !ar.has_shared) ar.tickets = W->tickets, ar.dyn = p.dyn;
    if (fork) {
        CK(cudaEventRecord(W->ev_fork, st), "cudaEventRecord(fork)");
        CK(cudaStreamWaitEvent(W->side, W->ev_fork, 0), "cudaStreamWaitEvent(fork)");
        CK(shared_launches(L, W, &p, &a, x, T, K, W->side), "shared expert");
        CK(cudaEventRecord(W->ev_join, W->side), "cudaEventRecord(join)");
    }
    int ks = p.logits_ks > 1 && p.logits_ks <= MOE_LOGITS_KS_MAX && H % (256 * p.logits_ks) == 0 ? p.logits_ks : 1;
    if (L->gate_tc && p.logits_tc) {
        ks = moe_router_logits_tc_parts(T, H, E);
        CK(moe_router_logits_tc_shape(x, L->gate_tc, T, H, E, W->logits, 0, ks, st), "router logits (tensor cores)");
    } else {
        CK(moe_router_logits(x, L->gate, T, H, E, W->logits, p.logits16 ? 1 : INT_MAX, ks, NULL, st), "router logits");
    }
    MARK(1);
    const int nt = moe_tok_tiles(T), lsh = s->has_shared;
    if (p.topk_lists && T <= MOE_FUSED_ROUTER_MAX_T) {   /* one launch for top-k + lists (the "topk" stage reads ~0) */
        MARK(2);
        CK(moe_router_topk_lists(W->logits, ks, T, E, K, s->score_func, L->bias, s->hash ? L->tid2eid : NULL, token_ids,
                                 s->route_scale, W->idx, W->w, lsh, I / MOE_ROWS_PER_ITEM, H / MOE_ROWS_PER_ITEM,
                                 MOE_TOK_CHUNK * nt, W->off, W->pair_tok, W->pair_w, W->inv, W->items_gu,
                                 W->items_dn, 0, p.topk_group ? T : 0, st), "router top-k + lists");
    } else {
        CK(moe_router_topk(W->logits, ks, T, E, K, s->score_func, L->bias, s->hash ? L->tid2eid : NULL,
                           token_ids, s->route_scale, W->idx, W->w, 0, INT_MAX, st), "router top-k");
        MARK(2);
        CK(moe_build_lists(W->idx, W->w, T, E, K, lsh, I / MOE_ROWS_PER_ITEM, H / MOE_ROWS_PER_ITEM,
                           MOE_TOK_CHUNK * nt, W->off, W->pair_tok, W->pair_w, W->inv, W->items_gu, W->items_dn,
                           1, st), "expert lists");
    }
    MARK(3);
    if (own_shared && !fork) CK(shared_launches(L, W, &p, &a, x, T, K, st), "shared expert");
    int inv_ready = 0;   /* moe_combine's: set where the launch before it releases it only after the lists */
    if (p.experts == MOE_EXPERTS_ONE_LAUNCH && T <= MOE_TOK_CHUNK) {   /* the whole expert work in one launch */
        ar.tickets = W->tickets;
        ar.ks_gu = parts_fit(p.ks_gu, H / 128);
        ar.ks_sh = parts_fit(p.ks_sh, H / 128);
        ar.part = W->part;
        ar.pcnt = W->pcnt;
        ar.down_rm = 2;
        ar.early_sh = p.early_sh;
        ar.one_launch = 1;
        ar.fuse_early = inv_ready = 1;   /* the combine launched during the drain */
        CK(moe_experts_fused1(&ar, x, W->off, W->pair_tok, W->pair_w, T, K, W->grid_gu, W->grid_f1s, W->h, W->y, st),
           "experts (one launch)");
        MARK(4);
    } else if (p.experts != MOE_EXPERTS_SEPARATE && ar.tickets) {   /* down items start per expert */
        ar.fuse_early = 1;
        CK(moe_experts_fused1(&ar, x, W->off, W->pair_tok, W->pair_w, T, K, W->grid_gu, W->grid_f1, W->h, W->y, st),
           "experts (fused 1-tile stages)");
        MARK(4);
    } else {
        if (p.nt2_all && T > MOE_TOK_CHUNK) ar.tok1_max = -1;
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
