/* moe_repack.cu — load-time work for the MoE kernels: checkpoint FP4/FP8 layouts -> the kernels'
 * repacked layout (described in kernels/moe_kernels.h), and the NVFP4 quantiser (ModelOpt rounding).
 * Runs once per tensor at load, so it favours plain code over speed (one thread per output word).
 */
#include <stdint.h>
#include <cuda_fp8.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"

/* Decode a block scale to (E, m3): value = 2^E * (1 + m3/8). Returns 0 for zero, -1 for NaN. */
__device__ static int scale_split(uint8_t s, int fmt, int *E, int *m3)
{
    if (fmt == MOE_FP4_MXFP4) {
        if (s == 0xFF) return -1;
        *E = (int)s - 127;
        *m3 = 0;
        return 1;
    }
    s &= 0x7F;                           /* scales are positive; ignore a sign bit */
    if (s == 0x7F) return -1;
    const int ex = s >> 3, man = s & 7;
    if (ex > 0) { *E = ex - 7; *m3 = man; return 1; }
    if (man == 0) return 0;
    const int h = man >= 4 ? 2 : (man >= 2 ? 1 : 0);   /* subnormal: man * 2^-9 */
    *E = h - 9;
    *m3 = (man << (3 - h)) & 7;
    return 1;
}

__global__ void k_scale_emin(const uint8_t *s, size_t n, int fmt, int *emin)
{
    int best = 0x7fffffff;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int E, m3;
        if (scale_split(s[i], fmt, &E, &m3) == 1 && E < best) best = E;
    }
    for (int o = 16; o > 0; o >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, o));
    if ((threadIdx.x & 31) == 0 && best != 0x7fffffff) atomicMin(emin, best);
}

extern "C" cudaError_t moe_scale_emin(const uint8_t *scales, size_t n_scales, int fmt, int *emin_dev,
                                      cudaStream_t st)
{
    int blocks = (int)((n_scales + 255) / 256);
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    k_scale_emin<<<blocks, 256, 0, st>>>(scales, n_scales, fmt, emin_dev);
    return cudaGetLastError();
}

/* One thread per 16-byte weight unit: (chunk r,c) x unit u x lane t. */
__global__ void k_repack_fp4_w(const uint8_t *q, const uint8_t *sc, int fmt, int n, int k,
                               uint8_t *dst, int nm, int m)
{
    const int nc = k / 128, sb = fmt == MOE_FP4_NVFP4 ? 16 : 32, nsc = k / sb;
    const size_t chunk_bytes = moe_fp4_chunk_bytes(fmt);
    const size_t units = (size_t)(n / 16) * nc * 64;
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < units; id += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(id & 31), u = (int)((id >> 5) & 1);
        const size_t rc = id >> 6;
        const int r = (int)(rc / nc), c = (int)(rc % nc);
        const int g = t >> 2, qd = t & 3;
        uint32_t words[4];
        for (int wi = 0; wi < 4; wi++) {
            const int grp = wi >> 1, step = wi & 1;
            uint32_t w = 0;
            for (int j = 0; j < 4; j++) {
                const int row = 16 * r + g + 8 * (j & 1);
                for (int L = 0; L < 2; L++) {
                    const int col = 128 * c + 64 * u + 32 * grp + 8 * qd + 4 * step + 2 * (j >> 1) + L;
                    const uint8_t byte = q[(size_t)row * (k / 2) + col / 2];
                    uint32_t nib = (col & 1) ? (byte >> 4) : (byte & 15);
                    int E, m3;
                    if (scale_split(sc[(size_t)row * nsc + col / sb], fmt, &E, &m3) != 1) nib = 0;
                    for (int b = 0; b < 4; b++)
                        if (nib & (1u << b)) w |= 1u << moe_fp4_bitpos(j, L, b);
                }
            }
            words[wi] = w;
        }
        uint8_t *o = dst + (((size_t)r * nc + c) * nm + m) * chunk_bytes + (size_t)u * 512 + (size_t)t * 16;
        *(uint4 *)o = make_uint4(words[0], words[1], words[2], words[3]);
    }
}

/* One thread per scale code in the chunk's scale region. Lane (g, q) reads 8 bytes: the codes of
 * rows g and g+8 for its 4 (k64 unit u, k32 group grp) blocks, at moe_fp4_scale_byte(row half, 2u + grp).
 * MXFP4 (block 32): region [g][8]. NVFP4 (block 16): region [g][q>>1][8], block = 4u + 2grp + (q>>1). */
__global__ void k_repack_fp4_s(const uint8_t *sc, int fmt, int n, int k, int emin, uint8_t *dst, int nm,
                               int m, int *clamped)
{
    const int nc = k / 128, sb = fmt == MOE_FP4_NVFP4 ? 16 : 32, nsc = k / sb, per_chunk = 16 * (128 / sb);
    const size_t chunk_bytes = moe_fp4_chunk_bytes(fmt);
    const size_t total = (size_t)(n / 16) * nc * per_chunk;
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < total; id += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(id % per_chunk);
        const size_t rc = id / per_chunk;
        const int r = (int)(rc / nc), c = (int)(rc % nc);
        int g, hq;
        if (fmt == MOE_FP4_NVFP4) g = i >> 4, hq = (i >> 3) & 1;
        else g = i >> 3, hq = 0;
        const int hi = (i >> 2) & 1, ug = i & 3;          /* ug = 2u + grp; stored at moe_fp4_scale_byte */
        const int blk = fmt == MOE_FP4_NVFP4 ? 2 * ug + hq : ug;
        const int row = 16 * r + g + 8 * hi;
        int E = 0, m3 = 0;
        const int kind = scale_split(sc[(size_t)row * nsc + c * (128 / sb) + blk], fmt, &E, &m3);
        uint32_t code = 0;
        if (kind == 1) {
            int d = E - emin;
            if (d > 31) { d = 31; m3 = 7; atomicAdd(clamped, 1); }
            code = (uint32_t)(d << 3 | m3);
        } else if (kind < 0) {
            code = 255;
            atomicAdd(clamped, 1);
        }
        dst[(((size_t)r * nc + c) * nm + m) * chunk_bytes + 1024 + (i & ~7) + moe_fp4_scale_byte(hi, ug)] = (uint8_t)code;
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b > 4096 ? 4096 : (b < 1 ? 1 : b));
}

extern "C" int moe_repack_f0(void) { return MOE_F0; }

extern "C" cudaError_t moe_repack_fp4(const uint8_t *q, const uint8_t *scales, int fmt, int n, int k, int emin,
                                      uint8_t *dst, int nm, int m, int *clamped_dev, cudaStream_t st)
{
    if (n % 16 || k % 128) return cudaErrorInvalidValue;
    const size_t units = (size_t)(n / 16) * (k / 128) * 64;
    k_repack_fp4_w<<<grid_for(units), 256, 0, st>>>(q, scales, fmt, n, k, dst, nm, m);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const size_t sn = (size_t)(n / 16) * (k / 128) * 16 * (fmt == MOE_FP4_NVFP4 ? 8 : 4);
    k_repack_fp4_s<<<grid_for(sn), 256, 0, st>>>(scales, fmt, n, k, emin, dst, nm, m, clamped_dev);
    return cudaGetLastError();
}

/* FP8: one thread per 16-byte unit (chunk r,c) x group grp (0..3) x lane t. Word (step*2 + h)
 * holds pairs 2h and 2h+1 of mma step `step`: bytes [pair 2h L0, L1, pair 2h+1 L0, L1]. */
__global__ void k_repack_fp8(const uint8_t *w, int n, int k, uint8_t *dst, int nm, int m)
{
    const int nc = k / 128;
    const size_t units = (size_t)(n / 16) * nc * 128;
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < units; id += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(id & 31), grp = (int)((id >> 5) & 3);
        const size_t rc = id >> 7;
        const int r = (int)(rc / nc), c = (int)(rc % nc);
        const int g = t >> 2, qd = t & 3;
        uint8_t out[16];
        for (int step = 0; step < 2; step++)
            for (int j = 0; j < 4; j++)
                for (int L = 0; L < 2; L++) {
                    const int row = 16 * r + g + 8 * (j & 1);
                    const int col = 128 * c + 32 * grp + 8 * qd + 4 * step + 2 * (j >> 1) + L;
                    const int h = j >> 1, jj = j & 1;
                    out[(step * 2 + h) * 4 + jj * 2 + L] = w[(size_t)row * k + col];
                }
        uint8_t *o = dst + (((size_t)r * nc + c) * nm + m) * MOE_FP8_CHUNK_BYTES + (size_t)grp * 512 + (size_t)t * 16;
        uint4 v;
        memcpy(&v, out, 16);
        *(uint4 *)o = v;
    }
}

extern "C" cudaError_t moe_repack_fp8(const uint8_t *w, int n, int k, uint8_t *dst, int nm, int m, cudaStream_t st)
{
    if (n % 16 || k % 128) return cudaErrorInvalidValue;
    k_repack_fp8<<<grid_for((size_t)(n / 16) * (k / 128) * 128), 256, 0, st>>>(w, n, k, dst, nm, m);
    return cudaGetLastError();
}

/* ---- NVFP4 quantiser, following quant.h's statement of ModelOpt's rounding */

__global__ void k_amax(const float *w, size_t n, unsigned *amax_bits)
{
    float a = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a = fmaxf(a, fabsf(w[i]));
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, __float_as_uint(a));  /* a >= 0: bits order = value order */
}

__device__ static uint8_t e2m1_round(float x)
{
    const float a = fabsf(x);
    uint8_t c;
    if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    return (uint8_t)(c | (x < 0.f ? 8 : 0));
}

__device__ static float e4m3_value(uint8_t v)
{
    const int ex = (v >> 3) & 15, man = v & 7;
    const float mag = ex ? ldexpf(1.f + man / 8.f, ex - 7) : ldexpf((float)man, -9);
    return (v & 0x80) ? -mag : mag;
}

/* (moe_shared_gemm.cuh): one thread per 8 weights, their e4m3 values as bf16 (exact: 4 significant bits), times the
 * block scale where s is not NULL (rounded to nearest even; exact for power-of-two scales) */
__global__ void k_shared_to_bf16(const uint8_t *w, const float *s, int n, int k, uint16_t *dst, int nm, int m)
{
    const size_t units = (size_t)n * (k / 8);
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < units; id += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(id / (k / 8)), c = (int)(id % (k / 8)) * 8;
        const uint2 v = *(const uint2 *)(w + (size_t)r * k + c);
        const float sc = s ? s[(size_t)(r / 128) * (k / 128) + c / 128] : 1.f;
        uint16_t o[8];
        for (int i = 0; i < 8; i++) o[i] = moe_f32_to_bf16(e4m3_value((uint8_t)((i < 4 ? v.x : v.y) >> (8 * (i & 3)))) * sc);
        uint4 u;
        memcpy(&u, o, 16);
        *(uint4 *)(dst + ((size_t)r * nm + m) * k + c) = u;
    }
}

extern "C" cudaError_t moe_shared_to_bf16(const uint8_t *w, const float *s, int n, int k, uint16_t *dst, int nm, int m,
                                          cudaStream_t st)
{
    if (n % 128 || k % 128 || nm < 1 || m < 0 || m >= nm) return cudaErrorInvalidValue;
    k_shared_to_bf16<<<grid_for((size_t)n * (k / 8)), 256, 0, st>>>(w, s, n, k, dst, nm, m);
    return cudaGetLastError();
}

__device__ unsigned g_moe_amax_copy;   /* load-time scratch: quantisation is serialised on a stream */

/* One thread per 16-input block. */
__global__ void k_quant_nvfp4(const float *w, int n, int k, const unsigned *amax_bits, uint8_t *q, uint8_t *scale,
                              float *scale2)
{
    const size_t nb = (size_t)n * (k / 16);
    const float amax = __uint_as_float(*amax_bits);
    const float s2 = amax / (6.0f * 448.0f);
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale2 = s2;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < nb; b += (size_t)gridDim.x * blockDim.x) {
        const float *x = w + b * 16;
        float bm = 0.f;
        for (int i = 0; i < 16; i++) bm = fmaxf(bm, fabsf(x[i]));
        uint8_t sc = 0;
        if (s2 > 0.f) sc = __nv_cvt_float_to_fp8(bm / 6.0f / s2, __NV_SATFINITE, __NV_E4M3);
        scale[b] = sc;
        const float d = e4m3_value(sc) * s2;
        uint8_t *o = q + b * 8;
        for (int i = 0; i < 16; i += 2) {
            const uint8_t lo = d > 0.f ? e2m1_round(x[i] / d) : 0;
            const uint8_t hi = d > 0.f ? e2m1_round(x[i + 1] / d) : 0;
            o[i / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

extern "C" cudaError_t moe_quantize_nvfp4(const float *w, int n, int k, uint8_t *q, uint8_t *scale, float *scale2,
                                          cudaStream_t st)
{
    if (k % 16) return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(scale2, 0, sizeof(float), st);
    if (e != cudaSuccess) return e;
    const size_t total = (size_t)n * k;
    k_amax<<<grid_for(total), 256, 0, st>>>(w, total, (unsigned *)scale2);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    /* amax is read from scale2's bits by every thread before block 0 overwrites it: avoid the race
     * by a second pass that first copies amax. */
    unsigned *amax_dev;
    if ((e = cudaGetSymbolAddress((void **)&amax_dev, g_moe_amax_copy)) != cudaSuccess) return e;
    if ((e = cudaMemcpyAsync(amax_dev, scale2, sizeof(unsigned), cudaMemcpyDeviceToDevice, st)) != cudaSuccess)
        return e;
    k_quant_nvfp4<<<grid_for((size_t)n * (k / 16)), 256, 0, st>>>(w, n, k, amax_dev, q, scale, scale2);
    return cudaGetLastError();
}
