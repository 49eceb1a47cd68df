/* v4_dev.cuh — small device helpers shared by the V4 layer kernels (kernels/sm90/v4_*.cu). */
#ifndef SLUICE_V4_DEV_CUH
#define SLUICE_V4_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "moe_launch.cuh"
#include "v4_ops.h"

/* Programmatic dependent launch (sm_90+): a kernel started by moe_launch (moe_launch.cuh) first lets the next kernel
 * of the stream begin launching, then waits until the previous kernel has completed and its writes are visible,
 * before it reads anything. The launch latency of a step's many small kernels overlaps the kernel before them. */
__device__ __forceinline__ void pdl_enter()
{
    moe_pdl_release();
    moe_pdl_wait();
}

__device__ __forceinline__ float bf2f(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
__device__ __forceinline__ uint16_t f2bf(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result. `red` holds
 * 33 floats of shared memory; the call contains two barriers, so every thread must reach it. */
__device__ __forceinline__ float block_sum(float v, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    const float r = red[32];
    __syncthreads();
    return r;
}
__device__ __forceinline__ float block_max(float v, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? red[lane] : -INFINITY;
        t = warp_max(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    const float r = red[32];
    __syncthreads();
    return r;
}

/* Compressed entry w (ratio r) of span sp: the layer's region at page_off in its page (block_tokens / r entries), and
 * its row there in *row. */
__device__ __forceinline__ uint8_t *v4_entry_region(const v4_step &s, const v4_arena &a, size_t page_off, int sp,
                                                    int w, int r, int *row)
{
    const long tok = (long)w * r;
    const int page = s.blocks[(size_t)sp * s.max_blocks + (int)(tok / a.block_tokens)];
    *row = (int)(tok % a.block_tokens) / r;
    return a.pages + (size_t)page * a.page_bytes + page_off;
}
/* Compressed entry w (ratio r) of span sp: its row of row_bytes in its page. */
__device__ __forceinline__ uint8_t *v4_entry_row(const v4_step &s, const v4_arena &a, size_t page_off, int sp, int w,
                                                 int r, size_t row_bytes)
{
    int row;
    uint8_t *region = v4_entry_region(s, a, page_off, sp, w, r, &row);
    return region + (size_t)row * row_bytes;
}
/* Compressed entry w (ratio r) of span sp: bf16 [d] row in its page. */
__device__ __forceinline__ uint16_t *v4_entry_ptr(const v4_step &s, const v4_arena &a, size_t page_off, int sp,
                                                 int w, int r, int d)
{
    return (uint16_t *)v4_entry_row(s, a, page_off, sp, w, r, (size_t)d * 2);
}

/* FP8 rows (v4_ops.h, "FP8 rows"): row `row` of a region of `rows` rows of d values: its d E4M3 codes, and its d/64
 * scale exponents after the region's codes. */
__device__ __forceinline__ uint8_t *v4_fp8_codes(uint8_t *region, int row, int d) { return region + (size_t)row * d; }
__device__ __forceinline__ uint8_t *v4_fp8_scales(uint8_t *region, int rows, int row, int d)
{
    return region + (size_t)rows * d + (size_t)row * V4_FP8_SCALE_STRIDE(d);
}
/* Compressed entry w (ratio r) of span sp stored as FP8 rows: its page's region at page_off holds block_tokens / r. */
__device__ __forceinline__ uint8_t *v4_fp8_entry(const v4_step &s, const v4_arena &a, size_t page_off, int sp, int w,
                                                 int r, int d, uint8_t **scales)
{
    int row;
    uint8_t *region = v4_entry_region(s, a, page_off, sp, w, r, &row);
    *scales = v4_fp8_scales(region, a.block_tokens / r, row, d);
    return v4_fp8_codes(region, row, d);
}
/* A block's scale exponent (biased, E8M0) for its largest magnitude amax: 2^e >= max(amax, 1e-4) / 448 with e the
 * smallest such integer, from the fp32 quotient's bits, at most 254 (a non-finite amax) (engine/quant.h's
 * qt_fp8_block_exp, bit for bit). */
__device__ __forceinline__ uint8_t fp8_block_exp(float amax)
{
    const uint32_t u = __float_as_uint((amax > 1e-4f ? amax : 1e-4f) / 448.0f);
    const uint32_t e = ((u >> 23) & 0xFF) + ((u & 0x7FFFFF) != 0);
    return (uint8_t)(e < 254 ? e : 254);
}
/* 2^(e - 127) for a biased exponent 1 <= e <= 254 */
__device__ __forceinline__ float fp8_scale(uint32_t e) { return __uint_as_float(e << 23); }
/* One FP8 block of 64 values held by a warp, lane l the pair (a, b) of values 2l and 2l + 1: its E4M3 codes into
 * codes[0..63] and its exponent into *exp (lane 0). Every lane of the warp calls it. */
__device__ __forceinline__ void fp8_store_block(float a, float b, uint8_t *codes, uint8_t *exp)
{
    const int lane = threadIdx.x & 31;
    const uint8_t e = fp8_block_exp(warp_max(fmaxf(fabsf(a), fabsf(b))));
    const float inv = fp8_scale(254u - e);   /* 2^-(e - 127): v * inv is v / 2^(e-127) exactly */
    ((__nv_fp8x2_storage_t *)codes)[lane] =
        __nv_cvt_float2_to_fp8x2(make_float2(a * inv, b * inv), __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) *exp = e;
}
/* Two E4M3 codes (the low byte first) times s, as a bf16x2 (the low half first); exact, since an E4M3 value times a
 * power of two has at most 4 significant bits. */
__device__ __forceinline__ uint32_t e4m3x2_scaled_bf16x2(uint16_t codes, float s)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)codes, __NV_E4M3);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return (uint32_t)f2bf(f.x * s) | ((uint32_t)f2bf(f.y * s) << 16);
}

/* One E4M3 code's value */
__device__ __forceinline__ float e4m3_to_f(uint8_t code)
{
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)code, __NV_E4M3);
    return __half2float(*(const __half *)&h);
}
/* Value d of a key row (v4_ops.h, "KV rows"): bf16, or an FP8 KV row whose first nope values are codes. */
__device__ __forceinline__ float v4_kv_val(const uint8_t *row, int d, int nope, int rope_half, bool kv8)
{
    if (!kv8) return bf2f(((const uint16_t *)row)[d]);
    if (d < nope) return e4m3_to_f(row[d]) * fp8_scale(row[nope + 4 * rope_half + (d >> 6)]);
    return bf2f(((const uint16_t *)(row + nope))[d - nope]);
}

/* RoPE angle of pair i at position pos: computed in double, as the CPU reference's tables. */
__device__ __forceinline__ void v4_rope_cs(long pos, double inv_freq, float *c, float *sn)
{
    double sd, cd;
    sincos((double)pos * inv_freq, &sd, &cd);
    *c = (float)cd;
    *sn = (float)sd;
}

#endif
