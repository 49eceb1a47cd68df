/* v4_dev.cuh — small device helpers shared by the V4 layer kernels (kernels/sm90/v4_*.cu). */
#ifndef SLUICE_V4_DEV_CUH
#define SLUICE_V4_DEV_CUH

#include <cuda_bf16.h>
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

/* Compressed entry w (ratio r) of span sp: bf16 [d] row in its page. */
__device__ __forceinline__ uint16_t *v4_entry_ptr(const v4_step &s, const v4_arena &a, size_t page_off, int sp,
                                                 int w, int r, int d)
{
    const long tok = (long)w * r;
    const int page = s.blocks[(size_t)sp * s.max_blocks + (int)(tok / a.block_tokens)];
    const int row = (int)(tok % a.block_tokens) / r;
    return (uint16_t *)(a.pages + (size_t)page * a.page_bytes + page_off) + (size_t)row * d;
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
