/* moe_expert.cu — fused W4A16 routed experts + FP8 shared expert for decode (small M), Hopper.
 *
 * Work: (expert, 64-row group, chunk of <= 8*NT tokens) is one work item for a 4-warp block; a
 * persistent grid (5 blocks/SM, 20 warps) walks the GPU-built item list (moe_build_lists) with a
 * static stride, so every SM streams weights even at batch 1 (6 routed experts = 192 gate/up items).
 * Each warp owns 16 weight rows for the whole K and streams its repacked chunks (16 rows x 128
 * inputs, 1152 B) HBM -> shared memory with cp.async, 4-8 chunks (~10 KB) in flight per warp; each
 * lane copies and reads back only its own 16-byte pieces, so the ring needs no barriers. The stream
 * continues into the warp's next item without draining. FP4 codes are dequantised to bf16 in
 * registers (moe_fp4_common.cuh: rotate + mask into bf16 bit positions, one bf16x2 multiply by the
 * block scale) and multiplied with mma.sync m16n8k16: weights are the M side, the item's tokens the
 * N side (NT = 1 or 2 n-tiles of 8; with 2 both n-tiles reuse one dequantised fragment).
 * Activation fragments come straight from L1/L2 one chunk ahead. gate and up rows are interleaved,
 * so one warp finishes silu(min(g,L)) * clamp(u) * routing weight in registers and writes h (bf16).
 * The FP8 shared expert runs in the same launches: its items are single 16-row tiles whose K is
 * split over the block's 4 warps (partial sums added in a fixed order through shared memory).
 *
 * Tile count per expert, chosen on the GPU (v10): a routed expert with > 8 tokens is served by the
 * 2-tile kernel (items of 16 tokens), one with <= 8 tokens by the 1-tile kernel; the shared expert
 * (T tokens, known on the host) by the 2-tile kernel from T >= 256 (moe_tok_tiles, the v9 threshold).
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
 * experts touched) 2.86 GB -> 0.63 ms. Measured (bench/NOTES.md): 91 us and 0.88 ms.
 */
#include <stdint.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"
#include "common/moe_launch.cuh"

#define RING_WARP_BYTES (10 * 1024)   /* per-warp shared-memory ring of weight chunks */

__device__ __forceinline__ uint32_t u4get(const uint4 &v, int i)
{
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

__device__ __forceinline__ void cp16(uint8_t *smem, const void *g)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void cp8(uint8_t *smem, const void *g)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* A lane's activation fragments for one 128-input chunk: 4 x 16 bytes of its token's row (L1-cached;
 * the 4 warps of a block read the same rows). */
template <int NT>
struct XFrag {
    uint4 v[NT][4];   /* n-tile j: token row j*8 + g */
};
template <int NT>
__device__ __forceinline__ void load_x(XFrag<NT> &x, const uint16_t *const xrow[NT], int c, int q)
{
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) x.v[j][i] = __ldg((const uint4 *)(xrow[j] + c * 128 + i * 32 + 8 * q));
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
        cp16(d + lane * 16, ch + lane * 16);
        cp16(d + 512 + lane * 16, ch + 512 + lane * 16);
        if (FMT == MOE_FP4_NVFP4) cp8(d + 1024 + lane * 8, ch + 1024 + (lane >> 2) * 16 + ((lane >> 1) & 1) * 8);
        else cp8(d + 1024 + lane * 8, ch + 1024 + (lane >> 2) * 8);
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
template <int NM, int NT, int U>
__device__ __forceinline__ void fp4_compute_u(const Fp4Stage<NM> &st, const XFrag<NT> &x, float acc[NM][NT][4])
{
    {
        const int u = U;
#pragma unroll
        for (int grp = 0; grp < 2; grp++) {
#pragma unroll
            for (int m = 0; m < NM; m++) {
                const uint32_t cg = (st.s[m].x >> (8 * (2 * u + grp))) & 0xFFu;
                const uint32_t c8 = (st.s[m].y >> (8 * (2 * u + grp))) & 0xFFu;
                const uint32_t fg = moe_scale_factor(cg), f8 = moe_scale_factor(c8);
#pragma unroll
                for (int step = 0; step < 2; step++) {
                    uint32_t p[4];
                    moe_fp4_word(u4get(st.w[m][u], grp * 2 + step), p);
                    const uint32_t a0 = moe_bf16x2_mul(p[0], fg), a1 = moe_bf16x2_mul(p[1], f8);
                    const uint32_t a2 = moe_bf16x2_mul(p[2], fg), a3 = moe_bf16x2_mul(p[3], f8);
#pragma unroll
                    for (int j = 0; j < NT; j++)   /* the dequantised fragment serves every n-tile */
                        moe_mma_bf16(acc[m][j], a0, a1, a2, a3, u4get(x.v[j][u * 2 + grp], step * 2),
                                     u4get(x.v[j][u * 2 + grp], step * 2 + 1));
                }
            }
        }
    }
}

template <int NM, int NT>
__device__ __forceinline__ void fp4_compute(const Fp4Stage<NM> &st, const XFrag<NT> &x, float acc[NM][NT][4])
{
    fp4_compute_u<NM, NT, 0>(st, x, acc);
    fp4_compute_u<NM, NT, 1>(st, x, acc);
}

/* Issues the first D chunks of a row tile (what fp4_rowtile does when not primed). */
template <int FMT, int NM, int D>
__device__ __forceinline__ void fp4_prime(uint8_t *ring, const uint8_t *rowtile, int nc, int lane, int mmul)
{
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (s < nc) fp4_issue<FMT, NM>(ring, s, rowtile, s, lane, mmul);
        cp_commit();
    }
}

/* Streams the K/128 chunks of one 16-row tile; D even (the activation double buffer follows s & 1).
 * primed: the first D chunks were already issued (and committed) by the previous item's tail.
 * next: the warp's next FP4 row tile (same shape) or NULL; when K/128 is a multiple of D the tail
 * of this tile issues the next tile's first D chunks, so the stream never drains between items. */
template <int FMT, int NM, int D, int NT>
__device__ __forceinline__ void fp4_rowtile(const uint8_t *rowtile, int K, uint8_t *ring, const uint16_t *xbase,
                                            const int32_t *rows_tok, const int prow[NT], float acc[NM][NT][4],
                                            bool primed, const uint8_t *next, int mmul)
{
    static_assert(D % 2 == 0 && D * NM * 1280 <= RING_WARP_BYTES, "ring");
    const int lane = threadIdx.x & 31, q = lane & 3, nc = K / 128;
    if (!primed) fp4_prime<FMT, NM, D>(ring, rowtile, nc, lane, mmul);
    /* activation row of this lane's token, looked up after the weight loads are on their way */
    const uint16_t *xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) xrow[j] = xbase + (size_t)(rows_tok ? rows_tok[prow[j]] : prow[j]) * K;
    XFrag<NT> xb[2];
    load_x<NT>(xb[0], xrow, 0, q);
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
    for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int c = c0 + s;
            if (c < nc) {
                if (c + 1 < nc) load_x<NT>(xb[(s + 1) & 1], xrow, c + 1, q);
                cp_wait<D - 1>();
                Fp4Stage<NM> st;
                fp4_read<NM>(st, ring, s, lane);
                fp4_compute<NM, NT>(st, xb[s & 1], acc);
            }
            if (c + D < nc) fp4_issue<FMT, NM>(ring, s, rowtile, c + D, lane, mmul);
            else if (next) fp4_issue<FMT, NM>(ring, s, next, c + D - nc, lane, mmul);
            cp_commit();
        }
    }
}

/* ---- FP8 (shared expert) stream, block scale fp32 per 128x128 applied per chunk. */
/* Chunks [cb, ce) of one 16-row tile (the block's warps split K for the shared expert). */
template <int NM, int D, int NT>
__device__ __forceinline__ void fp8_rowtile(const uint8_t *rowtile, int K, int cb, int ce, const float *bscale,
                                            int bstride, uint8_t *ring, const uint16_t *xbase,
                                            const int32_t *rows_tok, const int prow[NT], float acc[NM][NT][4])
{
    static_assert(D % 2 == 0 && D * NM * 2048 <= RING_WARP_BYTES, "ring");
    const int lane = threadIdx.x & 31, q = lane & 3;
    const uint32_t c120 = 0x7B807B80u;   /* bf16x2 of 2^120 */
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (cb + s < ce)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    cp16(ring + ((s * NM + m) * 4 + j) * 512 + lane * 16,
                         rowtile + ((size_t)(cb + s) * NM + m) * MOE_FP8_CHUNK_BYTES + j * 512 + lane * 16);
        cp_commit();
    }
    const uint16_t *xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) xrow[j] = xbase + (size_t)(rows_tok ? rows_tok[prow[j]] : prow[j]) * K;
    XFrag<NT> xb[2];
    load_x<NT>(xb[0], xrow, cb, q);
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
    for (int c0 = cb; c0 < ce; c0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int c = c0 + s;
            if (c < ce) {
                if (c + 1 < ce) load_x<NT>(xb[(s + 1) & 1], xrow, c + 1, q);
                cp_wait<D - 1>();
                float tmp[NM][NT][4];
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int j = 0; j < NT; j++) tmp[m][j][0] = tmp[m][j][1] = tmp[m][j][2] = tmp[m][j][3] = 0.f;
#pragma unroll
                for (int grp = 0; grp < 4; grp++) {
#pragma unroll
                    for (int m = 0; m < NM; m++) {
                        const uint4 wv = *(const uint4 *)(ring + ((s * NM + m) * 4 + grp) * 512 + lane * 16);
#pragma unroll
                        for (int step = 0; step < 2; step++) {
                            const uint32_t w0 = u4get(wv, step * 2), w1 = u4get(wv, step * 2 + 1);
                            const uint32_t a0 = moe_bf16x2_mul(moe_fp8_pair(w0, 0x1404u), c120);
                            const uint32_t a1 = moe_bf16x2_mul(moe_fp8_pair(w0, 0x3424u), c120);
                            const uint32_t a2 = moe_bf16x2_mul(moe_fp8_pair(w1, 0x1404u), c120);
                            const uint32_t a3 = moe_bf16x2_mul(moe_fp8_pair(w1, 0x3424u), c120);
#pragma unroll
                            for (int j = 0; j < NT; j++)
                                moe_mma_bf16(tmp[m][j], a0, a1, a2, a3, u4get(xb[s & 1].v[j][grp], step * 2),
                                             u4get(xb[s & 1].v[j][grp], step * 2 + 1));
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
            if (c + D < ce)
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        cp16(ring + ((s * NM + m) * 4 + j) * 512 + lane * 16,
                             rowtile + ((size_t)(c + D) * NM + m) * MOE_FP8_CHUNK_BYTES + j * 512 + lane * 16);
            cp_commit();
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

/* The item table of the NT-tile kernel, from the per-expert pair counts (off[]): expert e's items are
 * its token chunks of 8*NT x row groups if e belongs to this kernel (routed: > 8 tokens <=> NT 2;
 * shared: moe_tok_tiles(T) == NT), else none. s_items[0..nE] = exclusive prefix sums; s_off filled.
 * rows: output rows of the stage (I for gate/up, H for down). Every thread of the block calls it. */
template <int NT>
__device__ __forceinline__ void item_table(int32_t *s_items, int32_t *s_off, const int32_t *off, int nE, int E,
                                           int rows, int rpi)
{
    for (int i = threadIdx.x; i <= nE; i += blockDim.x) s_off[i] = __ldcg(off + i);
    __syncthreads();
    for (int i = threadIdx.x; i <= nE; i += blockDim.x) {
        int c = 0;
        if (i < nE) {
            const int n = s_off[i + 1] - s_off[i];
            const int nt = i < E ? (n > MOE_TOK_CHUNK ? 2 : 1) : moe_tok_tiles(n);
            /* the shared expert's items are single 16-row tiles whose K the block's 4 warps split */
            if (nt == NT) c = (n + MOE_TOK_CHUNK * NT - 1) / (MOE_TOK_CHUNK * NT) * (i < E ? rows / rpi : rows / MOE_TILE_ROWS);
        }
        s_items[i] = c;
    }
    __syncthreads();
    if (threadIdx.x < 32) {   /* exclusive scan by warp 0 */
        const int lane = threadIdx.x;
        int carry = 0;
        for (int base = 0; base <= nE; base += 32) {
            const int i = base + lane, x = i <= nE ? s_items[i] : 0;
            int inc = x;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += y;
            }
            if (i <= nE) s_items[i] = carry + inc - x;
            carry += __shfl_sync(0xffffffffu, inc, 31);
        }
    }
    __syncthreads();
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

template <int FMT, int NT>
__global__ void __launch_bounds__(128, NT == 1 ? 5 : 4) k_gate_up(moe_expert_args a, const uint16_t *x, const int32_t *off,
                                                 const int32_t *pair_tok, const float *pair_w, uint16_t *h)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *s_items = (int32_t *)(smem + MOE_WARPS * RING_WARP_BYTES), *s_off = s_items + (nE + 1);
    moe_pdl_wait();
    /* let the next kernel (down) launch now: its blocks take the slots this grid's tail frees and
     * stream their first weights while this kernel finishes (they wait before reading h) */
    if (a.early) moe_pdl_release();
    item_table<NT>(s_items, s_off, off, nE, a.E, a.I, MOE_ROWS_PER_ITEM);
    const int total = s_items[nE], nc = a.H / 128;
    const size_t rt_bytes = (size_t)nc * 2 * moe_fp4_chunk_bytes(FMT);
    bool primed = false;
    if (total == 0) return;   /* no expert of this tile count */
    Item cur = decode_item<NT>(s_items, s_off, nE, blockIdx.x < total ? blockIdx.x : 0, warp, a.has_shared);
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        const int e = cur.e, r = cur.r, p0 = cur.p0, ntok = cur.ntok;
        const Item nxt = decode_item<NT>(s_items, s_off, nE, it + (int)gridDim.x < total ? it + (int)gridDim.x : it, warp,
                                     a.has_shared);
        const bool has_next = it + (int)gridDim.x < total && nxt.e < a.E && e < a.E && nc % 4 == 0;
        uint8_t *ring = smem + warp * RING_WARP_BYTES;
        const int g_ = lane >> 2;
        int prow[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) prow[j] = p0 + (j * 8 + g_ < ntok ? j * 8 + g_ : 0);
        float acc[2][NT][4];
        float pg = 1.f, pu = 1.f;
        if (e < a.E) {
            const uint8_t *rt = a.w13 + (size_t)e * a.w13_stride + (size_t)r * rt_bytes;
            const uint8_t *nrt = has_next ? a.w13 + (size_t)nxt.e * a.w13_stride + (size_t)nxt.r * rt_bytes : NULL;
            fp4_rowtile<FMT, 2, 4, NT>(rt, a.H, ring, x, pair_tok, prow, acc, primed, nrt, 1);
            pg = a.post13[2 * e];
            pu = a.post13[2 * e + 1];
        } else {
            const uint8_t *rt = a.sh_w13 + (size_t)r * (a.H / 128) * 2 * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s13 + (size_t)(r * 16 / 128) * (a.H / 128);
            fp8_rowtile<2, 2, NT>(rt, a.H, warp * nc / MOE_WARPS, (warp + 1) * nc / MOE_WARPS, bs,
                              (a.I / 128) * (a.H / 128), ring, x, pair_tok, prow, acc);
            ksplit_reduce<2, NT>(smem, acc, warp, lane);
            if (warp != 0) { primed = false; cur = nxt; continue; }
        }
        primed = has_next;
        cur = nxt;
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = j * 8 + 2 * q + (i & 1);
            if (n < ntok) {
                float gv = acc[0][j][i] * pg, uv = acc[1][j][i] * pu;
                if (a.limit > 0.f) {
                    gv = fminf(gv, a.limit);
                    uv = fmaxf(fminf(uv, a.limit), -a.limit);
                }
                const float hv = gv / (1.f + expf(-gv)) * uv * pair_w[p0 + n];
                h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(hv);
            }
        }
    }
    if (!a.early) moe_pdl_release();
}

/* RM: 16-row tiles per warp of a routed item (1: 64-row items, ring depth 8; 2: 128-row items, each
 * warp streaming two adjacent row tiles like gate/up's two matrices, ring depth 4, one activation
 * fragment per two tiles; v11). The shared expert's items are unchanged (one 16-row tile, K split). */
template <int FMT, int NT, int RM>
__global__ void __launch_bounds__(128, NT == 1 ? 5 : 4) k_down(moe_expert_args a, const uint16_t *h, const int32_t *off,
                                              float *y)
{
    constexpr int D = RM == 1 ? 8 : 4;
    extern __shared__ __align__(16) uint8_t smem[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *s_items = (int32_t *)(smem + MOE_WARPS * RING_WARP_BYTES), *s_off = s_items + (nE + 1);
    /* Before the PDL wait (early): the item list (off[] was written by the lists kernel, which completed
     * before the previous kernel could release us) and the first D weight chunks of this warp's first
     * item (weights do not depend on the previous kernel); h is read only after the wait. */
    if (!a.early) moe_pdl_wait();
    item_table<NT>(s_items, s_off, off, nE, a.E, a.H, MOE_ROWS_PER_ITEM * RM);
    const int total = s_items[nE], nc = a.I / 128;
    const size_t rt_bytes = (size_t)nc * moe_fp4_chunk_bytes(FMT);   /* one 16-row tile */
    const int mmul = RM == 2 ? nc : 1;
    bool primed = false;
    if (total == 0) return;   /* no expert of this tile count */
    Item cur = decode_item<NT>(s_items, s_off, nE, blockIdx.x < total ? blockIdx.x : 0, warp, a.has_shared);
    if (a.early && (int)blockIdx.x < total && cur.e < a.E) {
        fp4_prime<FMT, RM, D>(smem + warp * RING_WARP_BYTES,
                              a.w2 + (size_t)cur.e * a.w2_stride + (size_t)cur.r * RM * rt_bytes, nc, lane, mmul);
        primed = true;
    }
    if (a.early) moe_pdl_wait();
    moe_pdl_release();
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        const int e = cur.e, r = cur.r, p0 = cur.p0, ntok = cur.ntok;
        const Item nxt = decode_item<NT>(s_items, s_off, nE, it + (int)gridDim.x < total ? it + (int)gridDim.x : it, warp,
                                     a.has_shared);
        const bool has_next = it + (int)gridDim.x < total && nxt.e < a.E && e < a.E && nc % D == 0;
        uint8_t *ring = smem + warp * RING_WARP_BYTES;
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
            fp4_rowtile<FMT, RM, D, NT>(rt, a.I, ring, h, NULL, prow, acc, primed, nrt, mmul);
            post = a.post2[e];
        } else {
            const uint8_t *rt = a.sh_w2 + (size_t)r * (a.I / 128) * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s2 + (size_t)(r * 16 / 128) * (a.I / 128);
            fp8_rowtile<1, 4, NT>(rt, a.I, warp * nc / MOE_WARPS, (warp + 1) * nc / MOE_WARPS, bs, 0, ring, h, NULL, prow,
                              acc);
            ksplit_reduce<1, NT>(smem, acc, warp, lane);
            if (warp != 0) { primed = false; cur = nxt; continue; }
            rm = 1;
        }
        primed = has_next;
        cur = nxt;
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
}

/* per-warp rings + the block's copies of items[] and off[] (E <= 512) */
static size_t smem_for(int E) { return (size_t)MOE_WARPS * RING_WARP_BYTES + 2 * (size_t)(E + 2) * 4; }

static cudaError_t raise_smem(const void *f, size_t bytes)
{
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

typedef void (*dn_fn)(moe_expert_args, const uint16_t *, const int32_t *, float *);

template <int NT>
static dn_fn dn_pick(int fmt, int rm)
{
    if (fmt == MOE_FP4_NVFP4) return rm == 2 ? k_down<MOE_FP4_NVFP4, NT, 2> : k_down<MOE_FP4_NVFP4, NT, 1>;
    return rm == 2 ? k_down<MOE_FP4_MXFP4, NT, 2> : k_down<MOE_FP4_MXFP4, NT, 1>;
}

/* occupancy of the 64-row down kernel (the 128-row one has the same launch bounds and no spills) */
template <int NT>
static cudaError_t occupancy_nt(int fmt, int E, int *gu, int *dn)
{
    const size_t sm = smem_for(E);
    const void *fg = fmt == MOE_FP4_NVFP4 ? (const void *)k_gate_up<MOE_FP4_NVFP4, NT> : (const void *)k_gate_up<MOE_FP4_MXFP4, NT>;
    cudaError_t e;
    if ((e = raise_smem(fg, smem_for(512))) != cudaSuccess) return e;
    for (int rm = 1; rm <= 2; rm++)
        if ((e = raise_smem((const void *)dn_pick<NT>(fmt, rm), smem_for(512))) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(gu, fg, 128, sm)) != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(dn, (const void *)dn_pick<NT>(fmt, 1), 128, sm);
}

extern "C" cudaError_t moe_expert_occupancy(int fmt, int E, int nt, int *gu, int *dn)
{
    return nt == 2 ? occupancy_nt<2>(fmt, E, gu, dn) : occupancy_nt<1>(fmt, E, gu, dn);
}

/* Upper bounds on a routed launch's items, so a small batch does not start a full persistent grid
 * whose idle blocks only wait and leave: the 1-tile kernel has at most one item chunk per pair, the
 * 2-tile kernel one per 9 pairs (its experts have > 8 tokens). */
static int routed_grid(int grid, int nt, int T, int topk, int row_groups, int has_shared)
{
    const long P = (long)T * topk;
    long cap = (nt == 1 ? P : P / 9) * row_groups;
    if (has_shared && moe_tok_tiles(T) == nt)   /* + the shared expert's items: 16-row tiles x token chunks */
        cap += (long)((T + MOE_TOK_CHUNK * nt - 1) / (MOE_TOK_CHUNK * nt)) * row_groups * MOE_WARPS;
    return cap < grid ? (int)(cap > 0 ? cap : 1) : grid;
}

extern "C" cudaError_t moe_gate_up(const moe_expert_args *a, const uint16_t *x, const int32_t *off,
                                   const int32_t *pair_tok, const float *pair_w, const int32_t *items, int T,
                                   int topk, const int grid[2], uint16_t *h, cudaStream_t st)
{
    (void)items;
    if (a->H % 128 || a->I % MOE_ROWS_PER_ITEM || a->H > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->E);
    const int rg = a->I / MOE_ROWS_PER_ITEM;
    const int g0 = routed_grid(grid[0], 1, T, topk, rg, a->has_shared);
    const bool nv = a->fmt == MOE_FP4_NVFP4;
    cudaError_t e = moe_launch(nv ? k_gate_up<MOE_FP4_NVFP4, 1> : k_gate_up<MOE_FP4_MXFP4, 1>, dim3(g0),
                               dim3(128), sm, st, *a, x, off, pair_tok, pair_w, h);
    if (e != cudaSuccess || T <= MOE_TOK_CHUNK) return e;   /* T <= 8: no expert has more than 8 tokens */
    const int g1 = routed_grid(grid[1], 2, T, topk, rg, a->has_shared);
    return moe_launch(nv ? k_gate_up<MOE_FP4_NVFP4, 2> : k_gate_up<MOE_FP4_MXFP4, 2>, dim3(g1), dim3(128), sm,
                      st, *a, x, off, pair_tok, pair_w, h);
}

extern "C" cudaError_t moe_down(const moe_expert_args *a, const uint16_t *h, const int32_t *off, const int32_t *items,
                                int T, int topk, const int grid[2], float *y, cudaStream_t st)
{
    (void)items;
    if (a->I % 128 || a->H % (MOE_ROWS_PER_ITEM * (a->down_rm == 2 ? 2 : 1)) || a->I > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->E);
    const int rm = a->down_rm == 2 ? 2 : 1, rg = a->H / (MOE_ROWS_PER_ITEM * rm);
    const int g0 = routed_grid(grid[0], 1, T, topk, rg, a->has_shared);
    cudaError_t e = moe_launch(dn_pick<1>(a->fmt, rm), dim3(g0), dim3(128), sm, st, *a, h, off, y);
    if (e != cudaSuccess || T <= MOE_TOK_CHUNK) return e;
    const int g1 = routed_grid(grid[1], 2, T, topk, rg, a->has_shared);
    return moe_launch(dn_pick<2>(a->fmt, rm), dim3(g1), dim3(128), sm, st, *a, h, off, y);
}

__global__ void k_combine(const float *y, const int32_t *inv, const float *ysh, int T, int H, int topk, float *out)
{
    const int t = blockIdx.y;
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    moe_pdl_wait();
    moe_pdl_release();
    if (t >= T || c >= H) return;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
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
                                   float *out, cudaStream_t st)
{
    if (H % 4) return cudaErrorInvalidValue;
    dim3 grid((H / 4 + 255) / 256, T);
    return moe_launch(k_combine, grid, dim3(256), 0, st, y, inv, ysh, T, H, topk, out);
}
