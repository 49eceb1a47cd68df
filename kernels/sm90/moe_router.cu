/* moe_router.cu — V4 router on the GPU: fp32 logits, score function, top-k on score + bias (ties
 * -> lower expert index) or hash routing, weights, and the per-expert token lists the expert
 * kernels walk. Three launches, no host round trip.
 *
 * Batches of <= 32 tokens fuse top-k and lists into one launch (two launches then). (v11 tried the
 * whole router as one launch, the last logits block doing top-k + lists: slower, removed.)
 *
 * Logits: one warp per expert and 8-token tile, fixed reduction order, so logits and indices are
 * deterministic. Roofline: the gate is H*E*4 bytes (4 MiB for V4-Flash), ~1 us at HBM rate; at
 * batch 512 the fp32 FMAs (1.07 GFLOP) take ~16 us on CUDA cores.
 */
#include <stdint.h>
#include <math.h>
#include "moe_kernels.h"
#include "common/moe_launch.cuh"

#define RT_MAXPL 16    /* experts per lane in top-k: E <= 512 */

/* One warp per (expert, TOK-token tile): lanes stride over K with 16-byte loads of the expert's gate
 * row (all independent, so a warp has its whole row in flight), TOK fp32 accumulators, then a fixed
 * shuffle tree: deterministic. The token tile sits in shared memory (bf16). Small batches use
 * 8-token tiles and 4 warps per block (more blocks streaming the 4 MB gate); large ones 16-token
 * tiles and 16 warps per block (fewer re-reads of the gate and of the tile). */
/* blockIdx.z: K part (gridDim.z parts of H / gridDim.z inputs, a multiple of 256), written to
 * logits + z * T * E; the top-k adds the parts in order (v11: more warps, all loads in flight, for
 * small batches). */
template <int TOK, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) k_router_logits(const uint16_t *x, const float *gate, int T, int H,
                                                             int E, float *logits)
{
    extern __shared__ __align__(16) uint16_t xt[];   /* [nt][H / parts] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = blockIdx.x * WARPS + warp, t0 = blockIdx.y * TOK, nt = min(TOK, T - t0);
    const int kn = H / gridDim.z, kb = blockIdx.z * kn, kc = kn / 8;   /* this part's inputs; 16-byte pieces per row */
    logits += (size_t)blockIdx.z * T * E;
    moe_pdl_wait();
    const int nx = nt * kc;
    for (int i0 = threadIdx.x; i0 < nx; i0 += 8 * blockDim.x) {   /* 8 loads in flight per thread */
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * blockDim.x;
            if (i < nx) v[j] = *(const uint4 *)(x + (size_t)(t0 + i / kc) * H + kb + (size_t)(i % kc) * 8);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int i = i0 + j * blockDim.x;
            if (i < nx) *(uint4 *)(xt + (size_t)i * 8) = v[j];
        }
    }
    __syncthreads();
    moe_pdl_release();
    if (e >= E) return;
    float acc[TOK];
#pragma unroll
    for (int j = 0; j < TOK; j++) acc[j] = 0.f;
    const float *g = gate + (size_t)e * H + kb;
#pragma unroll 8
    for (int k = lane * 8; k < kn; k += 256) {
        const float4 w0 = __ldg((const float4 *)(g + k)), w1 = __ldg((const float4 *)(g + k + 4));
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
        for (int j = 0; j < TOK; j++) {
            if (j < nt) {
                const uint4 v = *(const uint4 *)(xt + (size_t)j * kn + k);
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    acc[j] = fmaf(__uint_as_float(u[h] << 16), w[2 * h], acc[j]);
                    acc[j] = fmaf(__uint_as_float(u[h] & 0xffff0000u), w[2 * h + 1], acc[j]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < TOK; j++)
        for (int o = 16; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < TOK; j++)
            if (j < nt) logits[(size_t)(t0 + j) * E + e] = acc[j];
}

template <int TOK, int WARPS>
static cudaError_t logits_launch(const uint16_t *x, const float *gate, int T, int H, int E, float *logits, int ks,
                                 cudaStream_t st)
{
    static int raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(k_router_logits<TOK, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             TOK * 8192 * 2 > 200 * 1024 ? 200 * 1024 : TOK * 8192 * 2);
        if (e != cudaSuccess) return e;
        raised = 1;
    }
    const size_t smem = (size_t)(T < TOK ? T : TOK) * (H / ks) * 2;
    dim3 grid((E + WARPS - 1) / WARPS, (T + TOK - 1) / TOK, ks);
    return moe_launch(k_router_logits<TOK, WARPS>, grid, dim3(32 * WARPS), smem, st, x, gate, T, H, E, logits);
}

extern "C" cudaError_t moe_router_logits(const uint16_t *x, const float *gate, int T, int H, int E, float *logits,
                                         int tile16_min_t, int ksplit, cudaStream_t st)
{
    if (H % 256 || H > 8192 || ksplit < 1 || H % (256 * ksplit)) return cudaErrorInvalidValue;
    if (T >= tile16_min_t && H <= 4096) return logits_launch<16, 16>(x, gate, T, H, E, logits, ksplit, st);
    if (T > 16) return logits_launch<8, 8>(x, gate, T, H, E, logits, ksplit, st);
    return logits_launch<8, 4>(x, gate, T, H, E, logits, ksplit, st);
}

/* (v, e) beats (v2, e2): higher value, equal values -> lower index */
__device__ __forceinline__ bool rt_better(float v, int e, float v2, int e2)
{
    return v > v2 || (v == v2 && e < e2);
}

/* One level of the per-lane argmax tree: slot i keeps the better of i and i + W. */
template <int W>
__device__ __forceinline__ void rt_tree_level(float v[RT_MAXPL], int id[RT_MAXPL])
{
#pragma unroll
    for (int i = 0; i < W; i++) {
        const bool b = rt_better(v[i + W], id[i + W], v[i], id[i]);
        v[i] = b ? v[i + W] : v[i];
        id[i] = b ? id[i + W] : id[i];
    }
}

/* Scores, selection and weights of token t by one whole warp. */
__device__ __forceinline__ void router_topk_token(const float *part, int ksplit, int T, int t, int lane, int E,
                                                  int topk, int func, const float *bias, const int32_t *tid2eid,
                                                  const int32_t *token_ids, float route_scale, int32_t *idx,
                                                  float *wout)
{
    /* every load is issued before any is used (v11: a runtime-length loop per element had serialised
     * them into ~30 L2 round trips per warp, ~20 us) */
    float lg[RT_MAXPL], sc[RT_MAXPL], sel[RT_MAXPL], bb[RT_MAXPL];
#pragma unroll
    for (int i = 0; i < RT_MAXPL; i++) {
        const int e = lane + 32 * i;
        lg[i] = e < E ? __ldcg(part + (size_t)t * E + e) : -INFINITY;
        bb[i] = bias && e < E ? __ldg(bias + e) : 0.f;
    }
    for (int s = 1; s < ksplit; s++)   /* same order as before: ((p0 + p1) + p2) ... */
#pragma unroll
        for (int i = 0; i < RT_MAXPL; i++)
            if (lane + 32 * i < E) lg[i] += __ldcg(part + ((size_t)s * T + t) * E + lane + 32 * i);
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < RT_MAXPL; i++) mx = fmaxf(mx, lg[i]);
    float sum = 0.f;
    if (func == MOE_SCORE_SOFTMAX) {
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
        for (int i = 0; i < RT_MAXPL; i++) sum += (lane + 32 * i < E) ? expf(lg[i] - mx) : 0.f;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
#pragma unroll
    for (int i = 0; i < RT_MAXPL; i++) {
        const int e = lane + 32 * i;
        const float l = lg[i];
        float s;
        if (func == MOE_SCORE_SOFTMAX) s = expf(l - mx) / sum;
        else if (func == MOE_SCORE_SIGMOID) s = 1.f / (1.f + expf(-l));
        else s = sqrtf(l > 20.f ? l : log1pf(expf(l)));   /* torch softplus, threshold 20 */
        sc[i] = e < E ? s : 0.f;
        sel[i] = e < E ? s + bb[i] : -INFINITY;
    }
    int my_e = -1;
    float my_w = 0.f;
    if (tid2eid) {
        const int tok = token_ids ? token_ids[t] : t;
        for (int k = 0; k < topk; k++) {
            const int e = tid2eid[(size_t)tok * topk + k];
            float v = 0.f;
#pragma unroll
            for (int i = 0; i < RT_MAXPL; i++)
                if (e >= 0 && (e >> 5) == i) v = sc[i];
            v = __shfl_sync(0xffffffffu, v, e & 31);
            if (lane == k) { my_e = e; my_w = v; }
        }
    } else {
        unsigned taken = 0;   /* bit i: expert lane + 32 i already picked */
        for (int k = 0; k < topk; k++) {
            /* the lane's best by a 4-level tree (not a 16-long chain); invalid / taken slots are -inf and
             * lose to every real score (scores are finite) */
            float v[RT_MAXPL];
            int id[RT_MAXPL];
#pragma unroll
            for (int i = 0; i < RT_MAXPL; i++) {
                id[i] = lane + 32 * i;
                v[i] = id[i] < E && !(taken >> i & 1u) ? sel[i] : -INFINITY;
            }
            rt_tree_level<8>(v, id);
            rt_tree_level<4>(v, id);
            rt_tree_level<2>(v, id);
            rt_tree_level<1>(v, id);
            float bv = v[0];
            int be = id[0];
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oe = __shfl_xor_sync(0xffffffffu, be, o);
                if (rt_better(ov, oe, bv, be)) { bv = ov; be = oe; }
            }
            float ms = 0.f;   /* the winner's score, from the lane that holds it (an exact multiply-add select:
                                 a plain select became an indexed load that put sc[] in local memory) */
#pragma unroll
            for (int i = 0; i < RT_MAXPL; i++) ms = fmaf(sc[i], (be >> 5) == i ? 1.f : 0.f, ms);
            const float bs = __shfl_sync(0xffffffffu, ms, be & 31);
            if ((be & 31) == lane) taken |= 1u << (be >> 5);
            if (lane == k) { my_e = be; my_w = bs; }
        }
    }
    float ws = lane < topk ? my_w : 0.f;
    for (int o = 16; o > 0; o >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, o);
    if (lane < topk) {
        float w = my_w;
        if (func != MOE_SCORE_SOFTMAX) w = w / ws;
        idx[(size_t)t * topk + lane] = my_e;
        wout[(size_t)t * topk + lane] = w * route_scale;
    }
}

/* One warp per token. */
__global__ void k_router_topk(const float *part, int ksplit, int T, int E, int topk, int func, const float *bias,
                              const int32_t *tid2eid, const int32_t *token_ids, float route_scale, int32_t *idx,
                              float *wout)
{
    const int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    moe_pdl_wait();
    moe_pdl_release();
    if (t >= T) return;
    router_topk_token(part, ksplit, T, t, lane, E, topk, func, bias, tid2eid, token_ids, route_scale, idx, wout);
}

extern "C" cudaError_t moe_router_topk(const float *part, int ksplit, int T, int E, int topk, int score_func,
                                       const float *bias, const int32_t *tid2eid, const int32_t *token_ids,
                                       float route_scale, int32_t *idx, float *w, cudaStream_t st)
{
    if (E > 32 * RT_MAXPL || topk < 1 || topk > 32 || topk > E) return cudaErrorInvalidValue;
    const int threads = 256, blocks = (T * 32 + threads - 1) / threads;
    return moe_launch(k_router_topk, dim3(blocks), dim3(threads), 0, st, part, ksplit, T, E, topk, score_func, bias,
                      tid2eid, token_ids, route_scale, idx, w);
}

/* Exclusive scan of n ints in smem by one warp; returns the total. */
__device__ static int warp_scan(int *v, int n, int lane)
{
    int carry = 0;
    for (int base = 0; base < n; base += 32) {
        const int i = base + lane;
        const int x = i < n ? v[i] : 0;
        int inc = x;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += y;
        }
        if (i < n) v[i] = carry + inc - x;
        carry += __shfl_sync(0xffffffffu, inc, 31);
    }
    return carry;
}

/* Lists body, run by every thread of one block. smem: cnt[E+1], fill[E+1], scan arrays 3 x (E+2). */
__device__ __forceinline__ void build_lists_block(int *sm, const int32_t *idx, const float *w, int T, int E, int topk,
                                                  int has_shared, int rg_gu, int rg_dn, int tok_chunk, int32_t *off,
                                                  int32_t *pair_tok, float *pair_w, int32_t *inv, int32_t *items_gu,
                                                  int32_t *items_dn)
{
    const int nE = E + (has_shared ? 1 : 0);
    int *cnt = sm, *fill = sm + (E + 2), *so = sm + 2 * (E + 2), *sg = sm + 3 * (E + 2), *sd = sm + 4 * (E + 2);
    for (int i = threadIdx.x; i < E + 2; i += blockDim.x) cnt[i] = 0, fill[i] = 0;
    __syncthreads();
    const int P = T * topk;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int e = idx[i];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (has_shared && threadIdx.x == 0) cnt[E] = T;
    __syncthreads();
    for (int i = threadIdx.x; i < nE + 1; i += blockDim.x) {
        const int c = i < nE ? cnt[i] : 0, ch = (c + tok_chunk - 1) / tok_chunk;
        so[i] = c;
        /* the shared expert's items are single 16-row tiles whose K the block's 4 warps split */
        const int ks = (has_shared && i == E) ? MOE_WARPS : 1;
        sg[i] = ch * rg_gu * ks;
        sd[i] = ch * rg_dn * ks;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) warp_scan(so, nE + 1, lane);
    if (warp == 1) warp_scan(sg, nE + 1, lane);
    if (warp == 2) warp_scan(sd, nE + 1, lane);
    __syncthreads();
    for (int i = threadIdx.x; i < nE + 1; i += blockDim.x) {
        off[i] = so[i];
        items_gu[i] = sg[i];
        items_dn[i] = sd[i];
    }
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int e = idx[i];
        if (e < 0 || e >= E) { inv[i] = -1; continue; }
        const int pos = so[e] + atomicAdd(&fill[e], 1);
        pair_tok[pos] = i / topk;
        pair_w[pos] = w[i];
        inv[i] = pos;
    }
    if (has_shared)
        for (int t = threadIdx.x; t < T; t += blockDim.x) {
            pair_tok[so[E] + t] = t;
            pair_w[so[E] + t] = 1.f;
        }
}

__global__ void __launch_bounds__(1024, 1) k_build_lists(const int32_t *idx, const float *w, int T, int E, int topk,
                                                         int has_shared, int rg_gu, int rg_dn, int tok_chunk,
                                                         int32_t *off, int32_t *pair_tok, float *pair_w, int32_t *inv,
                                                         int32_t *items_gu, int32_t *items_dn)
{
    extern __shared__ int sm[];
    moe_pdl_wait();
    moe_pdl_release();
    build_lists_block(sm, idx, w, T, E, topk, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv, items_gu,
                      items_dn);
}

/* Small batches (T <= 32): top-k (warp w: tokens w, w + 16) and the lists in one block, one launch fewer in
 * the chain. idx/w go through global memory; __syncthreads makes them visible to the whole block. */
__global__ void __launch_bounds__(512, 1) k_topk_lists(const float *logits, int ksplit, int T, int E, int topk, int func,
                                                        const float *bias, const int32_t *tid2eid,
                                                        const int32_t *token_ids, float route_scale, int32_t *idx,
                                                        float *w, int has_shared, int rg_gu, int rg_dn, int tok_chunk,
                                                        int32_t *off, int32_t *pair_tok, float *pair_w, int32_t *inv,
                                                        int32_t *items_gu, int32_t *items_dn)
{
    extern __shared__ int sm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    moe_pdl_wait();
    moe_pdl_release();
    for (int t = warp; t < T; t += blockDim.x >> 5)   /* 512 threads (not 1024): the top-k needs > 64 registers */
        router_topk_token(logits, ksplit, T, t, lane, E, topk, func, bias, tid2eid, token_ids, route_scale, idx, w);
    __syncthreads();
    build_lists_block(sm, idx, w, T, E, topk, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv, items_gu,
                      items_dn);
}

extern "C" cudaError_t moe_build_lists(const int32_t *idx, const float *w, int T, int E, int topk, int has_shared,
                                       int rg_gu, int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok,
                                       float *pair_w,
                                       int32_t *inv, int32_t *items_gu, int32_t *items_dn, cudaStream_t st)
{
    const size_t smem = 5 * (size_t)(E + 2) * sizeof(int);
    if (smem > 48 * 1024) return cudaErrorInvalidValue;
    return moe_launch(k_build_lists, dim3(1), dim3(1024), smem, st, idx, w, T, E, topk, has_shared, rg_gu, rg_dn,
                      tok_chunk, off,
                      pair_tok, pair_w, inv, items_gu, items_dn);
}

extern "C" cudaError_t moe_router_topk_lists(const float *logits, int ksplit, int T, int E, int topk, int score_func,
                                             const float *bias, const int32_t *tid2eid, const int32_t *token_ids,
                                             float route_scale, int32_t *idx, float *w, int has_shared, int rg_gu,
                                             int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok, float *pair_w,
                                             int32_t *inv, int32_t *items_gu, int32_t *items_dn, cudaStream_t st)
{
    const size_t smem = 5 * (size_t)(E + 2) * sizeof(int);
    if (T < 1 || T > MOE_FUSED_ROUTER_MAX_T || E > 32 * RT_MAXPL || topk < 1 || topk > 32 || topk > E ||
        smem > 48 * 1024)
        return cudaErrorInvalidValue;
    return moe_launch(k_topk_lists, dim3(1), dim3(512), smem, st, logits, ksplit, T, E, topk, score_func, bias, tid2eid,
                      token_ids, route_scale, idx, w, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv,
                      items_gu, items_dn);
}
