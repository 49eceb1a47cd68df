/* dense_gemm.cu — dense projections y = x · Wᵀ (dense_gemm.h): bf16 or FP8 E4M3 weights with fp32 128x128 block
 * scales, bf16 activations, fp32 outputs; one kernel template for every m.
 *
 * Layout (dense_weight_init repacks): the weight is cut into chunks of 16 rows x 128 inputs, zero-padded to whole
 * chunks, stored row tile by row tile (a row tile's chunks contiguous along K). Inside a chunk the bytes are in
 * mma.sync m16n8k16 A-fragment order: each lane's fragments of two k16 steps are one 16-byte piece (FP8: 4 pieces
 * of 512 bytes per chunk, one per 32-input group; bf16: 8). The inputs of a 32-input group are permuted the same way
 * for weights and activations (lane q's k16 fragments hold inputs 8q..8q+7 of the group), so a lane's activation
 * fragments of a group are one 16-byte load of its token's row.
 *
 * Kernel: weights on the A side (rows = output features), tokens on the N side (8 per n-tile). A warp owns RT row
 * tiles x NT n-tiles over one K slice; it streams its chunks HBM -> shared memory with cp.async into a private ring
 * (D chunks in flight, 8 KB per row tile; each lane copies and reads back only its own pieces, so no barrier),
 * converts FP8 to bf16 in registers (exact: the e4m3 bits moved into bf16 positions, times 2^120), and reads its
 * activations straight from L1/L2 a few 32-input groups ahead. Per 128-input block it accumulates fresh partials with
 * mma.sync, then acc = fmaf(partial, block scale, acc). K is split into S slices (dense_gemm_splits: enough warps to
 * fill the GPU when the call has few row tiles); a block of 8 warps holds S / SC slices of 8 / (S / SC) row groups,
 * and S = 16 uses clusters of SC = 2 blocks; the slices' partials are added in slice order by the slice-0 warp
 * through (distributed) shared memory. Every output has one owner and a fixed order: deterministic, and the same
 * for every variant below, so a row's result does not depend on m (dense_gemm.h).
 *
 * Variants by m (tokens per block = 8 NT; blocks of one row group are adjacent in launch order, so a weight tile
 * read for one token tile is found in L2 by the next):
 *   m <= 8: NT 1, m <= 16: NT 2 (3 blocks = 24 warps per SM, 192 KB of weights in flight), m <= 32: NT 4 (2 blocks):
 *   the weights stream once;
 *   larger m: RT 2 x NT 8 (32 rows x 64 tokens per warp: each activation fragment feeds 2 row tiles, each dequantised
 *   weight fragment 8 n-tiles; 1 block per SM, 128 KB of rings) over token tiles of 64. From m = 33 on, every warp
 *   re-reading the tokens' activations from L2 for its row tile costs more than the weights (wq_b at m = 64: 2048 row
 *   tiles x 128 KB), so two row tiles a warp halve it (35 -> 30 us for wq_b on an H100); RT 1 x NT 8 (FP8 2 blocks,
 *   bf16 1) is kept for devices without room for the wide variant's rings. mma.sync, not wgmma: the
 *   same instruction and chain order as the decode variants is what keeps the results independent of m.
 * Roofline at decode: the weight bytes at the HBM read rate (H200 ~4.5 TB/s): wq_b 32768x1024 FP8 (33.6 MB) ~7.5 us.
 * Activations: 16-byte loads where x is 16-byte aligned, ldx % 8 == 0 and k % 128 == 0 (XV), else element loads
 * (inputs past k read as zero; NT 1 or 8 only); token rows past m are read as row m - 1 (never stored).
 */
#include <stdint.h>
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include "common/dev_flag.cuh"
#include "dense_gemm.h"
#include "common/mma_sm80.cuh"
#include "common/moe_launch.cuh"

namespace cg = cooperative_groups;

#define DG_WARPS 8                /* warps per block */
#define DG_THREADS (DG_WARPS * 32)
#define DG_FILL_WARPS 2048        /* K slices are added until a call has this many warp tiles (~16 per SM) */
#define DG_MAX_SPLIT 16           /* two blocks of 8 warps (a cluster of 2) */

__host__ __device__ constexpr int dg_chunk(int fmt) { return fmt == DENSE_FP8_B128 ? 2048 : 4096; }
/* ring depth in chunks: 8 KB per row tile either way */
__host__ __device__ constexpr int dg_depth(int fmt) { return fmt == DENSE_FP8_B128 ? 4 : 2; }
__host__ __device__ constexpr int dg_ring(int fmt, int rt) { return dg_depth(fmt) * rt * dg_chunk(fmt); }
/* activation groups held in registers (XR - 1 groups loaded ahead) and blocks per SM the variant is compiled for
 * (decode: 3 blocks with 64 KB of rings each); both chosen so that ptxas spills nothing: NT 8 FP8 fits 2 blocks
 * (128 registers) only without the look-ahead, NT 8 bf16 not at all, the element loads (!XV) take one group at a time */
__host__ __device__ constexpr int dg_xr(int fmt, int rt, int nt, int xv)
{
    return !xv ? 1 : nt == 1 ? 4 : nt == 8 && rt == 1 && fmt == DENSE_FP8_B128 ? 1 : 2;
}
__host__ __device__ constexpr int dg_minb(int fmt, int rt, int nt, int xv)
{
    return rt > 1 ? 1 : nt == 8 ? (xv && fmt == DENSE_FP8_B128 ? 2 : 1) : nt == 4 ? 2 : 3;
}

struct DgArgs {
    const uint8_t *w;
    const float *scale;
    const uint16_t *x;
    void *y;                 /* fp32, or bf16 (rounded to nearest) when ybf */
    int k, nc, kps, S, SC;   /* inputs, 128-input chunks, chunks per K slice, slices, blocks per cluster */
    int tile0, tile_end;     /* row tiles of the call: [tile0, tile_end) */
    int n0, nn, ldx, m, ldy;
    int ybf;
    int grows, gx;           /* grouped: every grows rows of W read the inputs gx further along x (0: one group) */
};

/* 8 activations at p: XV one 16-byte load (x aligned, k % 128 == 0); else inputs col + e < lim read one by one,
 * the rest zero */
template <int XV>
__device__ __forceinline__ uint4 dg_ldx(const uint16_t *p, int, int)
{
    return __ldg((const uint4 *)p);
}
template <>
__device__ __forceinline__ uint4 dg_ldx<0>(const uint16_t *p, int col, int lim)
{
    uint32_t u[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const uint32_t lo = col + 2 * e < lim ? __ldg(p + 2 * e) : 0u;
        const uint32_t hi = col + 2 * e + 1 < lim ? __ldg(p + 2 * e + 1) : 0u;
        u[e] = lo | hi << 16;
    }
    return make_uint4(u[0], u[1], u[2], u[3]);
}

template <int FMT, int RT, int NT, int XV>
__global__ void __launch_bounds__(DG_THREADS, dg_minb(FMT, RT, NT, XV)) k_dense_gemm(const DgArgs a)
{
    constexpr int CH = dg_chunk(FMT), D = dg_depth(FMT), RING = dg_ring(FMT, RT);
    constexpr int XR = dg_xr(FMT, RT, NT, XV);
    extern __shared__ __align__(16) uint8_t dg_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int SW = a.S / a.SC, WR = DG_WARPS / SW;   /* slices and row groups per block */
    const int ws = warp % SW, wr = warp / SW;
    const int rank = blockIdx.y % a.SC, rgroup = blockIdx.y / a.SC;
    const int s = rank * SW + ws;   /* this warp's K slice */
    const int tfirst = a.tile0 + (rgroup * WR + wr) * RT;
    const bool live = tfirst < a.tile_end;
    const int cb = s * a.kps, ce = live ? min(a.nc, cb + a.kps) : cb;
    int tile[RT];
    const uint8_t *src[RT];
#pragma unroll
    for (int i = 0; i < RT; i++) {
        tile[i] = min(tfirst + i, a.tile_end - 1);   /* a tile past the call's rows streams the last one, unstored */
        src[i] = a.w + (size_t)tile[i] * a.nc * CH + lane * 16;
    }
    uint8_t *ring = dg_smem + warp * RING + lane * 16;
    auto issue = [&](int slot, int c) {
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int p = 0; p < CH / 512; p++)
                cp_async16(ring + (slot * RT + i) * CH + p * 512, src[i] + (size_t)c * CH + p * 512);
    };
    /* the weights do not depend on the previous kernel: the first D chunks go out before the wait */
#pragma unroll
    for (int d = 0; d < D; d++) {
        if (cb + d < ce) issue(d, cb + d);
        cp_async_commit();
    }
    moe_pdl_wait();
    const int t0 = blockIdx.x * 8 * NT, lim = a.k - 8 * q;
    const uint16_t *xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) xrow[j] = a.x + (size_t)min(t0 + 8 * j + g, a.m - 1) * a.ldx + 8 * q;
    if (a.grows)   /* a warp's row tiles lie in one group (grows is a multiple of 16 RT) */
#pragma unroll
        for (int j = 0; j < NT; j++) xrow[j] += (size_t)(tile[0] * 16 / a.grows) * a.gx;
    /* group Q (chunk Q / 4, inputs 32 (Q % 4) ..) of the lane's NT token rows */
    auto loadq = [&](uint4 xv[NT], int Q) {
        const int col = (Q >> 2) * 128 + (Q & 3) * 32;
#pragma unroll
        for (int j = 0; j < NT; j++) xv[j] = dg_ldx<XV>(xrow[j] + col, col, lim);
    };
    uint4 xr[XR][NT];
#pragma unroll
    for (int u = 0; u < XR - 1; u++)   /* XR divides 4: group Q lives in xr[Q % XR] (XR 1: loaded where used) */
        if (cb * 4 + u < ce * 4) loadq(xr[u], cb * 4 + u);
    float acc[RT][NT][4];
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
    for (int c = cb; c < ce; c++) {
        const int slot = (c - cb) % D;
        cp_async_wait<D - 1>();   /* chunk c (this lane's pieces) has landed */
        float part[RT][NT][4];
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++) part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.f;
        constexpr int GU = XV ? 4 : 1;   /* the element loads: one group at a time (registers) */
#pragma unroll GU
        for (int grp = 0; grp < 4; grp++) {
            if (c * 4 + grp + XR - 1 < ce * 4) loadq(xr[(grp + XR - 1) % XR], c * 4 + grp + XR - 1);
            const uint4 *xv = xr[grp % XR];
#pragma unroll
            for (int i = 0; i < RT; i++) {
                const uint8_t *wp = ring + (slot * RT + i) * CH;
                if (FMT == DENSE_FP8_B128) {
                    const uint4 wv = *(const uint4 *)(wp + grp * 512);
                    const uint32_t c120 = 0x7B807B80u;   /* bf16x2 of 2^120 */
#pragma unroll
                    for (int step = 0; step < 2; step++) {
                        const uint32_t w0 = u4get(wv, 2 * step), w1 = u4get(wv, 2 * step + 1);
                        const uint32_t a0 = bf16x2_mul(e4m3x2_bf16x2(w0, 0x1404u), c120);
                        const uint32_t a1 = bf16x2_mul(e4m3x2_bf16x2(w0, 0x3424u), c120);
                        const uint32_t a2 = bf16x2_mul(e4m3x2_bf16x2(w1, 0x1404u), c120);
                        const uint32_t a3 = bf16x2_mul(e4m3x2_bf16x2(w1, 0x3424u), c120);
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            mma_bf16(part[i][j], a0, a1, a2, a3, u4get(xv[j], 2 * step), u4get(xv[j], 2 * step + 1));
                    }
                } else {
#pragma unroll
                    for (int step = 0; step < 2; step++) {
                        const uint4 wv = *(const uint4 *)(wp + (grp * 2 + step) * 512);
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            mma_bf16(part[i][j], wv.x, wv.y, wv.z, wv.w, u4get(xv[j], 2 * step),
                                   u4get(xv[j], 2 * step + 1));
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RT; i++) {
            const float sc = FMT == DENSE_FP8_B128 ? __ldg(a.scale + (size_t)(tile[i] >> 3) * a.nc + c) : 1.f;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = fmaf(part[i][j][e], sc, acc[i][j][e]);
        }
        if (c + D < ce) issue(slot, c + D);   /* this lane's reads of the slot are done */
        cp_async_commit();
    }
    cp_async_wait<0>();
    moe_pdl_release();
    if (a.S > 1) {   /* the slices' partials, added in slice order by the slice-0 warp of rank 0 */
        __syncthreads();   /* every warp is done with its ring: it holds the partials now */
        float *red = (float *)(dg_smem + warp * RING);
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) red[((i * NT + j) * 4 + e) * 32 + lane] = acc[i][j][e];
        if (a.SC > 1)
            cg::this_cluster().sync();
        else
            __syncthreads();
        if (rank == 0 && ws == 0 && live)
            for (int s2 = 1; s2 < a.S; s2++) {
                float *o = (float *)(dg_smem + (wr * SW + s2 % SW) * RING);
                if (s2 >= SW) o = cg::this_cluster().map_shared_rank(o, s2 / SW);
#pragma unroll
                for (int i = 0; i < RT; i++)
#pragma unroll
                    for (int j = 0; j < NT; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[i][j][e] = acc[i][j][e] + o[((i * NT + j) * 4 + e) * 32 + lane];
            }
        if (a.SC > 1) cg::this_cluster().sync();   /* the other block's partials stay until they are read */
        if (rank != 0 || ws != 0) return;
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = (tfirst + i) * 16 + g + 8 * (e >> 1), t = t0 + 8 * j + 2 * q + (e & 1);
                if (t < a.m && row >= a.n0 && row < a.n0 + a.nn) {
                    const size_t at = (size_t)t * a.ldy + (row - a.n0);
                    if (a.ybf) ((__nv_bfloat16 *)a.y)[at] = __float2bfloat16_rn(acc[i][j][e]);
                    else ((float *)a.y)[at] = acc[i][j][e];
                }
            }
}

/* ---- load time: repack into the chunk layout */

/* FP8: one thread per (chunk, 32-input group grp, lane): its 16-byte piece, word 2 step + h holds the e4m3 bytes of
 * rows g, g + 8 at inputs c0 + 2h, c0 + 2h + 1 (c0 = 128 c + 32 grp + 8 q + 4 step) as [g lo, g hi, g+8 lo, g+8 hi] */
__global__ void k_dense_repack_fp8(const uint8_t *w, int n, int k, int nc, size_t units, uint8_t *dst)
{
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < units; id += (size_t)gridDim.x * blockDim.x) {
        const int lane = (int)(id & 31), grp = (int)((id >> 5) & 3), g = lane >> 2, q = lane & 3;
        const size_t rc = id >> 7;
        const int r = (int)(rc / nc), c = (int)(rc % nc);
        uint32_t u[4];
        for (int word = 0; word < 4; word++) {
            const int step = word >> 1, h = word & 1;
            uint32_t v = 0;
            for (int b = 0; b < 4; b++) {
                const int row = 16 * r + g + 8 * (b >> 1), col = 128 * c + 32 * grp + 8 * q + 4 * step + 2 * h + (b & 1);
                if (row < n && col < k) v |= (uint32_t)w[(size_t)row * k + col] << (8 * b);
            }
            u[word] = v;
        }
        *(uint4 *)(dst + rc * dg_chunk(DENSE_FP8_B128) + grp * 512 + lane * 16) = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

/* bf16: one thread per (chunk, piece p = 2 grp + step, lane): the A fragment {a0, a1, a2, a3} of k16 step p, i.e.
 * rows g / g + 8 at inputs c0, c0 + 1 (a0 / a1) and c0 + 2, c0 + 3 (a2 / a3), c0 = 128 c + 32 grp + 8 q + 4 step */
__global__ void k_dense_repack_bf16(const uint16_t *w, int n, int k, int nc, size_t units, uint8_t *dst)
{
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < units; id += (size_t)gridDim.x * blockDim.x) {
        const int lane = (int)(id & 31), p = (int)((id >> 5) & 7), g = lane >> 2, q = lane & 3;
        const size_t rc = id >> 8;
        const int r = (int)(rc / nc), c = (int)(rc % nc);
        const int c0 = 128 * c + 32 * (p >> 1) + 8 * q + 4 * (p & 1);
        uint32_t u[4];
        for (int word = 0; word < 4; word++) {
            const int row = 16 * r + g + 8 * (word & 1), col = c0 + 2 * (word >> 1);
            uint32_t v = 0;
            for (int b = 0; b < 2; b++)
                if (row < n && col + b < k) v |= (uint32_t)w[(size_t)row * k + col + b] << (16 * b);
            u[word] = v;
        }
        *(uint4 *)(dst + rc * dg_chunk(DENSE_BF16) + p * 512 + lane * 16) = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

/* ---- host */

typedef void (*dg_kernel)(const DgArgs);

/* variants: RT x NT; the element-load (!XV) kernels exist as RT 1 x NT 1 and 8 only (odd shapes: correctness) */
#define DG_VARIANTS 5
static const int dg_var_rt[DG_VARIANTS] = {1, 1, 1, 1, 2}, dg_var_nt[DG_VARIANTS] = {1, 2, 4, 8, 8};
static const dg_kernel dg_kernels[2][DG_VARIANTS + 2] = {
    {k_dense_gemm<0, 1, 1, 1>, k_dense_gemm<0, 1, 2, 1>, k_dense_gemm<0, 1, 4, 1>, k_dense_gemm<0, 1, 8, 1>,
     k_dense_gemm<0, 2, 8, 1>, k_dense_gemm<0, 1, 1, 0>, k_dense_gemm<0, 1, 8, 0>},
    {k_dense_gemm<1, 1, 1, 1>, k_dense_gemm<1, 1, 2, 1>, k_dense_gemm<1, 1, 4, 1>, k_dense_gemm<1, 1, 8, 1>,
     k_dense_gemm<1, 2, 8, 1>, k_dense_gemm<1, 1, 1, 0>, k_dense_gemm<1, 1, 8, 0>},
};

/* Raises every variant's shared-memory limit once per device (the current one); *wide: the RT 2 variants fit that
 * device's per-block limit (not on sm_120's 99 KB), kept per device for a process driving different GPUs. */
static cudaError_t dg_setup(int *wide_ok)
{
    static unsigned char dones[DEV_FLAG_MAX], wides[DEV_FLAG_MAX];
    unsigned char *done = dev_flag(dones), *w = dev_flag(wides);
    if (done && *done) {
        *wide_ok = w ? *w : 0;
        return cudaSuccess;
    }
    int dev, optin;
    cudaError_t e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) return e;
    int wide = 1;
    for (int f = 0; f < 2; f++)
        for (int v = 0; v < DG_VARIANTS + 2; v++) {
            const int sm = DG_WARPS * dg_ring(f, v < DG_VARIANTS ? dg_var_rt[v] : 1);
            if (sm > optin) {
                wide = 0;
                continue;
            }
            if ((e = cudaFuncSetAttribute((const void *)dg_kernels[f][v], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          sm)) != cudaSuccess)
                return e;
        }
    *wide_ok = wide;
    if (w) *w = (unsigned char)wide;
    if (done) *done = 1;
    return cudaSuccess;
}

extern "C" int dense_gemm_splits(int nn, int k)
{
    const int nc = (k + 127) / 128;
    const long tiles = (nn + 15) / 16;
    int S = 1;
    while (S < DG_MAX_SPLIT && 2 * S <= nc && tiles * S < DG_FILL_WARPS) S *= 2;
    return S;
}

extern "C" cudaError_t dense_weight_init(dense_weight *dw, int fmt, int n, int k, const void *w_dev,
                                         const float *scale_dev, cudaStream_t st)
{
    if (!dw) return cudaErrorInvalidValue;
    dw->w = NULL;
    dw->scale = NULL;
    dw->bytes = 0;
    if ((fmt != DENSE_BF16 && fmt != DENSE_FP8_B128) || n < 1 || k < 1 || !w_dev ||
        (fmt == DENSE_FP8_B128 && !scale_dev))
        return cudaErrorInvalidValue;
    int wide_ok;
    cudaError_t e = dg_setup(&wide_ok);
    if (e != cudaSuccess) return e;
    dw->fmt = fmt;
    dw->n = n;
    dw->k = k;
    const int ntw = (n + 15) / 16, nc = (k + 127) / 128;
    const size_t wbytes = (size_t)ntw * nc * dg_chunk(fmt);
    if ((e = cudaMalloc(&dw->w, wbytes)) != cudaSuccess) {
        dw->w = NULL;
        return e;
    }
    dw->bytes = wbytes;
    const size_t units = (size_t)ntw * nc * (dg_chunk(fmt) / 16);
    const unsigned blocks = (unsigned)(units / 256 + 1 < 65536 ? units / 256 + 1 : 65536);
    if (fmt == DENSE_FP8_B128) {
        const size_t sbytes = (size_t)((n + 127) / 128) * nc * sizeof(float);
        if ((e = cudaMalloc((void **)&dw->scale, sbytes)) != cudaSuccess) {
            dw->scale = NULL;
            dense_weight_free(dw);
            return e;
        }
        dw->bytes += sbytes;
        e = cudaMemcpyAsync(dw->scale, scale_dev, sbytes, cudaMemcpyDeviceToDevice, st);
        if (e == cudaSuccess) {
            k_dense_repack_fp8<<<blocks, 256, 0, st>>>((const uint8_t *)w_dev, n, k, nc, units, (uint8_t *)dw->w);
            e = cudaGetLastError();
        }
    } else {
        k_dense_repack_bf16<<<blocks, 256, 0, st>>>((const uint16_t *)w_dev, n, k, nc, units, (uint8_t *)dw->w);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) dense_weight_free(dw);
    return e;
}

extern "C" void dense_weight_free(dense_weight *dw)
{
    if (!dw) return;
    if (dw->w) cudaFree(dw->w);
    if (dw->scale) cudaFree(dw->scale);
    dw->w = NULL;
    dw->scale = NULL;
    dw->bytes = 0;
}

static cudaError_t dg_launch(const dense_weight *W, int n0, int nn, int grows, int gx, const uint16_t *x, int ldx,
                             int m, void *y, int ybf, int ldy, cudaStream_t st)
{
    int wide_ok = 0;
    cudaError_t e = dg_setup(&wide_ok);
    if (e != cudaSuccess) return e;
    const int xv = ((uintptr_t)x % 16 == 0) && ldx % 8 == 0 && W->k % 128 == 0 && gx % 8 == 0;
    int var = m <= 8 ? 0 : m <= 16 ? 1 : m <= 32 ? 2 : !wide_ok ? 3 : 4;
    if (!xv) var = var == 0 ? DG_VARIANTS : DG_VARIANTS + 1;
    const int rt = var < DG_VARIANTS ? dg_var_rt[var] : 1, nt = var < DG_VARIANTS ? dg_var_nt[var] : var == DG_VARIANTS ? 1 : 8;
    if (grows % (16 * rt)) return cudaErrorInvalidValue;
    DgArgs a;
    a.w = (const uint8_t *)W->w;
    a.scale = W->scale;
    a.x = x;
    a.y = y;
    a.ybf = ybf;
    a.k = W->k;
    a.nc = (W->k + 127) / 128;
    a.S = dense_gemm_splits(nn, W->k);
    a.kps = (a.nc + a.S - 1) / a.S;
    a.SC = a.S > DG_WARPS ? a.S / DG_WARPS : 1;
    a.tile0 = n0 / 16;
    a.tile_end = (n0 + nn + 15) / 16;
    a.n0 = n0;
    a.nn = nn;
    a.ldx = ldx;
    a.m = m;
    a.ldy = ldy;
    a.grows = grows;
    a.gx = gx;
    const int wr = DG_WARPS / (a.S / a.SC);   /* row groups per block */
    const int groups = (a.tile_end - a.tile0 + wr * rt - 1) / (wr * rt);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((m + 8 * nt - 1) / (8 * nt)), (unsigned)(groups * a.SC));
    cfg.blockDim = dim3(DG_THREADS);
    cfg.dynamicSmemBytes = (size_t)DG_WARPS * dg_ring(W->fmt, rt);
    cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (a.SC > 1) {
        at[1].id = cudaLaunchAttributeClusterDimension;
        at[1].val.clusterDim.x = 1;
        at[1].val.clusterDim.y = (unsigned)a.SC;
        at[1].val.clusterDim.z = 1;
        cfg.numAttrs = 2;
    }
    return cudaLaunchKernelEx(&cfg, dg_kernels[W->fmt][var], a);
}

extern "C" cudaError_t dense_gemm(const dense_weight *W, int n0, int nn, const uint16_t *x, int ldx, int m, float *y,
                                  int ldy, cudaStream_t st)
{
    if (!W || !W->w || (W->fmt == DENSE_FP8_B128 && !W->scale) || n0 < 0 || nn < 0 || m < 0 || n0 + nn > W->n)
        return cudaErrorInvalidValue;
    if (m == 0 || nn == 0) return cudaSuccess;
    if (!x || !y || ldx < W->k || ldy < nn) return cudaErrorInvalidValue;
    return dg_launch(W, n0, nn, 0, 0, x, ldx, m, y, 0, ldy, st);
}

extern "C" cudaError_t dense_gemm_grouped(const dense_weight *W, int groups, const uint16_t *x, int ldx, int gx, int m,
                                          void *y, int y_bf16, int ldy, cudaStream_t st)
{
    if (!W || !W->w || (W->fmt == DENSE_FP8_B128 && !W->scale) || groups < 1 || W->n % groups || m < 0 || gx < 0)
        return cudaErrorInvalidValue;
    if (m == 0) return cudaSuccess;
    if (!x || !y || ldx < (groups - 1) * gx + W->k || ldy < W->n) return cudaErrorInvalidValue;
    const int rows = W->n / groups;
    if (rows % 32 == 0) return dg_launch(W, 0, W->n, rows, gx, x, ldx, m, y, y_bf16, ldy, st);
    for (int g = 0; g < groups; g++) {   /* groups that do not fill whole row tiles: one call each */
        void *yg = (char *)y + (size_t)g * rows * (y_bf16 ? 2 : 4);
        cudaError_t e = dg_launch(W, g * rows, rows, 0, 0, x + (size_t)g * gx, ldx, m, yg, y_bf16, ldy, st);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
