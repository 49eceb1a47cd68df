/* moe_router.cu — V4 router on the GPU: fp32 logits, score function, top-k on score + bias (ties
 * -> lower expert index) or hash routing, weights, and the per-expert token lists the expert
 * kernels walk. Three launches, no host round trip.
 *
 * Batches of <= 4 tokens (moe_plan.topk_lists; v9-32, 8) fuse top-k and lists into one launch (two
 * launches then); above it each token's top-k is one block of 8 warps. (tried the
 * whole router as one launch, the last logits block doing top-k + lists: slower, removed.)
 *
 * Logits: one warp per expert and 8-token tile, fixed reduction order, so logits and indices are
 * deterministic. Roofline: the gate is H*E*4 bytes (4 MiB for V4-Flash), ~1 us at HBM rate; at
 * batch 512 the fp32 FMAs (1.07 GFLOP) take ~16 us on CUDA cores. From batch 8 (32; moe_cuda_ws
 * logits_tc_min_t) the logits run on tensor cores instead (k_router_logits_tc, exact bf16 x 3
 * split of the gate, also deterministic): events 31 -> 12 us at batch 64, ~100 -> 34 us at 512.
 */
#include <stdint.h>
#include <math.h>
#include "common/dev_flag.cuh"
#include "moe_kernels.h"
#include "common/moe_launch.cuh"
#include "moe_router_dev.cuh"
#include "common/moe_fp4_common.cuh"
#include "common/moe_l2.cuh"
#include "common/moe_trace.cuh"


/* One warp per (expert, TOK-token tile): lanes stride over K with 16-byte loads of the expert's gate
 * row (all independent, so a warp has its whole row in flight), TOK fp32 accumulators, then a fixed
 * shuffle tree: deterministic. The token tile sits in shared memory (bf16). Small batches use
 * 8-token tiles and 4 warps per block (more blocks streaming the 4 MB gate); large ones 16-token
 * tiles and 16 warps per block (fewer re-reads of the gate and of the tile). */
/* blockIdx.z: K part (gridDim.z parts of H / gridDim.z inputs, a multiple of 256), written to
 * logits + z * T * E; the top-k adds the parts in order (more warps, all loads in flight, for
 * small batches). */
/* pf: warp 0 of every block first asks L2 for its pieces of the prefetch ranges (one per lane). */
template <int TOK, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) k_router_logits(const uint16_t *x, const float *gate, int T, int H,
                                                             int E, float *logits, moe_l2_ranges pf)
{
    const MoeTrace trace_(MOE_TR_LOGITS);
    extern __shared__ __align__(16) uint16_t xt[];   /* [nt][H / parts] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 0 && (pf.p[0] || pf.p[1] || pf.p[2])) {
        const int nb = gridDim.x * gridDim.y * gridDim.z, b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        const uint64_t pol = moe_l2_policy(pf.last);
#pragma unroll
        for (int r = 0; r < 3; r++) moe_l2_prefetch_piece(pf.p[r], pf.n[r], b * 32 + lane, nb * 32, pol);
    }
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
                                 const moe_l2_ranges &pf, cudaStream_t st)
{
    static unsigned char raiseds[DEV_FLAG_MAX];   /* per device: the limit is the current device's */
    unsigned char *raised = dev_flag(raiseds);
    if (!raised || !*raised) {
        cudaError_t e = cudaFuncSetAttribute(k_router_logits<TOK, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             TOK * 8192 * 2 > 200 * 1024 ? 200 * 1024 : TOK * 8192 * 2);
        if (e != cudaSuccess) return e;
        if (raised) *raised = 1;
    }
    const size_t smem = (size_t)(T < TOK ? T : TOK) * (H / ks) * 2;
    dim3 grid((E + WARPS - 1) / WARPS, (T + TOK - 1) / TOK, ks);
    return moe_launch(k_router_logits<TOK, WARPS>, grid, dim3(32 * WARPS), smem, st, x, gate, T, H, E, logits, pf);
}

extern "C" cudaError_t moe_router_logits(const uint16_t *x, const float *gate, int T, int H, int E, float *logits,
                                         int tile16_min_t, int ksplit, const moe_l2_ranges *pf, cudaStream_t st)
{
    if (H % 256 || H > 8192 || ksplit < 1 || H % (256 * ksplit)) return cudaErrorInvalidValue;
    const moe_l2_ranges none = {}, &p = pf ? *pf : none;
    if (T >= tile16_min_t && H <= 4096) return logits_launch<16, 16>(x, gate, T, H, E, logits, ksplit, p, st);
    if (T > 16) return logits_launch<8, 8>(x, gate, T, H, E, logits, ksplit, p, st);
    return logits_launch<8, 4>(x, gate, T, H, E, logits, ksplit, p, st);
}

/* ---- Router logits on tensor cores, for the larger batches.
 * The fp32 gate is split at load time into three bf16 planes hi + mid + lo that sum to it exactly
 * (each takes the next 8 significant bits; moe_cuda.c), so x . gate = x . hi + x . mid + x . lo with
 * every product exact in fp32 (bf16 x bf16); mma.sync m16n8k16 adds them with fp32 accumulation: the
 * gate's experts are the M side, tokens the N side. Accumulation order differs from the CUDA-core
 * kernel (like any fp32 summation order), not the products.
 * Layout of gate_tc (moe_kernels.h): per 16-expert tile and 32-input block, 6 fragments (plane p,
 * k-step s) of 32 lanes x 16 bytes, each lane's a0..a3 of mma's A operand; inputs are permuted inside
 * the 32-input block so that lane (g, q)'s 16-byte load of x[token][32 kb + 8 q ..] is its B operand
 * for both k-steps (step s uses inputs 8 q + 4 s .. + 3). Block: 8 warps split the part's K, partial
 * sums added in warp order through shared memory (deterministic); blockIdx = (expert tile, token
 * group of 8 * NTT, K part). */
template <int NTT>
__global__ void __launch_bounds__(256) k_router_logits_tc(const uint16_t *x, const uint4 *gate_tc, int T, int H, int E,
                                                          float *logits)
{
    const MoeTrace trace_(MOE_TR_LOGITS);
    __shared__ float red[8][NTT * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int et = blockIdx.x, tb = blockIdx.y * 8 * NTT, nkb = H / 32;
    const int kbn = nkb / gridDim.z, kb0 = blockIdx.z * kbn + warp * (kbn / 8), kb1 = kb0 + kbn / 8;
    logits += (size_t)blockIdx.z * T * E;
    const uint16_t *xr[NTT];
#pragma unroll
    for (int j = 0; j < NTT; j++) xr[j] = x + (size_t)min(tb + j * 8 + g, T - 1) * H + 8 * q;
    const uint4 *gp = gate_tc + (size_t)et * nkb * 6 * 32 + lane;
    float ah[NTT][4], al[NTT][4];   /* hi plane; mid + lo planes */
#pragma unroll
    for (int j = 0; j < NTT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) ah[j][i] = al[j][i] = 0.f;
    moe_pdl_wait();
#pragma unroll 2
    for (int kb = kb0; kb < kb1; kb++) {
        uint4 a[6], b[NTT];
#pragma unroll
        for (int f = 0; f < 6; f++) a[f] = __ldg(gp + ((size_t)kb * 6 + f) * 32);
#pragma unroll
        for (int j = 0; j < NTT; j++) b[j] = __ldg((const uint4 *)(xr[j] + kb * 32));
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int j = 0; j < NTT; j++) {
                const uint32_t b0 = s ? b[j].z : b[j].x, b1 = s ? b[j].w : b[j].y;
                mma_bf16(al[j], a[4 + s].x, a[4 + s].y, a[4 + s].z, a[4 + s].w, b0, b1);
                mma_bf16(al[j], a[2 + s].x, a[2 + s].y, a[2 + s].z, a[2 + s].w, b0, b1);
                mma_bf16(ah[j], a[s].x, a[s].y, a[s].z, a[s].w, b0, b1);
            }
    }
    moe_pdl_release();
#pragma unroll
    for (int j = 0; j < NTT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][j * 4 + i][lane] = ah[j][i] + al[j][i];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int j = 0; j < NTT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v = red[0][j * 4 + i][lane];
            for (int w = 1; w < 8; w++) v += red[w][j * 4 + i][lane];
            const int e = et * 16 + g + (i >= 2 ? 8 : 0), t = tb + j * 8 + 2 * q + (i & 1);
            if (t < T) logits[(size_t)t * E + e] = v;
        }
}

/* n-tiles of 8 tokens per warp: fewer re-reads of the gate tile from L2 as the batch grows */
static int tc_ntt(int T) { return T <= 32 ? 1 : (T <= 128 ? 2 : 4); }

extern "C" int moe_router_logits_tc_parts(int T, int H, int E)
{
    const int ntt = tc_ntt(T), groups = (T + 8 * ntt - 1) / (8 * ntt);
    int ks = 1;
    while (ks < 4 && (E / 16) * groups * ks < 256 && H % (256 * ks * 2) == 0) ks *= 2;
    return ks;
}

/* ntt: n-tiles of 8 tokens per block (1, 2 or 4; 0: tc_ntt's choice by T). (`sluice-bench moe`): with
 * moe_router_logits_tc_shape a caller picks ntt and ksplit (up to MOE_LOGITS_KS_MAX 8), which set the steps each
 * warp walks ((H / 32) / (8 ksplit) 32-input blocks) and the blocks' registers (ntt 4: 102, 2: 60). */
extern "C" cudaError_t moe_router_logits_tc_shape(const uint16_t *x, const uint16_t *gate_tc, int T, int H, int E,
                                                  float *logits, int ntt, int ksplit, cudaStream_t st)
{
    if (ntt == 0) ntt = tc_ntt(T);
    if (T < 1 || E % 16 || H % 256 || ksplit < 1 || H % (256 * ksplit) || (ntt != 1 && ntt != 2 && ntt != 4))
        return cudaErrorInvalidValue;
    const dim3 grid(E / 16, (T + 8 * ntt - 1) / (8 * ntt), ksplit);
    const uint4 *g = (const uint4 *)gate_tc;
    if (ntt == 1) return moe_launch(k_router_logits_tc<1>, grid, dim3(256), 0, st, x, g, T, H, E, logits);
    if (ntt == 2) return moe_launch(k_router_logits_tc<2>, grid, dim3(256), 0, st, x, g, T, H, E, logits);
    return moe_launch(k_router_logits_tc<4>, grid, dim3(256), 0, st, x, g, T, H, E, logits);
}

extern "C" cudaError_t moe_router_logits_tc(const uint16_t *x, const uint16_t *gate_tc, int T, int H, int E,
                                            float *logits, int ksplit, cudaStream_t st)
{
    return moe_router_logits_tc_shape(x, gate_tc, T, H, E, logits, 0, ksplit, st);
}

/* One warp per token. PL: experts per lane (8 for E <= 256: half the registers and selects of 16). */
template <int PL>
__global__ void k_router_topk(const float *part, int ksplit, int T, int E, int topk, int func, const float *bias,
                              const int32_t *tid2eid, const int32_t *token_ids, float route_scale, int32_t *idx,
                              float *wout)
{
    const MoeTrace trace_(MOE_TR_TOPK);
    const int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    moe_pdl_wait();
    moe_pdl_release();
    if (t >= T) return;
    router_topk_token<PL>(part, ksplit, T, t, lane, E, topk, func, bias, tid2eid, token_ids, route_scale, idx, wout);
}

/* above the top-k + lists launch (32 tokens) the top-k was one warp per token (11 us at 64
 * tokens after the logits, 17 at 256); here each token's top-k is one block of RT_GROUP warps (router_topk_group_local /
 * _merge, as k_topk_lists takes up to grp tokens): same experts, order and weights as router_topk_token. */
__global__ void __launch_bounds__(32 * RT_GROUP) k_router_topk_grouped(const float *logits, int ksplit, int T, int E,
                                                                      int topk, int func, const float *bias,
                                                                      float route_scale, int32_t *idx, float *w)
{
    const MoeTrace trace_(MOE_TR_TOPK);
    __shared__ unsigned cand[RT_GROUP * RT_GROUP_MAXK * 3];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    moe_pdl_wait();
    moe_pdl_release();
    router_topk_group_local(logits, ksplit, T, blockIdx.x, warp, lane, E, topk, func, bias, cand);
    __syncthreads();
    if (warp == 0) router_topk_group_merge(cand, blockIdx.x, lane, topk, func, route_scale, idx, w);
}

/* The largest dynamic shared memory kernel k may be launched with raised to at least n bytes: a host call only
 * the first time a kernel asks for more than it has (as logits_launch raises its own once), not on every launch.
 * The top-k launchers' kernels (4) fit the table; a kernel beyond it is raised on every call. */
static cudaError_t allow_smem(const void *k, size_t n)
{
    static const void *fns[DEV_FLAG_MAX][4];   /* per device: the limit is the current device's */
    static size_t raiseds[DEV_FLAG_MAX][4];
    if (n <= 48 * 1024) return cudaSuccess;
    const int d = dev_index();
    const void **fn = d >= 0 ? fns[d] : NULL;
    size_t *raised = d >= 0 ? raiseds[d] : NULL;
    int i = 0;
    while (fn && i < 4 && fn[i] && fn[i] != k) i++;
    if (fn && i < 4 && fn[i] == k && raised[i] >= n) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)n);
    if (e == cudaSuccess && fn && i < 4) fn[i] = k, raised[i] = n;
    return e;
}

extern "C" cudaError_t moe_router_topk(const float *part, int ksplit, int T, int E, int topk, int score_func,
                                       const float *bias, const int32_t *tid2eid, const int32_t *token_ids,
                                       float route_scale, int32_t *idx, float *w, int excl, int grp, cudaStream_t st)
{
    if (E > 32 * RT_MAXPL || topk < 1 || topk > 32 || topk > E || excl < 0 || excl > MOE_TOPK_EXCL_MAX)
        return cudaErrorInvalidValue;
    if (!excl && moe_topk_grouped(T, E, topk, score_func, tid2eid, grp, T * RT_GROUP))   /* */
        return moe_launch(k_router_topk_grouped, dim3(T), dim3(32 * RT_GROUP), 0, st, part, ksplit, T, E, topk,
                          score_func, bias, route_scale, idx, w);
    const int threads = 256, blocks = (T * 32 + threads - 1) / threads;
    const auto k = E <= 256 ? k_router_topk<8> : k_router_topk<RT_MAXPL>;
    const cudaError_t e = allow_smem((const void *)k, (size_t)excl);
    if (e != cudaSuccess) return e;
    return moe_launch(k, dim3(blocks), dim3(threads), (size_t)excl, st, part, ksplit, T, E, topk, score_func, bias,
                      tid2eid, token_ids, route_scale, idx, w);
}

/* U (moe_build_lists runs): build_lists_block's register pairs and run scans */
template <int U>
__global__ void __launch_bounds__(1024, 1) k_build_lists(const int32_t *idx, const float *w, int T, int E, int topk,
                                                         int has_shared, int rg_gu, int rg_dn, int tok_chunk,
                                                         int32_t *off, int32_t *pair_tok, float *pair_w, int32_t *inv,
                                                         int32_t *items_gu, int32_t *items_dn)
{
    const MoeTrace trace_(MOE_TR_LISTS);
    extern __shared__ int sm[];
    moe_pdl_wait();
    moe_pdl_release();
    build_lists_block<U>(sm, idx, w, T, E, topk, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv,
                         items_gu, items_dn);
}

/* Small batches (T <= 32): top-k (warp w: tokens w, w + 16) and the lists in one block, one launch fewer in
 * the chain. idx/w go through global memory; __syncthreads makes them visible to the whole block. */
/* GONLY: 1024 threads, grouped only (moe_plan.topk_group 3-4: 8 warps per token for up to 4 tokens;
 * the one-warp top-k needs > 64 registers, so it is not compiled in this form). */
template <int PL, int GONLY>
__global__ void __launch_bounds__(GONLY ? 1024 : 512, 1)
    k_topk_lists(const float *logits, int ksplit, int T, int E, int topk, int func, const float *bias,
                 const int32_t *tid2eid, const int32_t *token_ids, float route_scale, int32_t *idx, float *w,
                 int has_shared, int rg_gu, int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok, float *pair_w,
                 int32_t *inv, int32_t *items_gu, int32_t *items_dn, int grp)
{
    const MoeTrace trace_(MOE_TR_TOPK_LISTS);
    extern __shared__ int sm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    moe_pdl_wait();
    moe_pdl_release();
    if (PL == 8 && (GONLY || moe_topk_grouped(T, E, topk, func, tid2eid, grp, (int)blockDim.x >> 5))) {   /* E <= 256 */
        /* RT_GROUP warps per token; the candidates in sm (reused by the lists after the next barrier) */
        const int t = warp / RT_GROUP, gw = warp % RT_GROUP;
        unsigned *cand = (unsigned *)sm + (size_t)t * RT_GROUP * RT_GROUP_MAXK * 3;
        if (t < T) router_topk_group_local(logits, ksplit, T, t, gw, lane, E, topk, func, bias, cand);
        __syncthreads();
        if (t < T && gw == 0) router_topk_group_merge(cand, t, lane, topk, func, route_scale, idx, w);
    } else if constexpr (!GONLY) {
        for (int t = warp; t < T; t += blockDim.x >> 5)   /* 512 threads (not 1024): the top-k needs > 64 registers */
            router_topk_token<PL>(logits, ksplit, T, t, lane, E, topk, func, bias, tid2eid, token_ids, route_scale, idx,
                                  w);
    }
    __syncthreads();
    build_lists_block(sm, idx, w, T, E, topk, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv, items_gu,
                      items_dn);
}

extern "C" cudaError_t moe_build_lists(const int32_t *idx, const float *w, int T, int E, int topk, int has_shared,
                                       int rg_gu, int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok,
                                       float *pair_w,
                                       int32_t *inv, int32_t *items_gu, int32_t *items_dn, int runs, cudaStream_t st)
{
    const size_t smem = 5 * (size_t)(E + 2) * sizeof(int);
    if (smem > 48 * 1024) return cudaErrorInvalidValue;
    return moe_launch(runs ? k_build_lists<3> : k_build_lists<0>, dim3(1), dim3(1024), smem, st, idx, w, T, E, topk,
                      has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok, pair_w, inv, items_gu, items_dn);
}

extern "C" cudaError_t moe_router_topk_lists(const float *logits, int ksplit, int T, int E, int topk, int score_func,
                                             const float *bias, const int32_t *tid2eid, const int32_t *token_ids,
                                             float route_scale, int32_t *idx, float *w, int has_shared, int rg_gu,
                                             int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok, float *pair_w,
                                             int32_t *inv, int32_t *items_gu, int32_t *items_dn, int excl, int grp,
                                             cudaStream_t st)
{
    size_t smem = 5 * (size_t)(E + 2) * sizeof(int);
    /* grouped: in the 512-thread block up to 2 tokens, in the 1024-thread one up to 4 */
    const bool g16 = moe_topk_grouped(T, E, topk, score_func, tid2eid, grp, 16),
               g32 = !g16 && moe_topk_grouped(T, E, topk, score_func, tid2eid, grp, 32);
    if (g16 || g32) {   /* the candidates of the grouped top-k */
        const size_t c = (size_t)T * RT_GROUP * RT_GROUP_MAXK * 3 * sizeof(unsigned);
        smem = c > smem ? c : smem;
    }
    if (T < 1 || T > MOE_FUSED_ROUTER_MAX_T || E > 32 * RT_MAXPL || topk < 1 || topk > 32 || topk > E ||
        smem > 48 * 1024 || excl < 0 || excl > MOE_TOPK_EXCL_MAX)
        return cudaErrorInvalidValue;
    const auto k = g32 ? k_topk_lists<8, 1> : E <= 256 ? k_topk_lists<8, 0> : k_topk_lists<RT_MAXPL, 0>;
    const cudaError_t e = allow_smem((const void *)k, smem + (size_t)excl);
    if (e != cudaSuccess) return e;
    return moe_launch(k, dim3(1), dim3(g32 ? 1024 : 512), smem + (size_t)excl, st, logits, ksplit, T, E, topk,
                      score_func, bias, tid2eid, token_ids, route_scale, idx, w, has_shared, rg_gu, rg_dn, tok_chunk, off, pair_tok,
                      pair_w, inv, items_gu, items_dn, grp);
}

/* moe_trace_set's half for this module (moe_expert.cu calls it) */
extern "C" cudaError_t moe_trace_set_router(unsigned long long *buf)
{
    return cudaMemcpyToSymbol(g_moe_trace, &buf, sizeof buf);
}

extern "C" cudaError_t moe_router_carveout(int pct)
{
    const void *fs[] = {
        (const void *)k_router_logits<8, 4>, (const void *)k_router_logits<8, 8>, (const void *)k_router_logits<16, 16>,
        (const void *)k_router_logits_tc<1>, (const void *)k_router_logits_tc<2>, (const void *)k_router_logits_tc<4>,
        (const void *)k_router_topk<8>, (const void *)k_router_topk<RT_MAXPL>, (const void *)k_build_lists<0>,
        (const void *)k_build_lists<3>, (const void *)k_topk_lists<8, 0>, (const void *)k_topk_lists<RT_MAXPL, 0>,
        (const void *)k_topk_lists<8, 1>, (const void *)k_router_topk_grouped,
    };
    for (const void *f : fs) {
        const cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
