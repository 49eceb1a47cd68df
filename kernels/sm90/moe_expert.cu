/* moe_expert.cu — fused W4A16 routed experts + FP8 shared expert for decode (small M), Hopper.
 *
 * Work: (expert, 64-row group, chunk of <= 8*NT tokens) is one work item for a 4-warp block; a
 * persistent grid (5 blocks/SM, 20 warps) walks the GPU-built item list (moe_build_lists) with a
 * static stride, so every SM streams weights even at batch 1 (6 routed experts = 192 gate/up items).
 * Where a launch carries no shared-expert items (moe_expert_args.tickets), each warp instead takes
 * its next 16-row tile from a counter (WarpQueue), so warps that run faster or start later (beside the
 * shared expert's launches) even out: ncu at batch 64, gate/up 485 -> 456 us, down 282 -> 255 us,
 * achieved warps per SM 16.5 -> 18.7 of 20.
 * Each warp owns 16 weight rows for the whole K and streams its repacked chunks (16 rows x 128
 * inputs, 1152 B) HBM -> shared memory with cp.async, 4-8 chunks (~10 KB) in flight per warp; each
 * lane copies and reads back only its own 16-byte pieces, so the ring needs no barriers. The stream
 * continues into the warp's next item without draining. FP4 codes are dequantised to bf16 in
 * registers (moe_fp4_common.cuh: rotate + mask into bf16 bit positions, one bf16x2 multiply by the
 * block scale) and multiplied with mma.sync m16n8k16: weights are the M side, the item's tokens the
 * N side (NT = 1 or 2 n-tiles of 8; with 2 both n-tiles reuse one dequantised fragment).
 * Activation fragments come straight from L1/L2 one chunk ahead. gate and up rows are interleaved,
 * so one warp finishes silu(min(g,L)) * clamp(u) * routing weight in registers and writes h (bf16).
 * The FP8 shared expert runs in the same launches below moe_plan.own_shared tokens: its items are
 * single 16-row tiles whose K is split over the block's 4 warps (partial sums added in a fixed order
 * through shared memory); each token chunk of 8 (16) re-streams and re-dequantises all its weights, which
 * cost 45-60 us at batch 64 and ~290 us at 512 (`sluice-bench moe --no-shared`). From
 * moe_plan.own_shared tokens (16) it has two launches of its own (k_shared_fp8: 16-64 tokens
 * per dequantised fragment), on a second stream beside the router and the routed launches; from
 * moe_plan.shared_gemm (512; 256, on wgmma) those two launches are bf16 GEMMs on a bf16 copy of its weights
 * (moe_shared_gemm.cuh, moe_shared_gemms; their tiles by TMA).
 *
 * Up to 8 tokens (moe_plan.experts; up to 2 with the cheaper dequant: up to 8) the whole
 * expert work, the shared expert's items included, is one launch (k_experts1 SMALL: K-split gate/up tiles,
 * one copy of the FP4 loop, 2 steps of code). From 16 tokens (moe_plan.experts) the
 * 1-tile gate/up and down are one launch (k_experts1): every warp-item comes from one counter, gate/up's
 * first, and a down item waits only for the gate/up items whose h rows it reads (MOE_DONE), so the down
 * weights stream while gate/up's last tiles finish.
 * Every kernel of the layer runs at the 100 % shared-memory carveout (moe_kernels_carveout), so the
 * routed blocks can share an SM with the shared expert's.
 *
 * Tile count per expert, chosen on the GPU: a routed expert with > 8 tokens is served by the
 * 2-tile kernel (items of 16 tokens), one with <= 8 tokens by the 1-tile kernel (up to
 * moe_expert_args.tok1_max tokens, default 16 at batches 64-128, as 8-token chunks that each stream the
 * expert's weights, the chunks of a row group adjacent in the item order so the second read mostly hits
 * L2: the rare 9-16-token expert of a batch of 64-128 no longer leaves a 2-tile tail); the shared expert
 * (T tokens, known on the host) by the 2-tile kernel from T >= 256 (moe_tok_tiles, the v9 threshold).
 * (X4, moe_expert_args.wide_min, default from batch 256, 224): a routed expert with more than 32 tokens is
 * served by the wide kernels (MOE_NTW 8 n-tiles: items of 64 tokens, each dequantised fragment feeding 8 n-tiles;
 * activations single-buffered, 234-255 registers, 2 blocks/SM), launched after each stage's 2-tile one (in
 * moe_experts_fused1 the wide gate/up after the 2-tile gate/up, moe_expert_args.wide_early, the wide down after
 * the 2-tile down): skewed 512 0.88 -> 0.70 ms, 256 0.45 -> 0.36 (`sluice-bench moe`).
 * A routed launch's blocks without items exit before their PDL wait (block 0 waits), so an empty
 * launch in the layer's tail costs one short hop instead of every block's wait and table (`sluice-bench moe`).
 * moe_gate_up / moe_down launch both kernels back to back (only the 1-tile one for T <= 8, where no
 * expert can have more than 8 tokens); each block derives its kernel's own item list from the
 * per-expert counts in off[] (a 1-warp scan in shared memory), so the split needs no host sync, no
 * allocation and is the same graph for every routing. Why two launches and not a per-item switch
 * inside one persistent kernel: the 2-tile body needs ~128 registers (4 blocks/SM; capped at 102
 * for 5 blocks/SM it spills 250-400 B per thread), so one kernel holding both bodies would run
 * random routing, where almost every expert has <= 8 tokens, at 4 instead of 5 blocks per SM. Two
 * launches keep each body at its own occupancy; the price is one more kernel boundary per stage.
 *
 * Reduction: no atomics. Every output element has one owner; the down kernel writes y[pair][H] and
 * moe_combine adds a token's routed pairs and its shared pair in a fixed order, so results are
 * bitwise deterministic run to run and independent of list order.
 *
 * Roofline (V4-Flash, H200, 4.5 TB/s read ceiling measured): one NVFP4 expert is 14.2 MB (weights
 * 12.6 + scales 1.6), the FP8 shared expert 25.2 MB: batch 1 reads 114 MB -> 25 us; batch 64 (~200
 * experts touched) 2.86 GB -> 0.63 ms. Measured (bench/results/moe-h200.json): 58.8 us and 0.721 ms.
 */
#include <stdint.h>
#include "common/dev_flag.cuh"
#include "moe_kernels.h"
#include "moe_grid.h"
#include "common/moe_fp4_common.cuh"
#include "common/moe_launch.cuh"
#include "common/moe_l2.cuh"
#include "common/moe_trace.cuh"
#include "moe_expert_dev.cuh"
/* Occupancy knobs of the routed kernels (compile-time A/B, bench/moe_ab.sh): blocks per SM the 1-tile
 * kernels are compiled for (registers capped to fit), and the ring depth of gate/up and of the 128-row
 * down (the 64-row down streams one matrix and runs twice as deep). */
#define MOE_MINB1 5
#define MOE_GU_D 4
/* The blocks per SM the 2-tile kernels are compiled for (128 registers). 5 (96 registers, one activation buffer),
 * 3 and 2 (ptxas then overlaps two FP4 words per warp), two and four row tiles per warp, ring depth 2, an L1
 * prefetch of the activation rows, a carveout of their own and a grid held to 1-2 blocks per SM beside the fused
 * launch were each measured slower or equal (`sluice-bench moe`; runs 5-6 of and 1-4 of
 * name the commit that has their knobs). */
#define MOE_MINB2 4
/* ... and the wide kernels (X4: moe_expert_args.wide_min, MOE_NTW n-tiles): 8 n-tiles' activations (128
 * registers single-buffered) and 64 accumulators take ~250 registers */
#define MOE_MINBW 2
__host__ __device__ constexpr int moe_minb_nt(int nt) { return nt == 1 ? MOE_MINB1 : nt == 2 ? MOE_MINB2 : MOE_MINBW; }
/* per-warp ring of the routed kernels: MOE_GU_D steps of two 1280-byte slots; the shared expert's FP8
 * items (in the routed launches below moe_plan.own_shared) need the full RING_WARP_BYTES */
#define EX_RING (MOE_GU_D * 2 * 1280 < RING_WARP_BYTES ? MOE_GU_D * 2 * 1280 : RING_WARP_BYTES)
static_assert(EX_RING >= RING_WARP_BYTES, "the routed rings carry the shared expert's FP8 items");

/* Blocks of a routed launch that have no item (blockIdx >= its block items: the static walk's
 * first warp-item, and a handed-out walk's, is 4 * blockIdx + warp) return true and exit before their PDL wait, all
 * but block 0, which waits first: the grid then still completes only after the previous kernel has, so every
 * later wait still covers the whole chain. Its other blocks leave their SM slots at once instead of holding them
 * until the previous kernel ends (an empty 2-tile or wide launch in a layer's tail, `sluice-bench moe`). The
 * caller makes sure that nothing launched after it reads what the previous kernels write without waiting. */
__device__ __forceinline__ bool idle_exit(int block_items)
{
    if ((int)blockIdx.x < block_items) return false;
    if (blockIdx.x == 0) moe_pdl_wait();
    return true;
}

/* The walk of an NT-tile launch of stage 0 (gate/up) or 1 (down): its counters are tickets[4 * stage +
 * 2 * (NT - 1)] and the word after; tiles are handed out only where the launch carries no shared items. */
template <int NT>
__device__ __forceinline__ ItemWalk item_walk(const moe_expert_args &a, int total, int stage)
{
    return {{a.tickets + 4 * stage + (NT - 1) * 2, total * MOE_WARPS, (int)gridDim.x * MOE_WARPS},
            NT <= 2 && a.tickets && !a.has_shared && ((a.dyn >> (NT - 1)) & 1)};   /* wide (MOE_NTW): static */
}

/* (moe_expert_args.pf_dn, .pf_sh_dn): the down weights the next launch reads, asked of L2 by the
 * grid's first warps, 8 per range (an expert's whole down matrix, or the shared expert's), one piece
 * per lane: range k is the shared expert's (if asked and its items ride in the routed launches), then
 * the down matrices of the first pf_dn experts with tokens in expert order, the order in which the
 * down launch's first warps take their items. */
__device__ __forceinline__ void prefetch_down(const moe_expert_args &a, const int32_t *s_off, int warp, int lane)
{
    const int gw = (int)blockIdx.x * MOE_WARPS + warp, part = gw & 7, nsh = a.pf_sh_dn && a.has_shared ? 1 : 0;
    int want = (gw >> 3) - nsh;
    const void *p = nullptr;
    size_t n = 0;
    if (want < 0) {
        p = a.sh_w2;
        n = (size_t)a.H * a.I;
    } else if (want < a.pf_dn) {
        for (int e0 = 0; e0 < a.E; e0 += 32) {   /* the want-th expert with tokens, 32 at a time */
            const int e = e0 + lane;
            const bool has = e < a.E && s_off[e + 1] > s_off[e];
            const unsigned m = __ballot_sync(0xffffffffu, has);
            const int c = __popc(m);
            if (want < c) {
                const int sel = __ffs(__ballot_sync(0xffffffffu, has && __popc(m & ((1u << lane) - 1u)) == want)) - 1;
                p = a.w2 + (size_t)(e0 + sel) * a.w2_stride;
                n = a.w2_stride;
                break;
            }
            want -= c;
        }
    }
    if (p) moe_l2_prefetch_piece(p, n, part * 32 + lane, 256, moe_l2_policy(a.pf_last));
}

/* SH 0 (2-tile only): without the shared expert's FP8 branch (it traps on a shared item), the form the host
 * launches where the 2-tile launch carries no shared items (every default launch): the branch held the body's
 * registers and scheduling (`sluice-bench moe`: 512 -1.6 %, with the one-LOP3 scale factors it then allows -2.8 %). */
template <int FMT, int NT, int SH = 1>
__global__ void __launch_bounds__(128, moe_minb_nt(NT)) k_gate_up(moe_expert_args a, const uint16_t *x, const int32_t *off,
                                                 const int32_t *pair_tok, const float *pair_w, uint16_t *h)
{
    const MoeTrace trace_(NT == 1 ? MOE_TR_GU1 : NT == 2 ? MOE_TR_GU2 : MOE_TR_GUW);
    extern __shared__ __align__(16) uint8_t smem[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *s_items = (int32_t *)(smem + MOE_WARPS * EX_RING), *s_off = s_items + (nE + 1);
    /* overlap: the 2-tile launch is released by the 1-tile one only after that one's wait, so the
     * lists are complete; the two write disjoint pairs; its wait at the end makes the next kernel's wait
     * cover both launches. Its blocks take the slots the 1-tile launch's tail frees and start at once. */
    const bool second = NT == 2 && a.early && (a.overlap & 1);
    /* let the next kernel (down) launch now: its blocks take the slots this grid's tail frees and
     * stream their first weights while this kernel finishes (they wait before reading h). The wide launch
     * follows the 2-tile one, which released it at its start: it releases before its own wait, so the down
     * launch after it still primes during the 2-tile launch's tail (its wait covers both: ours completes after
     * the 2-tile launch does). */
    /* the wide launch reads its item table before its wait (off[] is complete: the first routed
     * launch after the lists released its successor only after its own wait on them, and every routed launch since
     * started after that), and its blocks without items exit at once */
    constexpr bool wide_idle = NT >= 4;
    if (NT >= 4 && a.early) moe_pdl_release();
    if (!second && !(wide_idle && a.early)) moe_pdl_wait();
    if (NT < 4 && a.early) moe_pdl_release();
    constexpr int GD = MOE_GU_D;
    item_table<NT>(s_items, s_off, off, nE, a.E, a.I, MOE_ROWS_PER_ITEM, moe_tok1(a.tok1_max), a.wide_min);
    if (NT == 1 && (a.pf_dn > 0 || a.pf_sh_dn)) prefetch_down(a, s_off, warp, lane);
    const int total = s_items[nE], nc = a.H / 128;
    if (wide_idle && a.early) {
        if (idle_exit(total)) return;
        moe_pdl_wait();
    }
    const size_t rt_bytes = (size_t)nc * 2 * moe_fp4_chunk_bytes(FMT);
    bool primed = false;
    if (total == 0) {   /* no expert of this tile count */
        if (second) moe_pdl_wait();
        return;
    }
    /* warp-items wi = 4 * block item + tile: a static stride of the grid, or handed out (tickets) */
    const ItemWalk walk = item_walk<NT>(a, total, 0);
    const int wtotal = walk.q.wtotal;
    int wi = (int)blockIdx.x * MOE_WARPS + warp, wn = walk.after(wi), wnn;
    Item cur = decode_item<NT>(s_items, s_off, nE, wi < wtotal ? wi >> 2 : 0, wi & 3, a.has_shared), nxt;
    for (; wi < wtotal; wi = wn, wn = wnn, cur = nxt) {
        const int e = cur.e, r = cur.r, p0 = cur.p0, ntok = cur.ntok;
        wnn = walk.after(wn);
        const int wd = wn < wtotal ? wn : wi;   /* the next warp-item, or (none) any valid one */
        nxt = decode_item<NT>(s_items, s_off, nE, wd >> 2, wd & 3, a.has_shared);
        const bool has_next = wn < wtotal && nxt.e < a.E && e < a.E && nc % GD == 0;
        uint8_t *ring = smem + warp * EX_RING;
        const int g_ = lane >> 2;
        int prow[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) prow[j] = p0 + (j * 8 + g_ < ntok ? j * 8 + g_ : 0);
        float acc[2][NT][4];   /* gate, up of the warp's 16-row tile */
        float pg = 1.f, pu = 1.f;
        if (e < a.E) {
            const uint8_t *rt = a.w13 + (size_t)e * a.w13_stride + (size_t)r * rt_bytes;
            const uint8_t *nrt = has_next ? a.w13 + (size_t)nxt.e * a.w13_stride + (size_t)nxt.r * rt_bytes : NULL;
            fp4_rowtile<FMT, 2, GD, NT, 0, 0, 0, NT >= 2 && !SH>(rt, a.H, ring, x, pair_tok, prow, acc, primed, nrt, 1);
            pg = a.post13[2 * e];
            pu = a.post13[2 * e + 1];
        } else if constexpr (NT >= 2 && !SH) {
            __trap();
        } else {
            const uint8_t *rt = a.sh_w13 + (size_t)r * (a.H / 128) * 2 * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s13 + (size_t)(r * 16 / 128) * (a.H / 128);
            fp8_rowtile<2, 2, NT>(rt, a.H, warp * nc / MOE_WARPS, (warp + 1) * nc / MOE_WARPS, bs,
                              (a.I / 128) * (a.H / 128), ring, x, pair_tok, prow, acc);
            ksplit_reduce<2, NT>(smem, acc, warp, lane);
            if (warp != 0) { primed = false; continue; }
        }
        primed = has_next;
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = j * 8 + 2 * q + (i & 1);
            if (n < ntok)
                h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(
                    moe_swiglu(acc[0][j][i] * pg, acc[1][j][i] * pu, a.limit) * pair_w[p0 + n]);
        }
    }
    if (second) moe_pdl_wait();
    if (!a.early) moe_pdl_release();
}

/* RM: 16-row tiles per warp of a routed item (1: 64-row items, ring depth 8; 2: 128-row items, each
 * warp streaming two adjacent row tiles like gate/up's two matrices, ring depth 4, one activation
 * fragment per two tiles;). The shared expert's items are unchanged (one 16-row tile, K split). */
template <int FMT, int NT, int RM, int SH = 1>
__global__ void __launch_bounds__(128, moe_minb_nt(NT)) k_down(moe_expert_args a, const uint16_t *h, const int32_t *off,
                                              float *y)
{
    const MoeTrace trace_(NT == 1 ? MOE_TR_DN1 : NT == 2 ? MOE_TR_DN2 : MOE_TR_DNW);
    constexpr int GD = MOE_GU_D, D = RM == 1 ? 2 * GD : GD;
    extern __shared__ __align__(16) uint8_t smem[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *s_items = (int32_t *)(smem + MOE_WARPS * EX_RING), *s_off = s_items + (nE + 1);
    /* Before the PDL wait (early): the item list (off[] was written by the lists kernel, which completed
     * before the previous kernel could release us) and the first D weight chunks of this warp's first
     * item (weights do not depend on the previous kernel); h is read only after the wait. */
    const bool second = NT == 2 && a.early && (a.overlap & 2);   /* as in k_gate_up */
    if (!a.early) moe_pdl_wait();
    item_table<NT>(s_items, s_off, off, nE, a.E, a.H, MOE_ROWS_PER_ITEM * RM, moe_tok1(a.tok1_max), a.wide_min);
    const int total = s_items[nE], nc = a.I / 128;
    const size_t rt_bytes = (size_t)nc * moe_fp4_chunk_bytes(FMT);   /* one 16-row tile */
    const int mmul = RM >= 2 ? nc : 1;
    bool primed = false;
    /* no item for this block (idle_exit: exits at once, one block waits); the exit releases the next launch,
     * so where that one may not wait for us (overlap: our 2-tile launch, which waits only at its end) every block
     * waits until h is complete */
    if (a.early && !(NT == 1 && (a.overlap & 2))) {
        if (idle_exit(total)) return;
    } else if (total == 0) {
        if (a.early) moe_pdl_wait();
        return;
    }
    const ItemWalk walk = item_walk<NT>(a, total, 1);
    const int wtotal = walk.q.wtotal;
    int wi = (int)blockIdx.x * MOE_WARPS + warp, wn = walk.after(wi), wnn;
    Item cur = decode_item<NT>(s_items, s_off, nE, wi < wtotal ? wi >> 2 : 0, wi & 3, a.has_shared), nxt;
    if (a.early && wi < wtotal && cur.e < a.E) {
        fp4_prime<FMT, RM, D>(smem + warp * EX_RING,
                              a.w2 + (size_t)cur.e * a.w2_stride + (size_t)cur.r * RM * rt_bytes, nc, lane, mmul);
        primed = true;
    }
    if (a.early && !second) moe_pdl_wait();
    moe_pdl_release();
    for (; wi < wtotal; wi = wn, wn = wnn, cur = nxt) {
        const int e = cur.e, r = cur.r, p0 = cur.p0, ntok = cur.ntok;
        wnn = walk.after(wn);
        const int wd = wn < wtotal ? wn : wi;   /* as in k_gate_up */
        nxt = decode_item<NT>(s_items, s_off, nE, wd >> 2, wd & 3, a.has_shared);
        const bool has_next = wn < wtotal && nxt.e < a.E && e < a.E && nc % D == 0;
        uint8_t *ring = smem + warp * EX_RING;
        const int g_ = lane >> 2;
        int prow[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) prow[j] = p0 + (j * 8 + g_ < ntok ? j * 8 + g_ : 0);
        float acc[RM][NT][4];
        float post = 1.f;
        int rm = RM;   /* 16-row tiles this warp writes */
        if (e < a.E) {
            const uint8_t *rt = a.w2 + (size_t)e * a.w2_stride + (size_t)r * RM * rt_bytes;
            const uint8_t *nrt = has_next ? a.w2 + (size_t)nxt.e * a.w2_stride + (size_t)nxt.r * RM * rt_bytes : NULL;
            fp4_rowtile<FMT, RM, D, NT, 0, 0, 0, NT >= 2 && !SH>(rt, a.I, ring, h, NULL, prow, acc, primed, nrt, mmul);
            post = a.post2[e];
        } else if constexpr (NT >= 2 && !SH) {
            __trap();
        } else {
            const uint8_t *rt = a.sh_w2 + (size_t)r * (a.I / 128) * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s2 + (size_t)(r * 16 / 128) * (a.I / 128);
            fp8_rowtile<1, 4, NT>(rt, a.I, warp * nc / MOE_WARPS, (warp + 1) * nc / MOE_WARPS, bs, 0, ring, h, NULL, prow,
                              acc);
            ksplit_reduce<1, NT>(smem, acc, warp, lane);
            if (warp != 0) { primed = false; continue; }
            rm = 1;
        }
        primed = has_next;
        const int g = lane >> 2, q = lane & 3;
        const int tile0 = e < a.E ? r * RM : r;   /* first 16-row tile of this warp */
#pragma unroll
        for (int m = 0; m < RM; m++)
            if (m < rm)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int row = (tile0 + m) * 16 + g + (i >= 2 ? 8 : 0), n = j * 8 + 2 * q + (i & 1);
                        if (n < ntok) y[(size_t)(p0 + n) * a.H + row] = acc[m][j][i] * post;
                    }
    }
    if (second) moe_pdl_wait();
}

/* (moe_expert_args.fuse1): the 1-tile gate/up and down as one launch, so a down warp-item waits only
 * for its own expert's gate/up (its own token chunk's) instead of the whole gate/up launch. Every warp-item comes from one
 * counter (tickets[8]): gate/up's first (as k_gate_up), then down's (128-row items, as k_down RM 2).
 * After its h stores a gate/up warp-item adds one to its done count (MOE_DONE: per token chunk); a
 * down warp-item issues its first weight chunks, then waits (acquire) until that count reaches the
 * chunk's I/16 gate/up warp-items, and reads h through L2 (written in this launch). So the down
 * weights stream while gate/up's last tiles finish (the weak spot: that tail left HBM half idle for
 * ~one warp-item, ~47 us at batch 64, and the down launch could not start before it ended).
 * No deadlock: a warp takes its items in increasing number and every gate/up item is numbered before
 * every down item, so the warp holding the gate/up item a down item waits for holds only gate/up items
 * up to it, which never wait; and every block of the grid runs (the grid is at most the resident blocks,
 * and the kernels beside it do not wait for it). a warp's first MOE_STATIC_FIRST(_L) items are its
 * own by number instead of drawn (the argument above does not need draws). Each ticket draw is issued one
 * item ahead and read at the next item. The last warp to finish zeroes the counters for the next forward (every later launch
 * on them starts after this one completes). Launched after the 2-tile gate/up, which releases it only
 * after its own wait on the lists, so it needs no wait at its start; it waits at its end (the 2-tile
 * down, next, reads the 2-tile gate/up's h). Only with tickets and no shared items.
 *
 * , SMALL (T <= 8, every expert has <= 8 tokens: the whole layer's expert work in this one launch):
 * the shared expert's items ride in it as warp-items too, and K may be split. Ticket order: the shared
 * gate/up (16-row FP8 tiles x ks_sh K parts), the routed gate/up (16-row tiles x ks_gu K parts), the
 * shared down (16-row FP8 tiles, full K), the routed down (RM 16-row tiles per warp-item). At batch 1
 * a routed gate/up warp-item is a chain of 64 dependent chunk steps, so K parts shorten the chain and put more warps on the stream. A
 * K-part item stores its fp32 partial sums (a.part, 1 KB per part) and adds one to its tile's count
 * (a.pcnt); the last of the tile's parts to arrive sums all parts in part order (deterministic), applies
 * the swiglu, writes h, resets the count and signals the expert's done count. Nobody waits for a part,
 * so the no-deadlock argument above is unchanged. The shared expert's done count is MOE_DONE(tickets, E). */

/* The K-part reduction of a 16-row gate/up tile: stores this warp's partials (part `part` of `parts`)
 * and counts it in *cnt; the warp that completes the count gets true and acc = the parts' sum in part
 * order (and resets *cnt); the others false. scr: the tile's parts x 32 lanes x NM float4. */
template <int NM>
__device__ __forceinline__ bool part_reduce(float acc[NM][1][4], float *scr, unsigned *cnt, int part, int parts,
                                            int lane)
{
    float4 *mine = (float4 *)scr + ((size_t)part * 32 + lane) * NM;
#pragma unroll
    for (int m = 0; m < NM; m++) __stcg(mine + m, make_float4(acc[m][0][0], acc[m][0][1], acc[m][0][2], acc[m][0][3]));
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) {
        __threadfence();
        old = atomicAdd(cnt, 1u);
        if (old == (unsigned)parts - 1) {
            __threadfence();
            *cnt = 0;   /* every part has arrived: nobody else touches it in this forward */
        }
    }
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != (unsigned)parts - 1) return false;
#pragma unroll
    for (int m = 0; m < NM; m++) acc[m][0][0] = acc[m][0][1] = acc[m][0][2] = acc[m][0][3] = 0.f;
    for (int p = 0; p < parts; p++)
#pragma unroll
        for (int m = 0; m < NM; m++) {
            const float4 v = __ldcg((const float4 *)scr + ((size_t)p * 32 + lane) * NM + m);
            acc[m][0][0] += v.x;
            acc[m][0][1] += v.y;
            acc[m][0][2] += v.z;
            acc[m][0][3] += v.w;
        }
    return true;
}

/* The done count k of the fused kernel's gate/up tiles, one 128-byte line each (the down items' polls
 * of one expert do not queue behind another's). Its key (DONE_KEY): for T > 8 the token chunk, by its first
 * pair (moe_expert_args.tok1_max: an expert may have several chunks, and a down item waits only for
 * the h rows it reads); for T <= 8 (one chunk per expert) the expert, E for the shared expert (keyed by
 * pair there, the kernel takes 6 more registers and batches 4-8 are 2 % slower in sluice-bench moe). */
#define MOE_DONE(t, k) ((t) + 32 + (size_t)(k) * 32)
/* a warp's first MOE_STATIC_FIRST warp-items are its own by number (warp g and g + warps of the
 * grid, as the static walk), the rest are drawn: at batch 1 the 2 x 2640 draws at the start, all on one
 * word, took ~8 us. _L: the same for T > 8. MOE_MINB_S: blocks per SM the T <= 8 kernel is compiled for. */
#define MOE_STATIC_FIRST 2
#define MOE_STATIC_FIRST_L 2
#define MOE_MINB_S 4
#define MOE_MINB_S5 5 /* the T <= 8 kernel's second form (SMALL 2, moe_expert_args.one_launch 2) */
/* A routed gate/up warp-item's tile (among the launch's routed gate/up tiles) and its K part */
struct GuPart {
    int tile, part;
};
/* (moe_expert_args.early_sh): in the T <= 8 launch a warp whose first item is a shared gate/up tile
 * part runs it before the launch's PDL wait on the lists: it reads only x, which is complete once this
 * launch runs (every router kernel releases its dependents only after its own wait, so the kernel that
 * wrote x is done). */

template <int FMT, int RM, int SMALL>
__global__ void __launch_bounds__(128, SMALL == 2 ? MOE_MINB_S5 : SMALL ? MOE_MINB_S : MOE_MINB1)
    k_experts1(moe_expert_args a, const uint16_t *x, const int32_t *off,
                                                             const int32_t *pair_tok, const float *pair_w, uint16_t *h,
                                                             float *y)
{
    const MoeTrace trace_(MOE_TR_FUSED1);
#define DONE_KEY(e, p0) (SMALL ? (e) : (p0))
    constexpr int D = MOE_GU_D, DD = RM == 1 ? 2 * MOE_GU_D : MOE_GU_D;   /* ring depth of gate/up, down */
    /* fp4_rowtile's refill point: early (ER 1) in the 4-block T <= 8 form (no spill at its 128 registers;
       `sluice-bench moe`: batch 1 -4 %, 4 -5 %, 8 -2 %); the 5-block form spills with it, the T > 8 form is
       no faster */
    constexpr int ER = SMALL == 1 ? 1 : 0;
    extern __shared__ __align__(16) uint8_t smem[];
    const int nE = a.E, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    int32_t *s_ig = (int32_t *)(smem + MOE_WARPS * EX_RING), *s_off = s_ig + (nE + 1), *s_id = s_off + (nE + 1);
    unsigned *const draw = a.tickets + 8, *const fin = a.tickets + 9;
    const bool sh = SMALL && a.has_shared;
    const int ksg = SMALL ? a.ks_gu : 1, kss = sh ? a.ks_sh : 1, tiles_sh = a.I / MOE_TILE_ROWS;
    const int nsg = sh ? tiles_sh * kss : 0;                  /* shared gate/up warp-items */
    const int ncg = a.H / 128, ncd = a.I / 128, ncp = ncg / ksg;   /* chunks per routed gate/up K part */
    uint8_t *ring = smem + warp * EX_RING;
    const int nw = (int)gridDim.x * MOE_WARPS, gw = (int)blockIdx.x * MOE_WARPS + warp;
    /* shared gate/up warp-item w: FP8 16-row tile w / kss, K part w % kss; its T rows of h from sh_row0 */
    auto shared_gu = [&](int w) {
        const int r = w / kss, part = w % kss, ntok = a.T, p0 = a.sh_row0;
        float acc[2][1][4];
        int prow[1] = {g < ntok ? g : 0};   /* x row = token */
        fp8_rowtile<2, 2, 1>(a.sh_w13 + (size_t)r * ncg * 2 * MOE_FP8_CHUNK_BYTES, a.H, part * ncg / kss,
                             (part + 1) * ncg / kss, a.sh_s13 + (size_t)(r * MOE_TILE_ROWS / 128) * ncg,
                             (a.I / 128) * (a.H / 128), ring, x, NULL, prow, acc);
        if (kss == 1 || part_reduce<2>(acc, a.part + (size_t)r * MOE_PARTS_MAX * 256, a.pcnt + r, part, kss, lane)) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                if (n < ntok) h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(moe_swiglu(acc[0][0][i], acc[1][0][i], a.limit));
            }
            __syncwarp();
            if (lane == 0) {
                __threadfence();
                atomicAdd(MOE_DONE(a.tickets, a.E), 1u);   /* T <= 8 only */
            }
        }
    };
    const bool early = SMALL && a.early_sh && gw < nsg;
    if (early) shared_gu(gw);
    if (SMALL) moe_pdl_wait();   /* launched right after the lists */
    if (SMALL)   /* T <= 8: no expert has more than one token chunk */
        item_tables1_body<false>(s_ig, s_id, s_off, off, nE, a.I, MOE_ROWS_PER_ITEM, a.H, MOE_ROWS_PER_ITEM * RM, 0);
    else
        item_tables1_chunks(s_ig, s_id, s_off, off, nE, a.I, MOE_ROWS_PER_ITEM, a.H, MOE_ROWS_PER_ITEM * RM,
                            moe_tok1(a.tok1_max));
    const int wg = nsg + s_ig[nE] * MOE_WARPS * ksg;          /* every gate/up warp-item */
    const int wsd = wg + (sh ? a.H / MOE_TILE_ROWS : 0);      /* + the shared down's */
    const int wtot = wsd + s_id[nE] * MOE_WARPS;
    const size_t rtg = (size_t)ncg * 2 * moe_fp4_chunk_bytes(FMT), rtd = (size_t)ncd * moe_fp4_chunk_bytes(FMT);
    const unsigned need = (unsigned)(a.I / MOE_TILE_ROWS);   /* gate/up tiles of one token chunk of an expert */
    constexpr int SF = SMALL ? MOE_STATIC_FIRST : MOE_STATIC_FIRST_L;
    auto take = [&]() {
        unsigned t = 0;
        if (lane == 0) t = atomicAdd(draw, 1u);
        return min(SF * nw + (int)__shfl_sync(0xffffffffu, t, 0), wtot);
    };
    /* routed gate/up warp-item w: its tile and K part */
    auto gu_part = [&](int w) { return GuPart{(w - nsg) / ksg, (w - nsg) % ksg}; };
    /* warp-item w: the shared expert's items carry e = E, r = its 16-row tile, its T rows from sh_row0 */
    auto decode = [&](int w) {
        if (SMALL && (w < nsg || (w >= wg && w < wsd)))
            return Item{a.E, w < nsg ? w / kss : w - wg, a.sh_row0, a.T};
        if (w < wg) {
            const int t = gu_part(w).tile;
            return decode_item<1>(s_ig, s_off, nE, t >> 2, t & 3, false);
        }
        return decode_item<1>(s_id, s_off, nE, (w - wsd) >> 2, (w - wsd) & 3, false);
    };
    if (a.fuse_early) moe_pdl_release();
    /* an early warp has taken its first own item (gw) already: its second (gw + nw) is next */
    int wi = SF >= 1 ? min(early ? gw + nw : gw, wtot) : take();
    int wn = wi >= wtot ? wtot : SF >= 2 && !early ? min(gw + nw, wtot) : take();
    unsigned pend = 0;   /* lane 0: the ticket drawn for the item after wn */
    bool primed = false;
    Item cur = decode(wi < wtot ? wi : 0);
    while (wi < wtot) {
        if (lane == 0 && wn < wtot) pend = atomicAdd(draw, 1u);
        const Item nxt = decode(wn < wtot ? wn : wi);
        const int e = cur.e, r = cur.r, p0 = cur.p0, ntok = cur.ntok;
        float acc[2][1][4];
        if (SMALL && wi < nsg) {   /* shared gate/up: FP8 16-row tile r, K part wi % kss */
            shared_gu(wi);
            primed = false;
        } else if (SMALL && wi >= wg && wi < wsd) {   /* shared down: FP8 16-row tile r, once the shared h is complete */
            int prow[1] = {p0 + (g < ntok ? g : 0)};
            fp8_rowtile<1, 4, 1, 1, 1>(a.sh_w2 + (size_t)r * ncd * MOE_FP8_CHUNK_BYTES, a.I, 0, ncd,
                                       a.sh_s2 + (size_t)(r * MOE_TILE_ROWS / 128) * ncd, 0, ring, h, NULL, prow, acc,
                                       MOE_DONE(a.tickets, DONE_KEY(e, p0)), need);
            primed = false;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                if (n < ntok) y[(size_t)(p0 + n) * a.H + row] = acc[0][0][i];
            }
        } else if (SMALL && RM == 2) {   /* routed gate/up (a K part) or down (2 tiles): one copy of the FP4 loop, so
                                            the instruction cache holds one routed loop instead of two (two: 2-6 %
                                            slower at batches 1-8) */
            const bool gu = wi < wg;
            int prow[1] = {p0 + (g < ntok ? g : 0)};
            const GuPart gp = gu_part(wi), gq = gu_part(wn);   /* this item's and the next's (where gate/up) */
            const size_t pb = (size_t)ncp * 2 * moe_fp4_chunk_bytes(FMT);   /* bytes of a gate/up K part */
            const bool has_next = gu ? wn < wg && ncp % D == 0 : wn < wtot && ncd % D == 0;
            const uint8_t *rt = gu ? a.w13 + (size_t)e * a.w13_stride + (size_t)r * rtg + gp.part * pb
                                   : a.w2 + (size_t)e * a.w2_stride + (size_t)r * 2 * rtd;
            const uint8_t *nrt = !has_next ? NULL
                                 : gu ? a.w13 + (size_t)nxt.e * a.w13_stride + (size_t)nxt.r * rtg + gq.part * pb
                                      : a.w2 + (size_t)nxt.e * a.w2_stride + (size_t)nxt.r * 2 * rtd;
            fp4_rowtile<FMT, 2, D, 1, 1, 1, 1, 0, ER>(
                rt, gu ? ncp * 128 : a.I, ring, gu ? x + gp.part * ncp * 128 : h, gu ? pair_tok : NULL, prow, acc,
                primed, nrt, gu ? 1 : ncd, gu ? nullptr : MOE_DONE(a.tickets, DONE_KEY(e, p0)), need, gu ? a.H : 0);
            primed = has_next;
            if (gu) {
                if (ksg == 1 || part_reduce<2>(acc, a.part + (size_t)(tiles_sh + gp.tile) * MOE_PARTS_MAX * 256,
                                               a.pcnt + tiles_sh + gp.tile, gp.part, ksg, lane)) {
                    const float pg = a.post13[2 * e], pu = a.post13[2 * e + 1];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                        if (n < ntok)
                            h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(
                                moe_swiglu(acc[0][0][i] * pg, acc[1][0][i] * pu, a.limit) * pair_w[p0 + n]);
                    }
                    __syncwarp();
                    if (lane == 0) {
                        __threadfence();
                        atomicAdd(MOE_DONE(a.tickets, DONE_KEY(e, p0)), 1u);
                    }
                }
            } else {
                const float post = a.post2[e];
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int row = (r * 2 + m) * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                        if (n < ntok) y[(size_t)(p0 + n) * a.H + row] = acc[m][0][i] * post;
                    }
            }
        } else if (wi < wg) {   /* gate/up: 16 rows of gate and of up for one <= 8-token chunk of the expert */
            const int part = SMALL ? (wi - nsg) % ksg : 0;
            int prow[1] = {p0 + (g < ntok ? g : 0)};
            const bool has_next = wn < wg && (!SMALL || wn >= nsg) && ncp % D == 0;
            const int npart = SMALL ? (wn - nsg) % ksg : 0;
            const uint8_t *rt = a.w13 + (size_t)e * a.w13_stride + (size_t)r * rtg +
                                (size_t)part * ncp * 2 * moe_fp4_chunk_bytes(FMT);
            const uint8_t *nrt = has_next ? a.w13 + (size_t)nxt.e * a.w13_stride + (size_t)nxt.r * rtg +
                                                (size_t)npart * ncp * 2 * moe_fp4_chunk_bytes(FMT)
                                          : NULL;
            fp4_rowtile<FMT, 2, D, 1, 0, 0, 0, 0, ER>(rt, ncp * 128, ring, x + part * ncp * 128, pair_tok, prow, acc,
                                                      primed, nrt, 1, nullptr, 0, a.H);
            primed = has_next;
            const int tile = SMALL ? (wi - nsg) / ksg : 0;
            if (!SMALL || ksg == 1 ||
                part_reduce<2>(acc, a.part + (size_t)(tiles_sh + tile) * MOE_PARTS_MAX * 256, a.pcnt + tiles_sh + tile,
                               part, ksg, lane)) {
                const float pg = a.post13[2 * e], pu = a.post13[2 * e + 1];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                    if (n < ntok)
                        h[(size_t)(p0 + n) * a.I + row] =
                            moe_f32_to_bf16(moe_swiglu(acc[0][0][i] * pg, acc[1][0][i] * pu, a.limit) * pair_w[p0 + n]);
                }
                __syncwarp();
                if (lane == 0) {
                    __threadfence();
                    atomicAdd(MOE_DONE(a.tickets, DONE_KEY(e, p0)), 1u);
                }
            }
        } else {   /* down: RM adjacent 16-row tiles of the expert's w2, once the h rows of its token chunk are
                      complete */
            int prow[1] = {p0 + (g < ntok ? g : 0)};
            const bool has_next = wn < wtot && ncd % DD == 0;
            const uint8_t *rt = a.w2 + (size_t)e * a.w2_stride + (size_t)r * RM * rtd;
            const uint8_t *nrt = has_next ? a.w2 + (size_t)nxt.e * a.w2_stride + (size_t)nxt.r * RM * rtd : NULL;
            fp4_rowtile<FMT, RM, DD, 1, 1, 1, 0, 0, ER>(rt, a.I, ring, h, NULL, prow, acc, primed, nrt,
                                                        RM == 2 ? ncd : 1, MOE_DONE(a.tickets, DONE_KEY(e, p0)), need);
            primed = has_next;
            const float post = a.post2[e];
#pragma unroll
            for (int m = 0; m < RM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int row = (r * RM + m) * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
                    if (n < ntok) y[(size_t)(p0 + n) * a.H + row] = acc[m][0][i] * post;
                }
        }
        wi = wn;
        cur = nxt;
        wn = wn < wtot ? min(SF * nw + (int)__shfl_sync(0xffffffffu, pend, 0), wtot) : wtot;
    }
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) {
        __threadfence();
        last = atomicAdd(fin, 1u) == gridDim.x * MOE_WARPS - 1;
    }
    if (__shfl_sync(0xffffffffu, last, 0)) {   /* every warp is done: reset for the next forward */
        for (int k = lane; k <= (SMALL ? a.E : a.sh_row0); k += 32) *MOE_DONE(a.tickets, k) = 0;   /* every key */
        if (lane == 0) {
            atomicExch(draw, 0u);
            atomicExch(fin, 0u);
        }
    }
    if (!SMALL) moe_pdl_wait();
    if (SMALL || !a.fuse_early) moe_pdl_release();
#undef DONE_KEY
}

/* per-warp rings + the block's copies of off[] and one or two item tables (E <= 512) */
static size_t smem_for(int E) { return (size_t)MOE_WARPS * EX_RING + 3 * (size_t)(E + 2) * 4; }

static cudaError_t raise_smem(const void *f, size_t bytes)
{
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

typedef void (*dn_fn)(moe_expert_args, const uint16_t *, const int32_t *, float *);

/* the down kernel of rm 16-row tiles per warp */
template <int NT, int SH = 1>
static dn_fn dn_pick(int fmt, int rm)
{
    if (fmt == MOE_FP4_NVFP4) return rm == 2 ? k_down<MOE_FP4_NVFP4, NT, 2, SH> : k_down<MOE_FP4_NVFP4, NT, 1, SH>;
    return rm == 2 ? k_down<MOE_FP4_MXFP4, NT, 2, SH> : k_down<MOE_FP4_MXFP4, NT, 1, SH>;
}

/* Whether a 2-tile launch of these arguments carries the shared expert's items (then the SH 1 forms) */
static int nt2_shared(const moe_expert_args *a, int T) { return a->has_shared && moe_tok_tiles(T) == 2; }
typedef void (*gu_fn)(moe_expert_args, const uint16_t *, const int32_t *, const int32_t *, const float *, uint16_t *);
static gu_fn gu2_pick(int fmt, int sh)
{
    if (fmt == MOE_FP4_NVFP4) return sh ? k_gate_up<MOE_FP4_NVFP4, 2, 1> : k_gate_up<MOE_FP4_NVFP4, 2, 0>;
    return sh ? k_gate_up<MOE_FP4_MXFP4, 2, 1> : k_gate_up<MOE_FP4_MXFP4, 2, 0>;
}
static dn_fn dn2_pick(int fmt, int rm, int sh)
{
    return sh ? dn_pick<2, 1>(fmt, rm) : dn_pick<2, 0>(fmt, rm);
}
/* the wide kernels (X4, MOE_NTW n-tiles): routed experts only, so never the FP8 branch */
static gu_fn gu_wide_pick(int fmt)
{
    return fmt == MOE_FP4_NVFP4 ? k_gate_up<MOE_FP4_NVFP4, MOE_NTW, 0> : k_gate_up<MOE_FP4_MXFP4, MOE_NTW, 0>;
}

/* Raises the dynamic shared memory of the NT-tile gate/up and both downs (SH: the forms with the FP8 branch) and reads
 * their blocks per SM (the down's from the 64-row form: the 128-row one has the same launch bounds). */
template <int NT, int SH>
static cudaError_t occupancy_forms(int fmt, int E, int *gu, int *dn)
{
    const void *fg = fmt == MOE_FP4_NVFP4 ? (const void *)k_gate_up<MOE_FP4_NVFP4, NT, SH>
                                          : (const void *)k_gate_up<MOE_FP4_MXFP4, NT, SH>;
    const size_t sm = smem_for(E);
    cudaError_t e;
    if ((e = raise_smem(fg, smem_for(512))) != cudaSuccess) return e;
    for (int rm = 1; rm <= 2; rm++)
        if ((e = raise_smem((const void *)dn_pick<NT, SH>(fmt, rm), smem_for(512))) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(gu, fg, 128, sm)) != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(dn, (const void *)dn_pick<NT, SH>(fmt, 1), 128, sm);
}

extern "C" cudaError_t moe_expert_occupancy(int fmt, int E, int nt, int *gu, int *dn)
{
    if (nt == 4) return occupancy_forms<MOE_NTW, 0>(fmt, E, gu, dn);   /* the wide kernels: no FP8 branch */
    if (nt == 1) return occupancy_forms<1, 1>(fmt, E, gu, dn);
    int g0, d0;   /* 2 tiles: the forms without the FP8 branch too (same launch bounds), read from those with it */
    const cudaError_t e = occupancy_forms<2, 0>(fmt, E, &g0, &d0);
    return e != cudaSuccess ? e : occupancy_forms<2, 1>(fmt, E, gu, dn);
}

/* Upper bounds on a routed launch's items, so a small batch does not start a full persistent grid whose idle blocks
 * only wait and leave: the 1-tile kernel has at most one item chunk per pair; the 2-tile kernel takes experts with
 * > 8 tokens (> tok1_max with the chunks: a subset), 16 per item, or every expert (all2: tok1_max < 0); the wide
 * kernel experts with > wide tokens, 8 * MOE_NTW per item (moe_items_bound, moe_grid.h; exact for the 2-tile
 * launches since , whose P / 9 gave skewed 17 11 blocks per row group for 12 items, 121 us against 18's 100; a
 * looser 2 P / 17 cost skewed 18 2.5 % in idle blocks, `sluice-bench moe`). */
static int routed_grid(int grid, int nt, int T, int topk, int row_groups, int has_shared, bool all2 = false, int wide = 0)
{
    const long P = (long)T * topk;
    long cap = (nt >= 4   ? moe_items_bound(P, T, wide + 1, MOE_TOK_CHUNK * MOE_NTW)
                : nt == 1 || all2 ? P
                                  : moe_items_bound(P, T, MOE_TOK_CHUNK + 1, MOE_TOK_CHUNK * 2)) *
               row_groups;
    if (has_shared && moe_tok_tiles(T) == nt)   /* + the shared expert's items: 16-row tiles x token chunks */
        cap += (long)((T + MOE_TOK_CHUNK * nt - 1) / (MOE_TOK_CHUNK * nt)) * row_groups * MOE_WARPS;
    return cap < grid ? (int)(cap > 0 ? cap : 1) : grid;
}

/* (X4): whether these arguments have wide launches (a batch in which an expert can have more than wide_min
 * tokens); they follow each stage's 2-tile launch (moe_gate_up / moe_down; moe_experts_fused1: see wide_early). */
static bool has_wide(const moe_expert_args *a, int T) { return a->wide_min > 0 && T > a->wide_min; }
static bool wide_ok(const moe_expert_args *a)
{
    return a->wide_min <= 0 || (a->wide_min >= 2 * MOE_TOK_CHUNK && a->wide_min >= a->tok1_max);
}

/* One stage's launches (moe_gate_up: overlap bit 1, moe_down: bit 2), one: its 1-tile launch, two: its 2-tile one.
 * T <= 8: the 1-tile launch alone (no expert has more than 8 tokens). tok1_max < 0 (T > 8): every routed expert
 * with tokens 2-tile, without overlap (that launch would not wait for the lists); the 1-tile launch only where it
 * has the shared expert's items (below 256 tokens, moe_tok_tiles). Otherwise both, the 2-tile one first with
 * nt2_first unless it overlaps. */
template <class One, class Two>
static cudaError_t stage_launches(const moe_expert_args *a, int T, int ov_bit, One one, Two two)
{
    if (!wide_ok(a)) return cudaErrorInvalidValue;
    if (a->tok1_max < 0) {
        if (T <= MOE_TOK_CHUNK || (a->overlap & ov_bit)) return cudaErrorInvalidValue;
        const cudaError_t e = a->has_shared && moe_tok_tiles(T) == 1 ? one() : cudaSuccess;
        return e != cudaSuccess ? e : two();
    }
    if (T <= MOE_TOK_CHUNK) return one();
    const bool first2 = a->nt2_first && !(a->overlap & ov_bit);
    const cudaError_t e = first2 ? two() : one();
    return e != cudaSuccess ? e : first2 ? one() : two();
}

/* the wide launches of a stage (X4) */
static cudaError_t gate_up_wide(const moe_expert_args *a, const uint16_t *x, const int32_t *off, const int32_t *pair_tok,
                            const float *pair_w, int T, int topk, const int grid[3], uint16_t *h, cudaStream_t st)
{
    return moe_launch(gu_wide_pick(a->fmt), dim3(routed_grid(grid[2], 4, T, topk, a->I / MOE_ROWS_PER_ITEM, 0, false, a->wide_min)),
                      dim3(128), smem_for(a->E), st, *a, x, off, pair_tok, pair_w, h);
}
static cudaError_t down_wide(const moe_expert_args *a, const uint16_t *h, const int32_t *off, int T, int topk, const int grid[3],
                         int rm, float *y, cudaStream_t st)
{
    return moe_launch(dn_pick<MOE_NTW, 0>(a->fmt, rm),
                      dim3(routed_grid(grid[2], 4, T, topk, a->H / (MOE_ROWS_PER_ITEM * rm), 0, false, a->wide_min)),
                      dim3(128), smem_for(a->E), st, *a, h, off, y);
}

extern "C" cudaError_t moe_gate_up(const moe_expert_args *a, const uint16_t *x, const int32_t *off,
                                   const int32_t *pair_tok, const float *pair_w, const int32_t *items, int T,
                                   int topk, const int grid[3], uint16_t *h, cudaStream_t st)
{
    (void)items;
    if (a->H % 128 || a->I % MOE_ROWS_PER_ITEM || a->H > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->E);
    const int rg = a->I / MOE_ROWS_PER_ITEM;
    const int g0 = routed_grid(grid[0], 1, T, topk, rg, a->has_shared);
    const bool nv = a->fmt == MOE_FP4_NVFP4;
    auto one = [&] {
        return moe_launch(nv ? k_gate_up<MOE_FP4_NVFP4, 1> : k_gate_up<MOE_FP4_MXFP4, 1>, dim3(g0), dim3(128), sm, st,
                          *a, x, off, pair_tok, pair_w, h);
    };
    auto two = [&] {
        const int sh = nt2_shared(a, T);
        return moe_launch(gu2_pick(a->fmt, sh), dim3(routed_grid(grid[1], 2, T, topk, rg, a->has_shared, a->tok1_max < 0)),
                          dim3(128), sm, st, *a, x, off, pair_tok, pair_w, h);
    };
    const cudaError_t e = stage_launches(a, T, 1, one, two);
    return e != cudaSuccess || !has_wide(a, T) ? e : gate_up_wide(a, x, off, pair_tok, pair_w, T, topk, grid, h, st);
}

extern "C" cudaError_t moe_down(const moe_expert_args *a, const uint16_t *h, const int32_t *off, const int32_t *items,
                                int T, int topk, const int grid[3], float *y, cudaStream_t st)
{
    (void)items;
    if (a->I % 128 || a->H % (MOE_ROWS_PER_ITEM * (a->down_rm == 2 ? 2 : 1)) || a->I > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->E);
    const int rm = a->down_rm == 2 ? 2 : 1, rg = a->H / (MOE_ROWS_PER_ITEM * rm);
    const int g0 = routed_grid(grid[0], 1, T, topk, rg, a->has_shared);
    auto one = [&] { return moe_launch(dn_pick<1>(a->fmt, rm), dim3(g0), dim3(128), sm, st, *a, h, off, y); };
    auto two = [&] {
        return moe_launch(dn2_pick(a->fmt, rm, nt2_shared(a, T)),
                          dim3(routed_grid(grid[1], 2, T, topk, rg, a->has_shared, a->tok1_max < 0)), dim3(128), sm, st,
                          *a, h, off, y);
    };
    const cudaError_t e = stage_launches(a, T, 2, one, two);
    return e != cudaSuccess || !has_wide(a, T) ? e : down_wide(a, h, off, T, topk, grid, rm, y, st);
}

typedef void (*e1_fn)(moe_expert_args, const uint16_t *, const int32_t *, const int32_t *, const float *, uint16_t *,
                      float *);

/* The fused kernel for format fmt, down tiles per warp-item rm, T <= 8 (small: 1, MOE_MINB_S blocks per SM; 2,
 * MOE_MINB_S5, rm 2 only: at 96 registers the rm 1 form spills) or not (0: always 2 tiles). */
static e1_fn experts1_fn(int fmt, int rm, int small)
{
    const bool nv = fmt == MOE_FP4_NVFP4;
    if (small == 2) return nv ? k_experts1<MOE_FP4_NVFP4, 2, 2> : k_experts1<MOE_FP4_MXFP4, 2, 2>;
    if (small)
        return rm == 1 ? (nv ? k_experts1<MOE_FP4_NVFP4, 1, 1> : k_experts1<MOE_FP4_MXFP4, 1, 1>)
                       : (nv ? k_experts1<MOE_FP4_NVFP4, 2, 1> : k_experts1<MOE_FP4_MXFP4, 2, 1>);
    return nv ? k_experts1<MOE_FP4_NVFP4, 2, 0> : k_experts1<MOE_FP4_MXFP4, 2, 0>;
}

/* The lowest down tiles per warp-item (rm) a form of k_experts1 exists in (experts1_fn): 1 for the 4-block T <= 8
 * form (small 1), 2 for the T > 8 form (small 0, its 128-row down items) and the 5-block form (small 2: its rm 1
 * form spilled, `sluice-bench moe`); every form has rm 2. */
static int experts1_rm_lo(int small) { return small == 1 ? 1 : 2; }

extern "C" cudaError_t moe_experts1_occupancy(int fmt, int E, int small, int *blocks_per_sm)
{
    int lo = 1 << 30;
    for (int rm = experts1_rm_lo(small); rm <= 2; rm++) {
        const void *f = (const void *)experts1_fn(fmt, rm, small);
        int per;
        cudaError_t e;
        if ((e = raise_smem(f, smem_for(512))) != cudaSuccess ||
            (e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, 128, smem_for(E))) != cudaSuccess)
            return e;
        lo = per < lo ? per : lo;
    }
    *blocks_per_sm = lo;
    return cudaSuccess;
}

extern "C" cudaError_t moe_experts_fused1(const moe_expert_args *a, const uint16_t *x, const int32_t *off,
                                          const int32_t *pair_tok, const float *pair_w, int T, int topk,
                                          const int grid[3], int grid_fused, uint16_t *h, float *y, cudaStream_t st)
{
    const bool small = T <= MOE_TOK_CHUNK && a->one_launch;
    if (!a->tickets || a->tok1_max < 0 || (a->has_shared && !small) || a->H % 128 || a->I % MOE_ROWS_PER_ITEM ||
        a->H % (2 * MOE_ROWS_PER_ITEM) || a->H > 8192 || a->I > 8192 || grid_fused < 1)
        return cudaErrorInvalidValue;
    const int ksg = small ? a->ks_gu : 1, kss = small && a->has_shared ? a->ks_sh : 1;
    if (ksg < 1 || ksg > MOE_PARTS_MAX || (a->H / 128) % ksg || kss < 1 || kss > MOE_PARTS_MAX || (a->H / 128) % kss ||
        ((ksg > 1 || kss > 1) && (!a->part || !a->pcnt)) || !wide_ok(a) || (small && has_wide(a, T)) ||
        a->wide_early < 0 || a->wide_early > 2)
        return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->E);
    moe_expert_args b = *a;
    b.overlap = 0;
    b.early = 1;
    b.T = T;
    b.sh_row0 = T * topk;   /* the shared expert's rows follow the routed pairs, as moe_cuda's ysh */
    if (small) {   /* the whole expert work in one launch; it waits on the lists itself */
        b.ks_gu = ksg;
        b.ks_sh = kss;
        b.fuse_early = a->fuse_early ? 1 : 0;   /* release the combine right after the wait on the lists */
        const int rm = a->down_rm == 1 ? 1 : 2;
        const int form = a->one_launch == 2 ? 2 : 1;   /* experts1_fn's small: the 4- or the 5-block form */
        if (rm < experts1_rm_lo(form)) return cudaErrorInvalidValue;   /* the 5-block form has rm 2 only */
        b.down_rm = rm;
        /* at most: every pair's gate/up tiles x K parts and down items, the shared expert's items */
        const long P = (long)T * topk, tg = a->I / MOE_TILE_ROWS, td = a->H / MOE_TILE_ROWS;
        const long items = P * (tg * ksg + td / rm) + (a->has_shared ? tg * kss + td : 0);
        const int nb = (int)(items / MOE_WARPS + 1 < grid_fused ? items / MOE_WARPS + 1 : grid_fused);
        return moe_launch(experts1_fn(a->fmt, rm, form), dim3(nb), dim3(128), sm, st, b, x, off, pair_tok, pair_w, h,
                          y);
    }
    b.ks_gu = b.ks_sh = 1;
    b.down_rm = 2;
    const int rg = a->I / MOE_ROWS_PER_ITEM;
    /* the 2-tile gate/up first: it waits on the lists and then releases the fused launch (its grid held to
     * 1-2 blocks per SM so the fused launch's blocks join from the start gained 0.5 % at 256) */
    cudaError_t e = moe_launch(gu2_pick(a->fmt, 0),   /* no shared items in this path */
                               dim3(routed_grid(grid[1], 2, T, topk, rg, 0)), dim3(128), sm, st, b, x, off,
                               pair_tok, pair_w, h);
    if (e != cudaSuccess) return e;
    /* (X4): the wide stages after the 2-tile down: before the fused launch, the wide gate/up's blocks waited on
       the 2-tile gate/up and held the fused launch until it ended. (wide_early, with idle_exit, where the
       wide gate/up's blocks without items exit at once): 1, the wide gate/up right after the 2-tile one (the fused
       launch, which does not wait at its start, is then released by it at its start, which is after the lists
       completed); 2, right after the fused launch. */
    const bool wide = has_wide(&b, T);
    const int at = wide ? b.wide_early : 0;   /* 0: after the 2-tile down (b.early is 1 here) */
    auto gu_wide = [&] { return gate_up_wide(&b, x, off, pair_tok, pair_w, T, topk, grid, h, st); };
    if (at == 1 && (e = gu_wide()) != cudaSuccess) return e;
    e = moe_launch(experts1_fn(a->fmt, 2, 0), dim3(grid_fused), dim3(128), sm, st, b, x, off, pair_tok, pair_w, h, y);
    if (e != cudaSuccess || (at == 2 && (e = gu_wide()) != cudaSuccess)) return e;
    e = moe_launch(dn2_pick(a->fmt, 2, 0), dim3(routed_grid(grid[1], 2, T, topk, a->H / (MOE_ROWS_PER_ITEM * 2), 0)),
                   dim3(128), sm, st, b, (const uint16_t *)h, off, y);
    if (e != cudaSuccess || !wide || (at == 0 && (e = gu_wide()) != cudaSuccess)) return e;
    return down_wide(&b, (const uint16_t *)h, off, T, topk, grid, 2, y, st);
}

/* The shared expert for all tokens (moe_shared_experts). Block = (token group of 8 * NTT, 64 rows);
 * each of its 4 warps owns a 16-row tile for the whole K and applies every dequantised FP8 fragment to
 * NTT n-tiles. Weights: per-warp rings filled by cp.async, D chunks ahead. Activations: the block's
 * 8 * NTT token rows of each 128-input chunk are staged once in shared memory (cp.async by all threads,
 * D chunks ahead, rows padded to 272 bytes so the fragment reads are conflict-free) and shared by the
 * 4 warps. The token group varies fastest over blockIdx, so the blocks of one row group run together
 * and read its weights from HBM once. NM 2: gate/up (x -> swiglu -> h), NM 1: down (h -> y). */
#define SH_XSTRIDE 136   /* bf16 per staged activation row: 128 + 8 of padding */
#define SH_D 4           /* chunks in flight per warp (weights) and per block (activations); A/B: 2 the
                            same within noise (3 blocks per SM), 8 4-6 % slower at batch 512 */
/* n-tiles of 8 tokens per block: gate/up and down, up to 64 tokens (_S) and above (_L) */
#define SH_GU_NTT_S 2
#define SH_DN_NTT_S 2
#define SH_GU_NTT_L 4
#define SH_DN_NTT_L 8
#define SH_GU_NTT_XL 8   /* gate/up from moe_expert_args.sh_xl_min_t tokens (one block per SM: 134 KB of shared memory) */
/* The shared expert's results of a warp's 16-row tile r for tokens t0 + 0..8 NT - 1 (< T): NM 2 h = swiglu(gate, up)
 * as bf16, NM 1 y in fp32, both at the shared pairs' rows (T * topk + t). */
template <int NM, int NT>
__device__ __forceinline__ void shared_store(const moe_expert_args &a, const float acc[NM][NT][4], int r, int t0, int T,
                                             int topk, uint16_t *h, float *y)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), t = t0 + j * 8 + 2 * q + (i & 1);
            if (t >= T) continue;
            if (NM == 2)
                h[((size_t)T * topk + t) * a.I + row] = moe_f32_to_bf16(moe_swiglu(acc[0][j][i], acc[NM - 1][j][i], a.limit));
            else
                y[((size_t)T * topk + t) * a.H + row] = acc[0][j][i];
        }
}

template <int NM, int NTT>
__global__ void __launch_bounds__(128, SH_D <= 2 ? 3 : (SH_D >= 8 ? 1 : 2))
    k_shared_fp8(moe_expert_args a, const uint16_t *xin, int T, int topk, uint16_t *h, float *y)
{
    const MoeTrace trace_(NM == 2 ? MOE_TR_SH_GU : MOE_TR_SH_DN);
    constexpr int D = SH_D, XR = 8 * NTT;
    extern __shared__ __align__(16) uint8_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int K = NM == 2 ? a.H : a.I, nc = K / 128, r = blockIdx.y * MOE_WARPS + warp, t0 = blockIdx.x * XR;
    const uint8_t *rt = (NM == 2 ? a.sh_w13 : a.sh_w2) + (size_t)r * nc * NM * MOE_FP8_CHUNK_BYTES;
    const float *bscale = (NM == 2 ? a.sh_s13 : a.sh_s2) + (size_t)(r * 16 / 128) * nc;
    const int bstride = (a.I / 128) * (a.H / 128);
    uint8_t *ring = smem + warp * (D * NM * MOE_FP8_CHUNK_BYTES);
    uint16_t *xs = (uint16_t *)(smem + MOE_WARPS * D * NM * MOE_FP8_CHUNK_BYTES);   /* [D][XR][SH_XSTRIDE] */
    const size_t base = NM == 2 ? 0 : (size_t)T * topk;   /* down reads the shared pairs' h rows */
    /* the weights do not depend on the previous kernel: the first D chunks go out before the wait */
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < nc) fp8_issue<NM>(ring, s, rt, s, lane);
    moe_pdl_wait();
    if (NM == 1) moe_pdl_release();
    /* the block's XR activation rows of chunk c into slot s, 16 bytes per thread and copy */
    auto stage_x = [&](int s, int c) {
#pragma unroll
        for (int i = 0; i < NTT; i++) {
            const int p = threadIdx.x + i * 128, row = p >> 4, pc = p & 15;
            cp_async16((uint8_t *)(xs + ((size_t)s * XR + row) * SH_XSTRIDE + pc * 8),
                 xin + (base + (size_t)min(t0 + row, T - 1)) * K + c * 128 + pc * 8);
        }
    };
    /* group s: weight chunk s (issued above) + activation chunk s */
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (s < nc) stage_x(s, s);
        cp_async_commit();
    }
    float acc[NM][NTT][4];
    acc_zero<NM, NTT>(acc);
    for (int c = 0; c < nc; c++) {
        const int s = c % D;
        cp_async_wait<D - 1>();
        __syncthreads();   /* every thread's activation copies of chunk c have landed */
        const uint16_t *xsl = xs + ((size_t)s * XR + g) * SH_XSTRIDE + 8 * q;
        fp8_chunk<NM, NTT>(ring, s, lane, [&](int grp, uint4 xv[NTT]) {
#pragma unroll
            for (int j = 0; j < NTT; j++) xv[j] = *(const uint4 *)(xsl + (size_t)8 * j * SH_XSTRIDE + grp * 32);
        }, bscale, bstride, c, acc);
        __syncthreads();   /* every warp is done with slot s before it is refilled */
        if (c + D < nc) {
            fp8_issue<NM>(ring, s, rt, c + D, lane);
            stage_x(s, c + D);
        }
        cp_async_commit();
    }
    shared_store<NM, NTT>(a, acc, r, t0, T, topk, h, y);
    /* the shared gate/up releases the shared down at its end (at its start, the down's blocks sat waiting on SM
       resources the router launches beside them need) */
    if (NM == 2) moe_pdl_release();
}

template <int NM, int NTT>
static cudaError_t shared_launch(const moe_expert_args *a, const uint16_t *x, int T, int topk, uint16_t *h, float *y,
                                 cudaStream_t st)
{
    static unsigned char raiseds[DEV_FLAG_MAX];   /* per device: the limit is the current device's */
    unsigned char *raised = dev_flag(raiseds);
    /* the warps' weight rings and the staged activations, SH_D chunks each */
    const size_t sm = (size_t)MOE_WARPS * SH_D * NM * MOE_FP8_CHUNK_BYTES + (size_t)SH_D * 8 * NTT * SH_XSTRIDE * 2;
    if (!raised || !*raised) {
        const cudaError_t e = raise_smem((const void *)k_shared_fp8<NM, NTT>, sm);
        if (e != cudaSuccess) return e;
        if (raised) *raised = 1;
    }
    const int rows = NM == 2 ? a->I : a->H;
    return moe_launch_prio(k_shared_fp8<NM, NTT>, dim3((T + 8 * NTT - 1) / (8 * NTT), rows / MOE_ROWS_PER_ITEM),
                           dim3(128), sm, st, a->sh_prio_on ? &a->sh_prio : (const int *)0, *a, x, T, topk, h, y);
}

/* wgmma (moe_shared_gemms' tensor-core form) runs on compute capability 9.0 only */
static bool sw_ok()
{
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0;
        ok = cudaGetDevice(&dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9;
    }
    return ok == 1;
}

#include "moe_shared_gemm.cuh"   /* (SG): moe_shared_gemms */

extern "C" cudaError_t moe_shared_experts(const moe_expert_args *a, const uint16_t *x, int T, int topk, uint16_t *h,
                                          float *y, cudaStream_t st)
{
    if (!a->has_shared || T < 1 || a->H % MOE_ROWS_PER_ITEM || a->I % MOE_ROWS_PER_ITEM || a->H % 128 || a->I % 128)
        return cudaErrorInvalidValue;
    /* tokens per block: more reuse of each dequantised fragment at large T; at 1-32 and 49-64 tokens (,
     * sh_tile_max_t) one block per 64-row group, so the router's launches beside it keep most SMs */
    cudaError_t e;
    /* the gate/up's blocks take T rounded up to 16, 32 or 64 tokens, the 64-token ones only above 48 (`sluice-bench moe`
       (4): at 48, a quarter of their work padding, random 48 +0.6 % and skewed 48 +6 % against 16-token blocks) */
    if (T <= a->sh_tile_max_t && (T <= 32 || T > 48))
        e = T <= 16   ? shared_launch<2, 2>(a, x, T, topk, h, y, st)
            : T <= 32 ? shared_launch<2, 4>(a, x, T, topk, h, y, st)
                      : shared_launch<2, 8>(a, x, T, topk, h, y, st);
    else
        e = T <= 64                                      ? shared_launch<2, SH_GU_NTT_S>(a, x, T, topk, h, y, st)
            : a->sh_xl_min_t > 0 && T >= a->sh_xl_min_t ? shared_launch<2, SH_GU_NTT_XL>(a, x, T, topk, h, y, st)
                                                        : shared_launch<2, SH_GU_NTT_L>(a, x, T, topk, h, y, st);
    if (e != cudaSuccess) return e;
    const uint16_t *hs = h;
    return T <= 64 ? shared_launch<1, SH_DN_NTT_S>(a, hs, T, topk, h, y, st)
                   : shared_launch<1, SH_DN_NTT_L>(a, hs, T, topk, h, y, st);
}

/* For topk <= CMB_MAXK every pair index, then every y row, is loaded before any is added (two dependent
 * memory round trips instead of two per routed pair); the sum keeps the same order. */
#define CMB_MAXK 8
__global__ void k_combine(const float *y, const int32_t *inv, const float *ysh, int T, int H, int topk, int inv_ready,
                          float *out)
{
    const MoeTrace trace_(MOE_TR_COMBINE);
    const int t = blockIdx.y;
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    const bool batch = topk <= CMB_MAXK && t < T && c < H;
    int p[CMB_MAXK];
    auto load_inv = [&] {   /* token t's pairs (through L2: another launch wrote them) */
#pragma unroll
        for (int k = 0; k < CMB_MAXK; k++) p[k] = k < topk ? __ldcg(inv + (size_t)t * topk + k) : -1;
    };
    if (batch && inv_ready) load_inv();   /* one dependent round trip fewer after the wait */
    moe_pdl_wait();
    moe_pdl_release();
    if (t >= T || c >= H) return;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    if (batch) {
        float4 v[CMB_MAXK];
        if (!inv_ready) load_inv();
#pragma unroll
        for (int k = 0; k < CMB_MAXK; k++)
            v[k] = p[k] >= 0 ? *(const float4 *)(y + (size_t)p[k] * H + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 vs = ysh ? *(const float4 *)(ysh + (size_t)t * H + c) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < CMB_MAXK; k++)
            if (p[k] >= 0) { s.x += v[k].x; s.y += v[k].y; s.z += v[k].z; s.w += v[k].w; }
        if (ysh) { s.x += vs.x; s.y += vs.y; s.z += vs.z; s.w += vs.w; }
        *(float4 *)(out + (size_t)t * H + c) = s;
        return;
    }
    for (int k = 0; k < topk; k++) {
        const int p = inv[(size_t)t * topk + k];
        if (p < 0) continue;
        const float4 v = *(const float4 *)(y + (size_t)p * H + c);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    if (ysh) {
        const float4 v = *(const float4 *)(ysh + (size_t)t * H + c);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    *(float4 *)(out + (size_t)t * H + c) = s;
}

extern "C" cudaError_t moe_combine(const float *y, const int32_t *inv, const float *ysh, int T, int H, int topk,
                                   int inv_ready, float *out, cudaStream_t st)
{
    if (H % 4) return cudaErrorInvalidValue;
    dim3 grid((H / 4 + 255) / 256, T);
    return moe_launch(k_combine, grid, dim3(256), 0, st, y, inv, ysh, T, H, topk, inv_ready ? 1 : 0, out);
}

/* MOE_CARVEOUT: percent of the unified L1 / shared memory given to shared memory, one setting for every
 * kernel of the layer, so blocks of different
 * kernels can share an SM. With the driver's choice the routed gate/up's blocks did not start on an SM
 * until the shared expert's gate/up block there had finished (stage trace at batch 64: routed start
 * 36 us, after the shared gate/up's end at 32.6, while the lists were done at 25); with 100 they start
 * at 29.6. A/B: 8 -2 %, 16 -2 %, 64 -3..-6 %, skewed 64 -8 %; 32 +2..4 %, skewed 8
 * +3.5 %; 1, 128, 256 equal. */
#define MOE_CARVEOUT 100
extern "C" cudaError_t moe_router_carveout(int pct);

extern "C" cudaError_t moe_kernels_carveout(void)
{
    const int p = MOE_CARVEOUT;
    const void *fs[] = {
        (const void *)k_gate_up<MOE_FP4_NVFP4, 1>, (const void *)k_gate_up<MOE_FP4_NVFP4, 2>,
        (const void *)k_gate_up<MOE_FP4_MXFP4, 1>, (const void *)k_gate_up<MOE_FP4_MXFP4, 2>,
        (const void *)dn_pick<1>(MOE_FP4_NVFP4, 1), (const void *)dn_pick<1>(MOE_FP4_NVFP4, 2),
        (const void *)dn_pick<2>(MOE_FP4_NVFP4, 1), (const void *)dn_pick<2>(MOE_FP4_NVFP4, 2),
        (const void *)dn_pick<1>(MOE_FP4_MXFP4, 1), (const void *)dn_pick<1>(MOE_FP4_MXFP4, 2),
        (const void *)dn_pick<2>(MOE_FP4_MXFP4, 1), (const void *)dn_pick<2>(MOE_FP4_MXFP4, 2),
        (const void *)gu2_pick(MOE_FP4_NVFP4, 0), (const void *)gu2_pick(MOE_FP4_MXFP4, 0),
        (const void *)dn2_pick(MOE_FP4_NVFP4, 1, 0), (const void *)dn2_pick(MOE_FP4_NVFP4, 2, 0),
        (const void *)dn2_pick(MOE_FP4_MXFP4, 1, 0), (const void *)dn2_pick(MOE_FP4_MXFP4, 2, 0),
        (const void *)experts1_fn(MOE_FP4_NVFP4, 2, 0), (const void *)experts1_fn(MOE_FP4_NVFP4, 1, 1),
        (const void *)experts1_fn(MOE_FP4_NVFP4, 2, 1), (const void *)experts1_fn(MOE_FP4_MXFP4, 2, 0),
        (const void *)experts1_fn(MOE_FP4_MXFP4, 1, 1), (const void *)experts1_fn(MOE_FP4_MXFP4, 2, 1),
        (const void *)experts1_fn(MOE_FP4_NVFP4, 2, 2), (const void *)experts1_fn(MOE_FP4_MXFP4, 2, 2),
        (const void *)k_shared_fp8<2, SH_GU_NTT_S>, (const void *)k_shared_fp8<2, SH_GU_NTT_L>,
        (const void *)k_shared_fp8<1, SH_DN_NTT_S>, (const void *)k_shared_fp8<1, SH_DN_NTT_L>,
        (const void *)k_shared_fp8<2, SH_GU_NTT_XL>,   /* it had the driver's carveout (`sluice-bench moe`: 512 equal) */
        (const void *)k_shared_fp8<2, 2>, (const void *)k_shared_fp8<2, 4>, (const void *)k_shared_fp8<2, 8>,   /* HT */
        (const void *)k_shared_gemm<1, 0>, (const void *)k_shared_gemm<0, 0>,
        (const void *)k_shared_gemm<1, 1>, (const void *)k_shared_gemm<0, 1>,
        (const void *)k_shared_gemm_tma<1>, (const void *)k_shared_gemm_tma<0>,
        (const void *)k_combine,
    };
    for (const void *f : fs) {
        const cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, p);
        if (e != cudaSuccess) return e;
    }
    return moe_router_carveout(p);
}

extern "C" cudaError_t moe_trace_set_router(unsigned long long *buf);

extern "C" cudaError_t moe_trace_set(unsigned long long *buf)
{
    const cudaError_t e = cudaMemcpyToSymbol(g_moe_trace, &buf, sizeof buf);
    return e != cudaSuccess ? e : moe_trace_set_router(buf);
}
