/* moe_expert_dev.cuh — device building blocks of the MoE expert kernels (moe_expert.cu):
 * the per-warp cp.async weight ring, FP4/FP8 row-tile streams with mma.sync, the K-split reduction and
 * the work-item decoding. See moe_expert.cu's header for the design.
 */
#ifndef SLUICE_MOE_EXPERT_DEV_CUH
#define SLUICE_MOE_EXPERT_DEV_CUH

#include <stdint.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"
#include "common/wgmma_sm90.cuh"
#define RING_WARP_BYTES (10 * 1024)   /* per-warp shared-memory ring of weight chunks */
/* n-tiles of the wide kernels (moe_expert_args.wide_min): 64-token items, their activations single-buffered
 * (fp4_rowtile XSB); `sluice-bench moe`: skewed 512 -15.5 % against 4 n-tiles double-buffered */
#define MOE_NTW 8


/* A lane's activation fragments for one 128-input chunk: 4 x 16 bytes of its token's row (L1-cached;
 * the 4 warps of a block read the same rows). */
template <int NT>
struct XFrag {
    uint4 v[NT][4];   /* n-tile j: token row j*8 + g */
};
/* acc[][][] = 0: NM matrices x NT n-tiles of mma accumulators */
template <int NM, int NT>
__device__ __forceinline__ void acc_zero(float acc[NM][NT][4])
{
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
}

/* XL bit 0: activations through L2 only (__ldcg) instead of the read-only path, bit 1: the same for
 * the pair -> token table; for data other blocks of the same kernel wrote (k_experts1) */
template <int NT, int XL = 0>
__device__ __forceinline__ void load_x(XFrag<NT> &x, const uint16_t *const xrow[NT], int c, int q)
{
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 *p = (const uint4 *)(xrow[j] + c * 128 + i * 32 + 8 * q);
            x.v[j][i] = (XL & 1) ? __ldcg(p) : __ldg(p);
        }
}

/* One thread polls *ctr (relaxed, device scope, backing off up to MOE_POLL_MAX ns) until it reaches need,
 * then one acquire load; the callers then order the rest of their block or warp after it. */
#define MOE_POLL_MAX 256
__device__ __forceinline__ void moe_poll_count(const unsigned *ctr, unsigned need)
{
    unsigned v, ns = 32;
    for (;;) {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        if (v >= need) break;
        __nanosleep(ns);
        if (ns < MOE_POLL_MAX) ns <<= 1;
    }
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
}

/* Dependency wait by a whole block of MOE_WARPS warps working on one item: thread 0
 * polls, then a block barrier (named barrier 1, so the block's other __syncthreads are not involved).
 * One poller per block: many warps spinning on one L2 line starve everything else that lives there. */
__device__ __forceinline__ void moe_wait_count(const unsigned *ctr, unsigned need)
{
    if (threadIdx.x == 0) moe_poll_count(ctr, need);
    asm volatile("bar.sync 1, %0;" ::"n"(MOE_WARPS * 32) : "memory");
}

/* The same wait by one warp for its own item (moe_experts_fused1): lane 0 polls, then __syncwarp orders
 * the other lanes' reads after its acquire. */
__device__ __forceinline__ void moe_wait_count_warp(const unsigned *ctr, unsigned need)
{
    if ((threadIdx.x & 31) == 0) moe_poll_count(ctr, need);
    __syncwarp();
}

/* ---- FP4 stream: one warp, 16 rows, NM interleaved matrices, K inputs.
 * Weight chunks go HBM -> shared memory by cp.async (D chunks in flight per warp, each lane copies
 * and later reads back only its own 16-byte pieces, so no barrier is needed), then into registers. */
template <int NM>
struct Fp4Stage {
    uint4 w[NM][2];
    uint2 s[NM];      /* scale codes: rows g (x) and g+8 (y), byte 2u + grp */
};

/* Chunk c of matrix m sits at rowtile + (c * NM + m) * chunk bytes when mmul == 1 (gate/up: w1 and
 * w3 interleaved), at rowtile + (c + m * mmul) * chunk bytes otherwise (down with two 16-row tiles
 * per warp: m = the second tile, mmul = K/128 chunks further on). */
template <int FMT, int NM>
__device__ __forceinline__ void fp4_issue(uint8_t *ring, int slot, const uint8_t *rowtile, int c, int lane, int mmul)
{
    const size_t cb = moe_fp4_chunk_bytes(FMT);
    const int cmul = mmul == 1 ? NM : 1;
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const uint8_t *ch = rowtile + ((size_t)c * cmul + (size_t)m * mmul) * cb;
        uint8_t *d = ring + (slot * NM + m) * 1280;
        cp_async16(d + lane * 16, ch + lane * 16);
        cp_async16(d + 512 + lane * 16, ch + 512 + lane * 16);
        if (FMT == MOE_FP4_NVFP4) cp_async8(d + 1024 + lane * 8, ch + 1024 + (lane >> 2) * 16 + ((lane >> 1) & 1) * 8);
        else cp_async8(d + 1024 + lane * 8, ch + 1024 + (lane >> 2) * 8);
    }
}

template <int NM>
__device__ __forceinline__ void fp4_read(Fp4Stage<NM> &st, const uint8_t *ring, int slot, int lane)
{
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const uint8_t *d = ring + (slot * NM + m) * 1280;
        st.w[m][0] = *(const uint4 *)(d + lane * 16);
        st.w[m][1] = *(const uint4 *)(d + 512 + lane * 16);
        st.s[m] = *(const uint2 *)(d + 1024 + lane * 8);
    }
}

/* Half U of a chunk (16-byte piece U of each lane's weights; activation fragments v[2U], v[2U+1]). */
template <int NM, int NT, int U, int OR2 = 0>
__device__ __forceinline__ void fp4_compute_u(const Fp4Stage<NM> &st, const XFrag<NT> &x, float acc[NM][NT][4])
{
    {
        const int u = U;
#pragma unroll
        for (int grp = 0; grp < 2; grp++) {
#pragma unroll
            for (int m = 0; m < NM; m++) {
                const uint32_t f = moe_scale_factors2<NT == 1 || OR2>(st.s[m].x, st.s[m].y, 2 * u + grp);
#pragma unroll
                for (int step = 0; step < 2; step++) {
                    uint32_t p[4];
                    moe_fp4_word(u4get(st.w[m][u], grp * 2 + step), p);
                    const uint32_t a0 = moe_bf16x2_mul_lo(p[0], f), a1 = moe_bf16x2_mul_hi(p[1], f);
                    const uint32_t a2 = moe_bf16x2_mul_lo(p[2], f), a3 = moe_bf16x2_mul_hi(p[3], f);
#pragma unroll
                    for (int j = 0; j < NT; j++)   /* the dequantised fragment serves every n-tile */
                        mma_bf16(acc[m][j], a0, a1, a2, a3, u4get(x.v[j][u * 2 + grp], step * 2),
                                     u4get(x.v[j][u * 2 + grp], step * 2 + 1));
                }
            }
        }
    }
}

/* After chunk c's step: ring slot s takes chunk c + D of this row tile, or the first chunks of the next one (next,
 * when not NULL), then the step's commit group closes (empty when nothing was issued, so the wait counts hold). */
template <int FMT, int NM, int D>
__device__ __forceinline__ void fp4_refill(uint8_t *ring, int s, const uint8_t *rowtile, const uint8_t *next, int c,
                                           int nc, int lane, int mmul)
{
    if (c + D < nc) fp4_issue<FMT, NM>(ring, s, rowtile, c + D, lane, mmul);
    else if (next) fp4_issue<FMT, NM>(ring, s, next, c + D - nc, lane, mmul);
    cp_async_commit();
}

/* Issues the first D chunks of a row tile (what fp4_rowtile does when not primed). */
template <int FMT, int NM, int D>
__device__ __forceinline__ void fp4_prime(uint8_t *ring, const uint8_t *rowtile, int nc, int lane, int mmul)
{
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (s < nc) fp4_issue<FMT, NM>(ring, s, rowtile, s, lane, mmul);
        cp_async_commit();
    }
}

/* (fp4_rowtile ER): where a step refills its ring slot. 0: after the chunk's compute (D - 1 chunks in flight
 * while it computes); 1: right after the chunk's shared-memory reads, before its compute (D in flight; the slot's old
 * bytes are in registers: this lane's reads of its own pieces issue before its cp.async to them, whose data arrives
 * from L2 or HBM hundreds of cycles later). 1 in the T <= 8 kernel's 4-block form (`sluice-bench moe`: batch 8's
 * steady stream 3.7-4.0 -> 4.2-4.3 TB/s); the other kernels keep 0, since ER 1 spills in them (their register caps). */
/* Streams the K/128 chunks of one 16-row tile; D even (the activation double buffer follows s & 1).
 * primed: the first D chunks were already issued (and committed) by the previous item's tail.
 * next: the warp's next FP4 row tile (same shape) or NULL; when K/128 is a multiple of D the tail
 * of this tile issues the next tile's first D chunks, so the stream never drains between items. */
/* XL, wait/need: see load_x and moe_wait_count (wait: the producer count of xbase, checked after the
 * first weight chunks are on their way; WW 1: by this warp alone, moe_wait_count_warp); kx: the
 * activation row stride when it is not K (a K part). */
/* ROLL: see the loop below. OR2: the one-LOP3 scale factors with NT >= 2 (the kernels without the FP8 branch). */
template <int FMT, int NM, int D, int NT, int XL = 0, int WW = 0, int ROLL = 0, int OR2 = 0, int ER = 0>
__device__ __forceinline__ void fp4_rowtile(const uint8_t *rowtile, int K, uint8_t *ring, const uint16_t *xbase,
                                            const int32_t *rows_tok, const int prow[NT], float acc[NM][NT][4],
                                            bool primed, const uint8_t *next, int mmul,
                                            const unsigned *wait = nullptr, unsigned need = 0, int kx = 0)
{
    static_assert(D % 2 == 0 && D * NM * 1280 <= RING_WARP_BYTES, "ring");
    const int lane = threadIdx.x & 31, q = lane & 3, nc = K / 128;
    if (!primed) fp4_prime<FMT, NM, D>(ring, rowtile, nc, lane, mmul);
    if (wait) {
        if (WW) moe_wait_count_warp(wait, need);
        else moe_wait_count(wait, need);
    }
    /* activation row of this lane's token, looked up after the weight loads are on their way */
    const uint16_t *xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
        xrow[j] = xbase + (size_t)(rows_tok ? ((XL & 2) ? __ldcg(rows_tok + prow[j]) : rows_tok[prow[j]]) : prow[j]) *
                              (kx ? kx : K);
    /* XSB (the wide kernels): one activation buffer, chunk c's fragments loaded at its own step (the compiler
       hoists them above the ring wait) instead of one chunk ahead: 16 NT registers fewer */
    constexpr int XSB = NT >= 4;
    XFrag<NT> xb[XSB ? 1 : 2];
    if (!XSB) load_x<NT, XL>(xb[0], xrow, 0, q);
    acc_zero<NM, NT>(acc);
    /* ROLL 1: two steps per iteration (the activation double buffer's parity stays static), the ring slot
     * computed at run time: the loop body is 2 steps of code instead of D. The T <= 8 kernel's one routed loop
     * takes it (its many loops thrash the instruction cache: 5-7 % faster at batches 1-8); the other kernels
     * were 0-7 % slower with it. */
    for (int c0 = 0; c0 < nc; c0 += ROLL ? 2 : D) {
#pragma unroll
        for (int s0 = 0; s0 < (ROLL ? 2 : D); s0++) {
            const int c = c0 + s0, s = ROLL ? (c & (D - 1)) : s0, u = s0 & 1;
            if (c < nc) {
                if constexpr (XSB) load_x<NT, XL>(xb[0], xrow, c, q);
                else if (c + 1 < nc) load_x<NT, XL>(xb[u ^ 1], xrow, c + 1, q);
                cp_async_wait<D - 1>();
                Fp4Stage<NM> st;
                fp4_read<NM>(st, ring, s, lane);
                if (ER == 1) fp4_refill<FMT, NM, D>(ring, s, rowtile, next, c, nc, lane, mmul);
                fp4_compute_u<NM, NT, 0, OR2>(st, xb[XSB ? 0 : u], acc);
                fp4_compute_u<NM, NT, 1, OR2>(st, xb[XSB ? 0 : u], acc);
            }
            if (!ER || c >= nc) fp4_refill<FMT, NM, D>(ring, s, rowtile, next, c, nc, lane, mmul);
        }
    }
}


/* ---- FP8 (shared expert) stream, block scale fp32 per 128x128 applied per chunk. */
/* Chunk c of an FP8 row tile (NM interleaved matrices) into ring slot `slot`: each lane copies (and
 * later reads back) only its own 16-byte pieces. */
template <int NM>
__device__ __forceinline__ void fp8_issue(uint8_t *ring, int slot, const uint8_t *rowtile, int c, int lane)
{
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            cp_async16(ring + ((slot * NM + m) * 4 + j) * 512 + lane * 16,
                 rowtile + ((size_t)c * NM + m) * MOE_FP8_CHUNK_BYTES + j * 512 + lane * 16);
}

/* One 128-input FP8 chunk from ring slot `slot`: its dequantised fragments times NT n-tiles into fresh
 * fp32 partials, then acc += partials * the chunk's block scale (bscale[m * bstride + c]).
 * xload(grp, xv): the lane's activation fragments of 32-input group grp for the NT n-tiles. */
template <int NM, int NT, class XLoad>
__device__ __forceinline__ void fp8_chunk(const uint8_t *ring, int slot, int lane, XLoad xload, const float *bscale,
                                          int bstride, int c, float acc[NM][NT][4])
{
    const uint32_t c120 = 0x7B807B80u;   /* bf16x2 of 2^120 */
    float tmp[NM][NT][4];
    acc_zero<NM, NT>(tmp);
#pragma unroll
    for (int grp = 0; grp < 4; grp++) {
        uint4 xv[NT];
        xload(grp, xv);
#pragma unroll
        for (int m = 0; m < NM; m++) {
            const uint4 wv = *(const uint4 *)(ring + ((slot * NM + m) * 4 + grp) * 512 + lane * 16);
#pragma unroll
            for (int step = 0; step < 2; step++) {
                const uint32_t w0 = u4get(wv, step * 2), w1 = u4get(wv, step * 2 + 1);
                const uint32_t a0 = bf16x2_mul(e4m3x2_bf16x2(w0, 0x1404u), c120);
                const uint32_t a1 = bf16x2_mul(e4m3x2_bf16x2(w0, 0x3424u), c120);
                const uint32_t a2 = bf16x2_mul(e4m3x2_bf16x2(w1, 0x1404u), c120);
                const uint32_t a3 = bf16x2_mul(e4m3x2_bf16x2(w1, 0x3424u), c120);
#pragma unroll
                for (int j = 0; j < NT; j++)
                    mma_bf16(tmp[m][j], a0, a1, a2, a3, u4get(xv[j], step * 2), u4get(xv[j], step * 2 + 1));
            }
        }
    }
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const float bs = __ldg(bscale + (size_t)m * bstride + c);
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = fmaf(tmp[m][j][i], bs, acc[m][j][i]);
    }
}

/* Chunks [cb, ce) of one 16-row tile (the block's warps split K for the shared expert). WW: as in
 * fp4_rowtile (the wait by this warp alone). */
template <int NM, int D, int NT, int XL = 0, int WW = 0>
__device__ __forceinline__ void fp8_rowtile(const uint8_t *rowtile, int K, int cb, int ce, const float *bscale,
                                            int bstride, uint8_t *ring, const uint16_t *xbase,
                                            const int32_t *rows_tok, const int prow[NT], float acc[NM][NT][4],
                                            const unsigned *wait = nullptr, unsigned need = 0)
{
    static_assert(D % 2 == 0 && D * NM * 2048 <= RING_WARP_BYTES, "ring");
    const int lane = threadIdx.x & 31, q = lane & 3;
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (cb + s < ce) fp8_issue<NM>(ring, s, rowtile, cb + s, lane);
        cp_async_commit();
    }
    if (wait) {
        if (WW) moe_wait_count_warp(wait, need);
        else moe_wait_count(wait, need);
    }
    const uint16_t *xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
        xrow[j] = xbase + (size_t)(rows_tok ? ((XL & 2) ? __ldcg(rows_tok + prow[j]) : rows_tok[prow[j]]) : prow[j]) * K;
    XFrag<NT> xb[2];
    load_x<NT, XL>(xb[0], xrow, cb, q);
    acc_zero<NM, NT>(acc);
    for (int c0 = cb; c0 < ce; c0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int c = c0 + s;
            if (c < ce) {
                if (c + 1 < ce) load_x<NT, XL>(xb[(s + 1) & 1], xrow, c + 1, q);
                cp_async_wait<D - 1>();
                const XFrag<NT> &x = xb[s & 1];
                fp8_chunk<NM, NT>(ring, s, lane, [&](int grp, uint4 xv[NT]) {
#pragma unroll
                    for (int j = 0; j < NT; j++) xv[j] = x.v[j][grp];
                }, bscale, bstride, c, acc);
            }
            if (c + D < ce) fp8_issue<NM>(ring, s, rowtile, c + D, lane);
            cp_async_commit();
        }
    }
}

/* Adds the 4 warps' partial accumulators (K split) in a fixed order through their idle rings; the
 * sum lands in warp 0. Every warp of the block must call it. */
template <int NM, int NT>
__device__ __forceinline__ void ksplit_reduce(uint8_t *smem, float acc[NM][NT][4], int warp, int lane)
{
    float *mine = (float *)(smem + warp * RING_WARP_BYTES) + lane * NM * NT * 4;
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) mine[(m * NT + j) * 4 + i] = acc[m][j][i];
    __syncthreads();
    if (warp == 0)
        for (int w = 1; w < MOE_WARPS; w++) {
            const float *o = (const float *)(smem + w * RING_WARP_BYTES) + lane * NM * NT * 4;
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[m][j][i] += o[(m * NT + j) * 4 + i];
        }
    __syncthreads();   /* rings are free again before the next item's copies */
}

/* Work item -> (expert, local index): largest e with items[e] <= it. */
__device__ __forceinline__ int find_expert(const int32_t *items, int n, int it)
{
    int lo = 0, hi = n;   /* items[0] = 0 <= it < items[n] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (items[mid] <= it) lo = mid; else hi = mid;
    }
    return lo;
}

/* t[0..n] = exclusive prefix sums of t[0..n], by one whole warp (lane = its lane) */
__device__ __forceinline__ void warp_exclusive_scan(int32_t *t, int n, int lane)
{
    int carry = 0;
    for (int base = 0; base <= n; base += 32) {
        const int i = base + lane, x = i <= n ? t[i] : 0;
        int inc = x;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += y;
        }
        if (i <= n) t[i] = carry + inc - x;
        carry += __shfl_sync(0xffffffffu, inc, 31);
    }
}

/* The most tokens a routed expert may have to be served by the 1-tile kernels (moe_expert_args.tok1_max). */
__device__ __forceinline__ int moe_tok1(int tok1_max)
{
    return tok1_max < 0 ? 0 : tok1_max <= MOE_TOK_CHUNK ? MOE_TOK_CHUNK : tok1_max > MOE_TOK1_MAX ? MOE_TOK1_MAX : tok1_max;
}

/* The tile class of a routed expert with n tokens: 1 up to tok1 (moe_tok1), MOE_NTW (the wide kernels) above `wide`
 * tokens (moe_expert_args.wide_min; 0: never), else 2. */
__device__ __forceinline__ int moe_tile_class(int n, int tok1, int wide)
{
    return n <= tok1 ? 1 : wide > 0 && n > wide ? MOE_NTW : 2;
}

/* The item table of the NT-tile kernel, from the per-expert pair counts (off[]): expert e's items are
 * its token chunks of 8*NT x row groups if e belongs to this kernel (routed: moe_tile_class == NT; shared:
 * moe_tok_tiles(T) == NT), else none. s_items[0..nE] = exclusive prefix sums; s_off
 * filled. rows: output rows of the stage (I for gate/up, H for down); tok1: moe_tok1(a.tok1_max), wide: a.wide_min.
 * Every thread of the block calls it. */
template <int NT>
__device__ __forceinline__ void item_table(int32_t *s_items, int32_t *s_off, const int32_t *off, int nE, int E,
                                           int rows, int rpi, int tok1, int wide)
{
    for (int i = threadIdx.x; i <= nE; i += blockDim.x) s_off[i] = __ldcg(off + i);
    __syncthreads();
    for (int i = threadIdx.x; i <= nE; i += blockDim.x) {
        int c = 0;
        if (i < nE) {
            const int n = s_off[i + 1] - s_off[i];
            const int nt = i < E ? moe_tile_class(n, tok1, wide) : moe_tok_tiles(n);
            /* the shared expert's items are single 16-row tiles whose K the block's 4 warps split */
            if (nt == NT) c = (n + MOE_TOK_CHUNK * NT - 1) / (MOE_TOK_CHUNK * NT) * (i < E ? rows / rpi : rows / MOE_TILE_ROWS);
        }
        s_items[i] = c;
    }
    __syncthreads();
    if (threadIdx.x < 32) warp_exclusive_scan(s_items, nE, threadIdx.x);   /* by warp 0 */
    __syncthreads();
}

/* The 1-tile item tables of gate/up (rows_g, rpi_g) and down (rows_d, rpi_d) of the routed experts in one
 * pass (the fused launch): off[] loaded once, both counts at once, the two scans by warps 0 and 1 in
 * parallel. Same tables as item_table<1> with nE = E. Every thread of the block calls it. CHUNKS:
 * experts with up to tok1 tokens, as ceil(n / 8) token chunks; else (T <= 8) those with 1..8. */
template <bool CHUNKS>
__device__ __forceinline__ void item_tables1_body(int32_t *s_ig, int32_t *s_id, int32_t *s_off, const int32_t *off, int E,
                                                  int rows_g, int rpi_g, int rows_d, int rpi_d, int tok1)
{
    for (int i = threadIdx.x; i <= E; i += blockDim.x) s_off[i] = __ldcg(off + i);
    __syncthreads();
    for (int i = threadIdx.x; i <= E; i += blockDim.x) {
        const int n = i < E ? s_off[i + 1] - s_off[i] : 0;
        const int ch = !CHUNKS ? n > 0 && n <= MOE_TOK_CHUNK
                               : n > 0 && n <= tok1 ? (n + MOE_TOK_CHUNK - 1) / MOE_TOK_CHUNK : 0;   /* token chunks */
        s_ig[i] = ch * (rows_g / rpi_g);
        s_id[i] = ch * (rows_d / rpi_d);
    }
    __syncthreads();
    if (threadIdx.x < 64)   /* warp 0 gate/up's, warp 1 down's */
        warp_exclusive_scan(threadIdx.x < 32 ? s_ig : s_id, E, threadIdx.x & 31);
    __syncthreads();
}

/* The chunked tables as a call: inlined, they pushed the T > 8 fused kernel (96 registers for 5 blocks/SM)
 * to spill 24 bytes per item, which costs it 3-5 % in sluice-bench moe. */
static __device__ __noinline__ void item_tables1_chunks(int32_t *s_ig, int32_t *s_id, int32_t *s_off, const int32_t *off,
                                                        int E, int rows_g, int rpi_g, int rows_d, int rpi_d, int tok1)
{
    item_tables1_body<true>(s_ig, s_id, s_off, off, E, rows_g, rpi_g, rows_d, rpi_d, tok1);
}

/* The gated activation of gate/up: silu(min(g, L)) * clamp(u, -L, L); no clamp when L <= 0. */
__device__ __forceinline__ float moe_swiglu(float g, float u, float limit)
{
    if (limit > 0.f) {
        g = fminf(g, limit);
        u = fmaxf(fminf(u, limit), -limit);
    }
    return g / (1.f + expf(-g)) * u;
}

struct Item {
    int e, r, p0, ntok;
};

/* Work item `it` for this warp: expert, 16-row tile, first pair, tokens (<= 8). */
template <int NT>
__device__ __forceinline__ Item decode_item(const int32_t *s_items, const int32_t *s_off, int nE, int it, int warp,
                                            bool shared_last)
{
    const int tokc = MOE_TOK_CHUNK * NT;
    Item t;
    t.e = find_expert(s_items, nE, it);
    const int n_e = s_off[t.e + 1] - s_off[t.e], nch = (n_e + tokc - 1) / tokc;
    const int local = it - s_items[t.e], rg = local / nch, tc = local % nch;
    t.p0 = s_off[t.e] + tc * tokc;
    t.ntok = min(tokc, n_e - tc * tokc);
    t.r = t.e == nE - 1 && shared_last ? rg : rg * MOE_WARPS + warp;   /* shared: one tile, K split by warps */
    return t;
}

/* Per-warp dynamic work (moe_expert_args.tickets): warp-item wi = 4 * block item + warp (the
 * block item's 16-row tile `warp`); a warp's first one is static (4 * blockIdx + warp, as the static
 * walk), the rest come from ctr[0] in the order warps ask, two ahead, so the atomic's round trip is
 * hidden behind a whole item. A warp stops drawing after its first ticket past the end; the last of
 * the warps that draw (counted in ctr[1]) zeroes both words for the next launch (every later launch
 * on them starts after this one completes: PDL waits are transitive). */
struct WarpQueue {
    unsigned *ctr;
    int wtotal, nwarps;   /* warp-items, warps of the grid */
    __device__ __forceinline__ int draw() const
    {
        unsigned t = 0;
        if ((threadIdx.x & 31) == 0) t = atomicAdd(ctr, 1u);
        t = __shfl_sync(0xffffffffu, t, 0);
        const int wi = nwarps + (int)t;
        if (wi >= wtotal && (threadIdx.x & 31) == 0) {   /* this warp's last draw */
            __threadfence();
            const int drawing = wtotal < nwarps ? wtotal : nwarps;
            if (atomicAdd(ctr + 1, 1u) == (unsigned)drawing - 1) {
                atomicExch(ctr, 0u);
                atomicExch(ctr + 1, 0u);
            }
        }
        return wi < wtotal ? wi : wtotal;
    }
};

/* The warp-items of a routed launch, walked with a static stride of the grid or (dyn) handed out by q. */
struct ItemWalk {
    WarpQueue q;
    bool dyn;
    /* the warp's next warp-item after w; q.wtotal: none (also once w is past the end) */
    __device__ __forceinline__ int after(int w) const
    {
        return w >= q.wtotal ? q.wtotal : dyn ? q.draw() : min(w + q.nwarps, q.wtotal);
    }
};

#endif
