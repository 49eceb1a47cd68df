/* moe_fused.cu — the whole MoE layer for small batches (T <= 8 tokens) in one persistent launch:
 * router logits, top-k + lists, the FP8 shared expert and the routed FP4 experts' gate/up and down,
 * ordered by dependency counters in global memory instead of kernel boundaries. moe_combine follows
 * as a second (PDL) launch.
 *
 * Why: at batch 1 the layer reads 114 MB (25 us at the HBM ceiling), but the five-launch chain
 * (logits | top-k + lists | gate/up | down | combine) spent ~70 us, most of it in launch boundaries,
 * pipeline ramps and the router's latency with HBM idle (bench/NOTES.md, v9-v12). Here the shared
 * expert (a quarter of the bytes, independent of routing) streams while the router runs, the down
 * items stream their weights while gate/up is still running and start on an expert as soon as that
 * expert's h is complete, and there is no boundary between the stages.
 *
 * Status (v13, bench/NOTES.md): correct (tests/gpu/test_moe_gpu runs it at batches 1-8 for NVFP4,
 * MXFP4, hash routing, no shared expert, skewed routing) but measured no faster than the launch
 * sequence: 3-5 % slower at batches 1-2, equal at 4, within +-3 % at 8, so it is opt-in
 * (moe_cuda_ws.fused_max_t, default 0). Why, from its own timeline (sluice-bench moe --trace) and ncu:
 * the router still takes ~18 us (logits ~10, per-block top-k + lists ~8) because every dependent
 * memory round trip costs several us while the shared expert streams; the routed phase delivers
 * only ~1.5-2.5 TB/s; and with five different loops resident on one SM the instruction cache
 * misses (no_instruction is the top stall, ~175 KB of code even with MOE_ROLLED).
 *
 * Work: one sequence of block items; a block takes the next ticket from a global counter (fetched one
 * item ahead, so the atomic's round trip is hidden) — v13 runs 1-3 used a static stride and lost up to
 * half the routed gate/up time to the last partial wave:
 *   [L]  router logits: (4 experts, K part) per item, the gate loads issued before the x part is
 *        staged in shared memory; each L item counts one arrival;
 *   [SG] shared gate/up: one 16-row tile (gate and up rows) per item, K split over the 4 warps;
 *   [SD] shared down: one 16-row tile, K split; waits until every SG item is done (after the RG
 *        items in ticket order);
 *   [RG] routed gate/up: (touched expert, 16-row tile) with K split over the 4 warps (short items,
 *        so the last wave is short); opt bit 0: (touched expert, 64-row group), a tile per warp, when
 *        there are at least as many such items as blocks (bits 0+1: always; tests);
 *   [RD] routed down: (touched expert, 64-row group); each warp issues its first weight chunks, then
 *        waits until all of its expert's gate/up tiles are done.
 * Routing: a block that reaches its first routed item waits until every L item has arrived, then
 * computes the top-k of all T tokens itself (a warp per token) and builds the lists in its own
 * shared memory: touched experts in increasing order, pairs sorted by expert then token (so every
 * block derives the same pair numbering); block 0 also writes them to global memory (idx, w, off,
 * pair_tok, pair_w, inv) for moe_combine and the callers. No block waits for another's top-k:
 * v13 run 2 had one block do it and raise a flag, and under the shared expert's streaming that chain
 * of dependent memory round trips took ~25 us.
 * A block waits only on items with smaller tickets, and tickets are only held by running blocks
 * (a block holds its current ticket and the next), so the smallest unfinished ticket can always
 * proceed: no deadlock, whatever number of blocks is resident.
 * Counters (moe_fused_args.sync, each on its own 128-byte line: MOE_FUSED_SYNC_LINE words apart):
 * line 0 L items done, 1 ticket counter, 2 blocks exited, 3 + e 16-row tiles of expert e's gate/up
 * done (e = E: the shared expert). The last block to exit sets them back to zero, so every launch
 * (and graph replay) starts from zero.
 * Memory order: a producer warp's lanes each fence (device scope) after writing h, then one lane adds
 * to the counter; a consumer block's thread 0 polls (moe_wait_count), the block passes a barrier and
 * reads h / the logits through L2 (ld.cg), never through the read-only path. (v13 run 1: every warp
 * polling, with the counters in one line, held the router's arrival atomics up for ~40 us.)
 * Reduction: the same as the unfused kernels (each output element has one owner, moe_combine adds in
 * a fixed order), so results are deterministic and equal to the unfused path's up to the router's
 * K-part summation (the same parts as moe_router_logits with that ks).
 */
#include <stdint.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"
#include "common/moe_launch.cuh"
#include "common/moe_trace.cuh"   /* moe_now */
#include "moe_expert_dev.cuh"
#include "moe_router_dev.cuh"

#define FUSED_TRACE_ITEMS 8   /* trace records per block: {start ns, (end - start) ns | kind << 32} */
#define FUSED_PL (MOE_FUSED_MAX_E / 32)   /* experts per lane in the top-k */
#define FUSED_MAXP 256        /* routed pairs T * topk */
#define SY(i) (a.sync + (size_t)(i) * MOE_FUSED_SYNC_LINE)

/* A block's lists, in shared memory after the ring. */
struct FusedRoute {
    int exp[FUSED_MAXP];                       /* touched expert k: e | first pair << 9 | tokens << 18 */
    float w[FUSED_MAXP + MOE_FUSED_MAX_T];     /* pair -> routing weight (shared pairs: 1) */
    uint8_t tok[FUSED_MAXP + MOE_FUSED_MAX_T]; /* pair -> token */
    int n;                                     /* touched experts */
};

/* Marks one 16-row tile of expert slot e's gate/up done (after this lane's h writes). */
__device__ __forceinline__ void fused_signal(unsigned *ctr, int lane)
{
    __threadfence();
    __syncwarp();
    if (lane == 0) atomicAdd(ctr, 1u);
}

/* Router logits item: experts 4 * (it / ks) + warp, K part it % ks (kn = H / ks <= 1024 inputs).
 * Not inlined: its 32 registers of gate values would otherwise push the kernel's hot loops to spill. */
__device__ __noinline__ void fused_logits(const uint16_t *x, const float *gate, float *logits, unsigned *arrivals,
                                          int E, int H, int T, int ks, int it, uint8_t *smem, unsigned long long *tr)
{
    const int kn = H / ks, p = it % ks, kb = p * kn, kc = kn / 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = (it / ks) * MOE_WARPS + warp;
    float4 gv[8];   /* this lane's gate values, loaded before (and while) x is staged */
    const float *g = gate + (size_t)(e < E ? e : 0) * H + kb + lane * 8;
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (i * 256 < kn) gv[2 * i] = __ldg((const float4 *)(g + i * 256)), gv[2 * i + 1] = __ldg((const float4 *)(g + i * 256 + 4));
    uint16_t *xt = (uint16_t *)smem;   /* the x part, staged by cp.async (no registers held) */
    for (int i = threadIdx.x; i < T * kc; i += blockDim.x)
        cp16((uint8_t *)(xt + (size_t)i * 8), x + (size_t)(i / kc) * H + kb + (size_t)(i % kc) * 8);
    cp_commit();
    cp_wait<0>();
    if (tr && threadIdx.x == 0) tr[0] = moe_now();   /* x staged (bench trace) */
    __syncthreads();
    if (e < E) {
        float acc[MOE_FUSED_MAX_T];
#pragma unroll
        for (int j = 0; j < MOE_FUSED_MAX_T; j++) acc[j] = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (i * 256 >= kn) break;
            const float w[8] = {gv[2 * i].x, gv[2 * i].y, gv[2 * i].z, gv[2 * i].w,
                                gv[2 * i + 1].x, gv[2 * i + 1].y, gv[2 * i + 1].z, gv[2 * i + 1].w};
            router_logits_step<MOE_FUSED_MAX_T>(w, xt + i * 256 + lane * 8, kn, T, acc);   /* as router_logits_warp */
        }
        router_logits_reduce<MOE_FUSED_MAX_T>(acc);
        if (lane == 0)
#pragma unroll
            for (int j = 0; j < MOE_FUSED_MAX_T; j++)
                if (j < T) logits[((size_t)p * T + j) * E + e] = acc[j];
    }
    if (tr && threadIdx.x == 0) tr[1] = moe_now();   /* computed */
    __threadfence();   /* this block's logits, before its arrival is counted */
    __syncthreads();   /* xt is dead */
    if (threadIdx.x == 0) atomicAdd(arrivals, 1u);
    if (tr && threadIdx.x == 0) tr[2] = moe_now();   /* fenced and counted */
}

/* This block's routing (every L item has arrived): top-k of all T tokens (warp w: tokens w, w + 4),
 * then the lists in shared memory (scratch: the ring); writer: also to global memory. */
__device__ __forceinline__ void fused_route(const moe_fused_args &a, uint8_t *smem, FusedRoute *ra, bool writer)
{
    const int E = a.ex.E, T = a.T, K = a.topk, P = T * K, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int *s_idx = (int *)smem, *s_cnt = (int *)(smem + 2048);   /* [P], [E + 1] */
    float *s_w = (float *)(smem + 1024);                      /* [P] */
    for (int i = threadIdx.x; i <= E; i += blockDim.x) s_cnt[i] = 0;
    for (int t = warp; t < T; t += MOE_WARPS)
        router_topk_token<FUSED_PL>(a.logits, a.ks, T, t, lane, E, K, a.score_func, a.bias, a.tid2eid, a.token_ids,
                                    a.route_scale, s_idx, s_w);
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x) atomicAdd(&s_cnt[s_idx[i]], 1);
    __syncthreads();
    if (warp == 0) {   /* exclusive scan of the counts, and the touched experts in increasing order */
        int carry = 0, n = 0;
        for (int b = 0; b < E; b += 32) {
            const int e = b + lane, c = e < E ? s_cnt[e] : 0;
            int inc = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += y;
            }
            const int ex = carry + inc - c;
            const unsigned m = __ballot_sync(0xffffffffu, c > 0);
            if (c > 0) ra->exp[n + __popc(m & ((1u << lane) - 1u))] = e | ex << 9 | c << 18;
            if (e < E) s_cnt[e] = ex;
            n += __popc(m);
            carry += __shfl_sync(0xffffffffu, inc, 31);
        }
        if (lane == 0) ra->n = n;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x) {   /* pair (t, k) -> position: expert, then token */
        const int t = i / K, e = s_idx[i];
        int pos = s_cnt[e];
        for (int j = 0; j < t * K; j++) pos += s_idx[j] == e;
        ra->tok[pos] = (uint8_t)t;
        ra->w[pos] = s_w[i];
        if (writer) {
            a.idx[i] = e;
            a.w[i] = s_w[i];
            a.inv[i] = pos;
            a.pair_tok[pos] = t;
            a.pair_w[pos] = s_w[i];
        }
    }
    for (int t = threadIdx.x; t < T; t += blockDim.x) {   /* the shared expert's pairs follow */
        ra->tok[P + t] = (uint8_t)t;
        ra->w[P + t] = 1.f;
        if (writer && a.ex.has_shared) a.pair_tok[P + t] = t, a.pair_w[P + t] = 1.f;
    }
    if (writer)
        for (int e = threadIdx.x; e <= E + 1; e += blockDim.x)
            a.off[e] = e < E ? s_cnt[e] : e == E ? P : P + (a.ex.has_shared ? T : 0);
    __syncthreads();   /* the ring is free again */
}

struct FItem {
    int e, p0, ntok;
};
__device__ __forceinline__ FItem fused_item(const FusedRoute *ra, int k)
{
    const int v = ra->exp[k];
    FItem t;
    t.e = v & 511;
    t.p0 = (v >> 9) & 511;
    t.ntok = v >> 18;
    return t;
}

/* gate/up epilogue for one 16-row tile (rows r*16 + g, + 8): h = w_pair * silu(min(g, L)) * clamp(u) */
__device__ __forceinline__ void fused_h(const moe_fused_args &a, const FusedRoute *ra, const float acc[2][1][4], int r,
                                        int p0, int ntok, float pg, float pu)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, I = a.ex.I;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
        if (n < ntok)
            a.h[(size_t)(p0 + n) * I + row] =
                moe_f32_to_bf16(moe_swiglu(acc[0][0][i] * pg, acc[1][0][i] * pu, a.ex.limit) * ra->w[p0 + n]);
    }
}

/* Item kinds in ticket order: L, SG, RG, SD, RD. (v13 run 4 also measured SD before RG: 3-6 % slower.) */
struct FusedPlan {
    int nL, nSG, nSD, nRG, nRD;
    __device__ int kind(int it) const   /* 0 L, 1 SG, 2 SD, 3 RG, 4 RD, 5 past the end */
    {
        if (it < nL) return 0;
        it -= nL;
        if (it < nSG) return 1;
        it -= nSG;
        if (it < nRG) return 3;
        it -= nRG;
        return it < nSD ? 2 : it - nSD < nRD ? 4 : 5;
    }
    __device__ int local(int it, int k) const   /* index inside its kind */
    {
        const int b = k == 0 ? 0 : k == 1 ? nL : k == 3 ? nL + nSG : k == 2 ? nL + nSG + nRG : nL + nSG + nRG + nSD;
        return it - b;
    }
};

template <int FMT>
__global__ void __launch_bounds__(128, 5) k_moe_fused(moe_fused_args a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_ticket[2];
    const moe_expert_args &ex = a.ex;
    const int E = ex.E, H = ex.H, I = ex.I, T = a.T, K = a.topk;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    FusedPlan pl;
    pl.nL = (E + MOE_WARPS - 1) / MOE_WARPS * a.ks;
    pl.nSG = ex.has_shared ? I / MOE_TILE_ROWS : 0;
    pl.nSD = ex.has_shared ? H / MOE_TILE_ROWS : 0;
    pl.nRG = pl.nRD = 1 << 29;   /* unknown until this block has routed */
    const int rgG = I / MOE_ROWS_PER_ITEM, rgD = H / MOE_ROWS_PER_ITEM;
    const size_t cbytes = moe_fp4_chunk_bytes(FMT);
    const size_t rtG = (size_t)(H / 128) * 2 * cbytes, rtD = (size_t)(I / 128) * cbytes;
    unsigned *done = SY(3);   /* expert e's counter: done + e * MOE_FUSED_SYNC_LINE */
    uint8_t *ring = smem + warp * RING_WARP_BYTES;
    FusedRoute *ra = (FusedRoute *)(smem + MOE_WARPS * RING_WARP_BYTES);
    moe_pdl_wait();
    moe_pdl_release();   /* first thing: dependents get slots only once every block of ours has started */
    if (threadIdx.x == 0) s_ticket[0] = (int)atomicAdd(SY(1), 1u);
    __syncthreads();
    int it = s_ticket[0], nR = -1, ntr = 0;
    bool split = true;
    for (int round = 1;; round++) {
        int kind = pl.kind(it);
        if (kind >= 3 && nR < 0) {   /* first routed item (or past the known items): route */
            moe_wait_count(SY(0), (unsigned)pl.nL);
            const unsigned long long tr0 = a.trace ? moe_now() : 0;
            fused_route(a, smem, ra, blockIdx.x == 0);
            if (a.trace && blockIdx.x == 0 && threadIdx.x == 0) {
                a.trace[(size_t)gridDim.x * FUSED_TRACE_ITEMS * 2] = tr0;
                a.trace[(size_t)gridDim.x * FUSED_TRACE_ITEMS * 2 + 1] = moe_now();
            }
            nR = ra->n;
            /* K-split gate/up items unless told otherwise and there are enough 64-row items */
            split = !(a.opt & 1) || (!(a.opt & 2) && nR * rgG < (int)gridDim.x);
            pl.nRG = nR * (split ? I / MOE_TILE_ROWS : rgG);
            pl.nRD = nR * rgD;
            kind = pl.kind(it);
        }
        if (kind == 5) break;
        /* the next ticket, fetched now and read after this item (no wait for the atomic) */
        int next_t = 0;
        if (threadIdx.x == 0) next_t = (int)atomicAdd(SY(1), 1u);
        const int li = pl.local(it, kind);
        const unsigned long long t0 = a.trace ? moe_now() : 0;
        if (kind == 0) {
            fused_logits(a.x, a.gate, a.logits, SY(0), E, H, T, a.ks, li, smem,
                         a.trace && it == 0 ? a.trace + (size_t)gridDim.x * FUSED_TRACE_ITEMS * 2 + 2 : NULL);
        } else if (kind <= 2) {
            /* shared expert: 16-row tile r, K split over the warps; its T pairs follow the routed ones */
            const bool gu = kind == 1;
            const int r = li, nc = (gu ? H : I) / 128, p0 = T * K;
            const int cb = warp * nc / MOE_WARPS, ce = (warp + 1) * nc / MOE_WARPS;
            int prow[1];
            prow[0] = g < T ? g : 0;
            if (gu) {
                float acc[2][1][4];
                fp8_rowtile<2, 2, 1, 0>(ex.sh_w13 + (size_t)r * nc * 2 * MOE_FP8_CHUNK_BYTES, H, cb, ce,
                                        ex.sh_s13 + (size_t)(r * 16 / 128) * nc, (I / 128) * nc, ring, a.x, NULL,
                                        prow, acc);
                ksplit_reduce<2, 1>(smem, acc, warp, lane);
                if (warp == 0) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                        if (n < T)
                            a.h[(size_t)(p0 + n) * I + row] =
                                moe_f32_to_bf16(moe_swiglu(acc[0][0][i], acc[1][0][i], ex.limit));
                    }
                    fused_signal(done + (size_t)E * MOE_FUSED_SYNC_LINE, lane);
                }
            } else {
                float acc[1][1][4];
                prow[0] += p0;
                fp8_rowtile<1, 4, 1, 1>(ex.sh_w2 + (size_t)r * nc * MOE_FP8_CHUNK_BYTES, I, cb, ce,
                                        ex.sh_s2 + (size_t)(r * 16 / 128) * nc, 0, ring, a.h, NULL, prow, acc,
                                        done + (size_t)E * MOE_FUSED_SYNC_LINE, (unsigned)pl.nSG);
                ksplit_reduce<1, 1>(smem, acc, warp, lane);
                if (warp == 0)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                        if (n < T) a.y[(size_t)(p0 + n) * H + row] = acc[0][0][i];
                    }
            }
        } else if (kind == 3 && split) {
            /* routed gate/up, one 16-row tile, K split over the warps */
            const int tiles = I / MOE_TILE_ROWS, nc = H / 128;
            const FItem c = fused_item(ra, li / tiles);
            const int r = li % tiles, cb = warp * nc / MOE_WARPS, ce = (warp + 1) * nc / MOE_WARPS;
            int prow[1];
            prow[0] = ra->tok[c.p0 + (g < c.ntok ? g : 0)];
            float acc[2][1][4];
            const uint8_t *rt = ex.w13 + (size_t)c.e * ex.w13_stride + (size_t)r * rtG + (size_t)cb * 2 * cbytes;
            fp4_rowtile<FMT, 2, 4, 1, 0>(rt, (ce - cb) * 128, ring, a.x + cb * 128, NULL, prow, acc, false, NULL, 1,
                                         nullptr, 0, H);
            ksplit_reduce<2, 1>(smem, acc, warp, lane);
            if (warp == 0) {
                fused_h(a, ra, acc, r, c.p0, c.ntok, ex.post13[2 * c.e], ex.post13[2 * c.e + 1]);
                fused_signal(done + (size_t)c.e * MOE_FUSED_SYNC_LINE, lane);
            }
        } else {
            /* routed gate/up or down, 64-row group: a 16-row tile per warp */
            const bool gu = kind == 3;
            const int rg = gu ? rgG : rgD;
            const FItem c = fused_item(ra, li / rg);
            const int r = (li % rg) * MOE_WARPS + warp;
            int prow[1];
            if (gu) {
                float acc[2][1][4];
                prow[0] = ra->tok[c.p0 + (g < c.ntok ? g : 0)];
                fp4_rowtile<FMT, 2, 4, 1, 0>(ex.w13 + (size_t)c.e * ex.w13_stride + (size_t)r * rtG, H, ring, a.x,
                                             NULL, prow, acc, false, NULL, 1);
                fused_h(a, ra, acc, r, c.p0, c.ntok, ex.post13[2 * c.e], ex.post13[2 * c.e + 1]);
                fused_signal(done + (size_t)c.e * MOE_FUSED_SYNC_LINE, lane);
            } else {
                float acc[1][1][4];
                prow[0] = c.p0 + (g < c.ntok ? g : 0);
                fp4_rowtile<FMT, 1, 8, 1, 1>(ex.w2 + (size_t)c.e * ex.w2_stride + (size_t)r * rtD, I, ring, a.h, NULL,
                                             prow, acc, false, NULL, 1, done + (size_t)c.e * MOE_FUSED_SYNC_LINE,
                                             (unsigned)(I / MOE_TILE_ROWS));
                const float post = ex.post2[c.e];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int row = r * 16 + g + (i >= 2 ? 8 : 0), nn = 2 * q + (i & 1);
                    if (nn < c.ntok) a.y[(size_t)(c.p0 + nn) * H + row] = acc[0][0][i] * post;
                }
            }
        }
        if (a.trace && threadIdx.x == 0 && ntr < FUSED_TRACE_ITEMS) {
            unsigned long long *tr = a.trace + ((size_t)blockIdx.x * FUSED_TRACE_ITEMS + ntr) * 2;
            tr[0] = t0;
            tr[1] = ((moe_now() - t0) & 0xFFFFFFFFull) | ((unsigned long long)kind << 32);
            ntr++;
        }
        if (threadIdx.x == 0) s_ticket[round & 1] = next_t;
        __syncthreads();
        it = s_ticket[round & 1];
    }
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(SY(2), 1u) == gridDim.x - 1) {   /* last block out: reset */
        __threadfence();
        for (int i = 0; i < 3 + E + 1; i++) *SY(i) = 0;
        __threadfence();
    }
}

static size_t fused_smem() { return (size_t)MOE_WARPS * RING_WARP_BYTES + sizeof(FusedRoute); }

extern "C" cudaError_t moe_fused_occupancy(int fmt, int *blocks_per_sm)
{
    const void *f = fmt == MOE_FP4_NVFP4 ? (const void *)k_moe_fused<MOE_FP4_NVFP4> : (const void *)k_moe_fused<MOE_FP4_MXFP4>;
    cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fused_smem());
    if (e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, f, 128, fused_smem());
}

extern "C" int moe_fused_ks(int H)
{   /* x part: T * H / 4 bf16 <= 16 KB of the ring for T <= MOE_FUSED_MAX_T */
    return H % 1024 == 0 && H <= 4096 ? 4 : 0;
}

extern "C" cudaError_t moe_fused_small(const moe_fused_args *a, int grid, cudaStream_t st)
{
    const moe_expert_args *ex = &a->ex;
    if (a->T < 1 || a->T > MOE_FUSED_MAX_T || ex->E > MOE_FUSED_MAX_E || a->topk < 1 || a->topk > ex->E ||
        a->T * a->topk > FUSED_MAXP || ex->H % 128 || ex->I % MOE_ROWS_PER_ITEM || ex->H % MOE_ROWS_PER_ITEM ||
        ex->I > 8192 || a->ks < 1 || a->ks != moe_fused_ks(ex->H) || grid < 1)
        return cudaErrorInvalidValue;
    const int nL = (ex->E + MOE_WARPS - 1) / MOE_WARPS * a->ks;
    const int nS = ex->has_shared ? (ex->I + ex->H) / MOE_TILE_ROWS : 0;
    const long need = nL + nS + (long)a->T * a->topk * (ex->I / MOE_TILE_ROWS + ex->H / MOE_ROWS_PER_ITEM);
    if (need < grid) grid = (int)need;
    return moe_launch(ex->fmt == MOE_FP4_NVFP4 ? k_moe_fused<MOE_FP4_NVFP4> : k_moe_fused<MOE_FP4_MXFP4>, dim3(grid),
                      dim3(128), fused_smem(), st, *a);
}
