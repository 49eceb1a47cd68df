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
#include "moe_router_dev.cuh"


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
    router_logits_warp<TOK>(xt, gate + (size_t)e * H + kb, kn, nt, lane, acc);
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
