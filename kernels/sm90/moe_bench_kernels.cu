/* moe_bench_kernels.cu — helpers for sluice-bench: the HBM read-ceiling kernel and device-side
 * random fills (so an 3.6 GB expert set needs no host generation or upload). */
#include <stdint.h>
#include "moe_kernels.h"

__global__ void k_hbm_read(const uint4 *p, size_t n16, unsigned *sink)
{
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {   /* four independent 16-byte loads in flight */
        uint4 a, b, c, d;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(p + i));
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(p + i + stride));
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w) : "l"(p + i + 2 * stride));
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w) : "l"(p + i + 3 * stride));
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) { const uint4 a = p[i]; acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;   /* keeps the loads alive, almost never stores */
}

extern "C" cudaError_t moe_hbm_read(const void *p, size_t n, unsigned *sink, cudaStream_t st)
{
    int dev, sms;
    cudaError_t e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    k_hbm_read<<<sms * 8, 256, 0, st>>>((const uint4 *)p, n / 16, sink);
    return cudaGetLastError();
}

__device__ static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

__global__ void k_fill_bytes(uint8_t *p, size_t n, uint32_t seed, int kind, int lo, int hi)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = hash32((uint32_t)i * 2654435761u ^ hash32(seed + (uint32_t)(i >> 32)));
        p[i] = kind == 0 ? (uint8_t)h : (uint8_t)(lo + (int)(h % (uint32_t)(hi - lo + 1)));
    }
}

extern "C" cudaError_t moe_fill_bytes(uint8_t *p, size_t n, uint32_t seed, int kind, int lo, int hi, cudaStream_t st)
{
    k_fill_bytes<<<2048, 256, 0, st>>>(p, n, seed, kind, lo, hi);
    return cudaGetLastError();
}

__global__ void k_fill_bf16(uint16_t *p, size_t n, uint32_t seed, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float u = (hash32((uint32_t)i ^ hash32(seed)) & 0xffffff) / 16777216.0f;
        const float f = (2.f * u - 1.f) * a;
        p[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

extern "C" cudaError_t moe_fill_bf16(uint16_t *p, size_t n, uint32_t seed, float a, cudaStream_t st)
{
    k_fill_bf16<<<2048, 256, 0, st>>>(p, n, seed, a);
    return cudaGetLastError();
}
