/* moe_expert.cu — fused W4A16 routed experts + FP8 shared expert for decode (small M), Hopper.
 *
 * Work: each (expert, 64-row group, chunk of <= 8 tokens) is one work item for a 4-warp block; a
 * persistent grid walks the GPU-built item list (moe_build_lists) with a static stride, so every
 * SM streams weights even at batch 1 (6 routed + 1 shared expert = 224 gate/up items, 448 down
 * items). Each warp owns 16 weight rows for the whole K: it streams its repacked chunks straight
 * from HBM into registers (16-byte ld.global.nc, D chunks in flight), dequantises FP4 -> bf16 in
 * registers (moe_fp4_common.cuh) and multiplies with mma.sync m16n8k16 against the <= 8 tokens'
 * activations, staged once per item in shared memory (weights are the M side, tokens the N side).
 * gate and up rows are interleaved in memory so one warp finishes silu(gate) * up in registers.
 *
 * Reduction: none across blocks. Every output element has one owner; the down kernel writes
 * y[pair][H] and moe_combine adds a token's 6 routed pairs and its shared pair in a fixed order,
 * so the result is deterministic (bitwise) run to run and independent of list order.
 *
 * Roofline (V4-Flash, H200 at ~4.2 TB/s measured): one NVFP4 expert is 14.2 MB (weights 12.6 +
 * scales 1.6), the FP8 shared expert 25.2 MB: batch 1 reads 110 MB -> 26 us; batch 64 (~200
 * experts touched) 2.9 GB -> 0.69 ms. Tokens > 8 per expert re-read the item's weights (from L2
 * when the token chunks of one item run together, which the item order arranges).
 */
#include <stdint.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"

#define XPAD 32   /* bf16 pad per staged activation row: keeps 16-byte fragment loads conflict-free */

__device__ __forceinline__ uint2 ld_stream8(const void *p)
{
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t u4get(const uint4 &v, int i)
{
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *g)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
}

/* Stage the item's activation rows (<= 8) into xs[8][K + XPAD] with asynchronous copies (all in
 * flight at once). Rows past ntok are left as they are: they only feed accumulator columns that
 * are never stored (mma column n depends on B column n alone). */
__device__ __forceinline__ void stage_rows(uint16_t *xs, const uint16_t *src, const int32_t *rows_tok, int p0,
                                           int ntok, int K)
{
    const int per_row = K / 8;
    __syncthreads();   /* the previous item is done reading xs */
    for (int i = threadIdx.x; i < ntok * per_row; i += blockDim.x) {
        const int row = i / per_row, c8 = i % per_row;
        const size_t r = rows_tok ? (size_t)rows_tok[p0 + row] : (size_t)(p0 + row);
        cp_async16(xs + row * (K + XPAD) + c8 * 8, src + r * K + (size_t)c8 * 8);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}

/* ---- FP4 stream: one warp, 16 rows, NM interleaved matrices, K inputs. */
template <int FMT, int NM>
struct Fp4Stage {
    uint4 w[NM][2];
    uint2 s[NM];      /* scale codes: rows g (x) and g+8 (y), byte 2u + grp */
};

template <int FMT, int NM>
__device__ __forceinline__ void fp4_load(Fp4Stage<FMT, NM> &st, const uint8_t *rowtile, int c, int lane)
{
    const size_t cb = moe_fp4_chunk_bytes(FMT);
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const uint8_t *ch = rowtile + ((size_t)c * NM + m) * cb;
        st.w[m][0] = moe_ld_stream(ch + lane * 16);
        st.w[m][1] = moe_ld_stream(ch + 512 + lane * 16);
        if (FMT == MOE_FP4_NVFP4) st.s[m] = ld_stream8(ch + 1024 + (lane >> 2) * 16 + ((lane >> 1) & 1) * 8);
        else st.s[m] = ld_stream8(ch + 1024 + (lane >> 2) * 8);
    }
}

template <int FMT, int NM>
__device__ __forceinline__ void fp4_compute(const Fp4Stage<FMT, NM> &st, int c, const uint16_t *xrow,
                                            float acc[NM][4], int lane)
{
    const int q = lane & 3;
#pragma unroll
    for (int u = 0; u < 2; u++) {
#pragma unroll
        for (int grp = 0; grp < 2; grp++) {
            const uint4 bx = *(const uint4 *)(xrow + c * 128 + u * 64 + grp * 32 + 8 * q);
#pragma unroll
            for (int m = 0; m < NM; m++) {
                const uint32_t cg = (st.s[m].x >> (8 * (2 * u + grp))) & 0xFFu;
                const uint32_t c8 = (st.s[m].y >> (8 * (2 * u + grp))) & 0xFFu;
                const uint32_t fg = moe_scale_factor(cg), f8 = moe_scale_factor(c8);
#pragma unroll
                for (int step = 0; step < 2; step++) {
                    uint32_t p[4];
                    moe_fp4_word(u4get(st.w[m][u], grp * 2 + step), p);
                    moe_mma_bf16(acc[m], moe_bf16x2_mul(p[0], fg), moe_bf16x2_mul(p[1], f8),
                                 moe_bf16x2_mul(p[2], fg), moe_bf16x2_mul(p[3], f8), u4get(bx, step * 2),
                                 u4get(bx, step * 2 + 1));
                }
            }
        }
    }
}

/* Streams K/128 chunks of one row tile; stages activations after issuing the first loads. */
template <int FMT, int NM, int D>
__device__ __forceinline__ void fp4_rowtile(const uint8_t *rowtile, int K, uint16_t *xs, const uint16_t *src,
                                            const int32_t *rows_tok, int p0, int ntok, float acc[NM][4])
{
    const int lane = threadIdx.x & 31, nc = K / 128;
    Fp4Stage<FMT, NM> ring[D];
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < nc) fp4_load<FMT, NM>(ring[s], rowtile, s, lane);
    stage_rows(xs, src, rows_tok, p0, ntok, K);
    const uint16_t *xrow = xs + (lane >> 2) * (K + XPAD);
#pragma unroll
    for (int m = 0; m < NM; m++) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.f;
    for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int c = c0 + s;
            if (c < nc) {
                fp4_compute<FMT, NM>(ring[s], c, xrow, acc, lane);
                if (c + D < nc) fp4_load<FMT, NM>(ring[s], rowtile, c + D, lane);
            }
        }
    }
}

/* ---- FP8 (shared expert) stream, block scale fp32 per 128x128 applied per chunk. */
template <int NM>
struct Fp8Stage {
    uint4 w[NM][4];
};

template <int NM, int D>
__device__ __forceinline__ void fp8_rowtile(const uint8_t *rowtile, int K, const float *bscale, int bstride,
                                            uint16_t *xs, const uint16_t *src, const int32_t *rows_tok, int p0,
                                            int ntok, float acc[NM][4])
{
    const int lane = threadIdx.x & 31, nc = K / 128, q = lane & 3;
    const uint32_t c120 = 0x7B807B80u;   /* bf16x2 of 2^120 */
    Fp8Stage<NM> ring[D];
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < nc)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    ring[s].w[m][j] = moe_ld_stream(rowtile + ((size_t)s * NM + m) * MOE_FP8_CHUNK_BYTES + j * 512 + lane * 16);
    stage_rows(xs, src, rows_tok, p0, ntok, K);
    const uint16_t *xrow = xs + (lane >> 2) * (K + XPAD);
#pragma unroll
    for (int m = 0; m < NM; m++) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.f;
    for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int c = c0 + s;
            if (c < nc) {
                float tmp[NM][4];
#pragma unroll
                for (int m = 0; m < NM; m++) tmp[m][0] = tmp[m][1] = tmp[m][2] = tmp[m][3] = 0.f;
#pragma unroll
                for (int grp = 0; grp < 4; grp++) {
                    const uint4 bx = *(const uint4 *)(xrow + c * 128 + grp * 32 + 8 * q);
#pragma unroll
                    for (int m = 0; m < NM; m++)
#pragma unroll
                        for (int step = 0; step < 2; step++) {
                            const uint32_t w0 = u4get(ring[s].w[m][grp], step * 2);
                            const uint32_t w1 = u4get(ring[s].w[m][grp], step * 2 + 1);
                            moe_mma_bf16(tmp[m], moe_bf16x2_mul(moe_fp8_pair(w0, 0x1404u), c120),
                                         moe_bf16x2_mul(moe_fp8_pair(w0, 0x3424u), c120),
                                         moe_bf16x2_mul(moe_fp8_pair(w1, 0x1404u), c120),
                                         moe_bf16x2_mul(moe_fp8_pair(w1, 0x3424u), c120), u4get(bx, step * 2),
                                         u4get(bx, step * 2 + 1));
                        }
                }
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    const float bs = bscale[(size_t)m * bstride + c];
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[m][i] = fmaf(tmp[m][i], bs, acc[m][i]);
                }
                if (c + D < nc)
#pragma unroll
                    for (int m = 0; m < NM; m++)
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            ring[s].w[m][j] = moe_ld_stream(rowtile + ((size_t)(c + D) * NM + m) * MOE_FP8_CHUNK_BYTES +
                                                            j * 512 + lane * 16);
            }
        }
    }
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

template <int FMT>
__global__ void __launch_bounds__(128, 3) k_gate_up(moe_expert_args a, const uint16_t *x, const int32_t *off,
                                                 const int32_t *pair_tok, const float *pair_w,
                                                 const int32_t *items, uint16_t *h)
{
    extern __shared__ __align__(16) uint16_t xs[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = items[nE], rg_count = a.I / MOE_ROWS_PER_ITEM;
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        const int e = find_expert(items, nE, it);
        const int n_e = off[e + 1] - off[e], nch = (n_e + MOE_TOK_CHUNK - 1) / MOE_TOK_CHUNK;
        const int local = it - items[e], rg = local / nch, tc = local % nch;
        const int p0 = off[e] + tc * MOE_TOK_CHUNK, ntok = min(MOE_TOK_CHUNK, n_e - tc * MOE_TOK_CHUNK);
        const int r = rg * MOE_WARPS + warp;   /* 16-row tile of the I outputs */
        (void)rg_count;
        float acc[2][4];
        float pg = 1.f, pu = 1.f;
        if (e < a.E) {
            const uint8_t *rt = a.w13 + (size_t)e * a.w13_stride + (size_t)r * (a.H / 128) * 2 * moe_fp4_chunk_bytes(FMT);
            fp4_rowtile<FMT, 2, 3>(rt, a.H, xs, x, pair_tok, p0, ntok, acc);
            pg = a.post13[2 * e];
            pu = a.post13[2 * e + 1];
        } else {
            const uint8_t *rt = a.sh_w13 + (size_t)r * (a.H / 128) * 2 * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s13 + (size_t)(r * 16 / 128) * (a.H / 128);
            fp8_rowtile<2, 2>(rt, a.H, bs, (a.I / 128) * (a.H / 128), xs, x, pair_tok, p0, ntok, acc);
        }
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
            if (n < ntok) {
                float gv = acc[0][i] * pg, uv = acc[1][i] * pu;
                if (a.limit > 0.f) {
                    gv = fminf(gv, a.limit);
                    uv = fmaxf(fminf(uv, a.limit), -a.limit);
                }
                const float hv = gv / (1.f + expf(-gv)) * uv * pair_w[p0 + n];
                h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(hv);
            }
        }
    }
}

template <int FMT>
__global__ void __launch_bounds__(128, 4) k_down(moe_expert_args a, const uint16_t *h, const int32_t *off,
                                              const int32_t *items, float *y)
{
    extern __shared__ __align__(16) uint16_t xs[];
    const int nE = a.E + (a.has_shared ? 1 : 0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = items[nE];
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        const int e = find_expert(items, nE, it);
        const int n_e = off[e + 1] - off[e], nch = (n_e + MOE_TOK_CHUNK - 1) / MOE_TOK_CHUNK;
        const int local = it - items[e], rg = local / nch, tc = local % nch;
        const int p0 = off[e] + tc * MOE_TOK_CHUNK, ntok = min(MOE_TOK_CHUNK, n_e - tc * MOE_TOK_CHUNK);
        const int r = rg * MOE_WARPS + warp;   /* 16-row tile of the H outputs */
        float acc[1][4];
        float post = 1.f;
        if (e < a.E) {
            const uint8_t *rt = a.w2 + (size_t)e * a.w2_stride + (size_t)r * (a.I / 128) * moe_fp4_chunk_bytes(FMT);
            fp4_rowtile<FMT, 1, 4>(rt, a.I, xs, h, NULL, p0, ntok, acc);
            post = a.post2[e];
        } else {
            const uint8_t *rt = a.sh_w2 + (size_t)r * (a.I / 128) * MOE_FP8_CHUNK_BYTES;
            const float *bs = a.sh_s2 + (size_t)(r * 16 / 128) * (a.I / 128);
            fp8_rowtile<1, 3>(rt, a.I, bs, 0, xs, h, NULL, p0, ntok, acc);
        }
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
            if (n < ntok) y[(size_t)(p0 + n) * a.H + row] = acc[0][i] * post;
        }
    }
}

static size_t smem_for(int K) { return (size_t)MOE_TOK_CHUNK * (K + XPAD) * 2; }

static cudaError_t raise_smem(const void *f, size_t bytes)
{
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

extern "C" cudaError_t moe_expert_occupancy(int fmt, int *gu, int *dn)
{
    /* the largest staged rows we support: H, I <= 8192 */
    const size_t sg = smem_for(4096), sd = smem_for(2048);
    const void *fg = fmt == MOE_FP4_NVFP4 ? (const void *)k_gate_up<MOE_FP4_NVFP4> : (const void *)k_gate_up<MOE_FP4_MXFP4>;
    const void *fd = fmt == MOE_FP4_NVFP4 ? (const void *)k_down<MOE_FP4_NVFP4> : (const void *)k_down<MOE_FP4_MXFP4>;
    cudaError_t e;
    if ((e = raise_smem(fg, smem_for(8192))) != cudaSuccess) return e;
    if ((e = raise_smem(fd, smem_for(8192))) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(gu, fg, 128, sg)) != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(dn, fd, 128, sd);
}

extern "C" cudaError_t moe_gate_up(const moe_expert_args *a, const uint16_t *x, const int32_t *off,
                                   const int32_t *pair_tok, const float *pair_w, const int32_t *items, int T,
                                   int topk, int grid, uint16_t *h, cudaStream_t st)
{
    (void)T; (void)topk;
    if (a->H % 128 || a->I % MOE_ROWS_PER_ITEM || a->H > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->H);
    if (a->fmt == MOE_FP4_NVFP4)
        k_gate_up<MOE_FP4_NVFP4><<<grid, 128, sm, st>>>(*a, x, off, pair_tok, pair_w, items, h);
    else
        k_gate_up<MOE_FP4_MXFP4><<<grid, 128, sm, st>>>(*a, x, off, pair_tok, pair_w, items, h);
    return cudaGetLastError();
}

extern "C" cudaError_t moe_down(const moe_expert_args *a, const uint16_t *h, const int32_t *off, const int32_t *items,
                                int T, int topk, int grid, float *y, cudaStream_t st)
{
    (void)T; (void)topk;
    if (a->I % 128 || a->H % MOE_ROWS_PER_ITEM || a->I > 8192) return cudaErrorInvalidValue;
    const size_t sm = smem_for(a->I);
    if (a->fmt == MOE_FP4_NVFP4)
        k_down<MOE_FP4_NVFP4><<<grid, 128, sm, st>>>(*a, h, off, items, y);
    else
        k_down<MOE_FP4_MXFP4><<<grid, 128, sm, st>>>(*a, h, off, items, y);
    return cudaGetLastError();
}

__global__ void k_combine(const float *y, const int32_t *inv, const int32_t *off, int T, int H, int E, int topk,
                          int has_shared, float *out)
{
    const int t = blockIdx.y;
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (t >= T || c >= H) return;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < topk; k++) {
        const int p = inv[(size_t)t * topk + k];
        if (p < 0) continue;
        const float4 v = *(const float4 *)(y + (size_t)p * H + c);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    if (has_shared) {
        const float4 v = *(const float4 *)(y + (size_t)(off[E] + t) * H + c);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    *(float4 *)(out + (size_t)t * H + c) = s;
}

extern "C" cudaError_t moe_combine(const float *y, const int32_t *inv, const int32_t *off, int T, int H, int E,
                                   int topk, int has_shared, float *out, cudaStream_t st)
{
    if (H % 4) return cudaErrorInvalidValue;
    dim3 grid((H / 4 + 255) / 256, T);
    k_combine<<<grid, 256, 0, st>>>(y, inv, off, T, H, E, topk, has_shared, out);
    return cudaGetLastError();
}
