/* v4_synth.cu — random bytes for synthetic models' weights, drawn on the GPU at load (engine/synthetic.h):
 * byte i = lo + h(seed, i) mod span, h a 64-bit mix of the index, so any slice can be drawn independently. */
#include "common/v4_dev.cuh"

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Value i of a seeded stream uniform in (-scale, scale) */
__device__ __forceinline__ float synth_uniform(uint64_t seed, size_t i, float scale)
{
    const uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull * (i + 1));
    return ((float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
}

__global__ void k_fill_random(uint8_t *dst, size_t n, uint64_t seed, int lo, int span)
{
    for (size_t w = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w * 8 < n; w += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull * (w + 1));
        for (int b = 0; b < 8 && w * 8 + b < n; b++, h >>= 8)
            dst[w * 8 + b] = (uint8_t)(span >= 256 ? (h & 255) : lo + (int)((h & 255) % (uint64_t)span));
    }
}

extern "C" cudaError_t v4_fill_random(uint8_t *dst, size_t n, uint64_t seed, int lo, int span, cudaStream_t st)
{
    if (!n) return cudaSuccess;
    if (span < 1) return cudaErrorInvalidValue;
    size_t blocks = (n / 8 + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    k_fill_random<<<(unsigned)(blocks ? blocks : 1), 256, 0, st>>>(dst, n, seed, lo, span);
    return cudaGetLastError();
}

/* bf16 values uniform in (-scale, scale): state written directly (sluice-bench decode) */
__global__ void k_fill_bf16(uint16_t *dst, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = f2bf(synth_uniform(seed, i, scale));
    }
}

extern "C" cudaError_t v4_fill_bf16(uint16_t *dst, size_t n, uint64_t seed, float scale, cudaStream_t st)
{
    if (!n) return cudaSuccess;
    size_t blocks = (n + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    k_fill_bf16<<<(unsigned)blocks, 256, 0, st>>>(dst, n, seed, scale);
    return cudaGetLastError();
}

/* FP8 rows (v4_ops.h) of values uniform in (-scale, scale): every block's exponent is the one amax = scale gives */
__global__ void k_fill_fp8_rows(uint8_t *region, int rows, int d, uint64_t seed, float scale)
{
    const uint8_t e = fp8_block_exp(scale);
    const float inv = fp8_scale(254u - e);
    const size_t n = (size_t)rows * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = synth_uniform(seed, i, scale);
        region[i] = __nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
        if (i % d == 0)
            for (int b = 0; b < V4_FP8_SCALE_STRIDE(d); b++)
                v4_fp8_scales(region, rows, (int)(i / d), d)[b] = b < d / 64 ? e : 0;
    }
}

extern "C" cudaError_t v4_fill_fp8_rows(uint8_t *region, int rows, int d, uint64_t seed, float scale, cudaStream_t st)
{
    if (rows <= 0) return cudaSuccess;
    if (d % 64) return cudaErrorInvalidValue;
    size_t blocks = ((size_t)rows * d + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    k_fill_fp8_rows<<<(unsigned)blocks, 256, 0, st>>>(region, rows, d, seed, scale);
    return cudaGetLastError();
}

/* FP8 KV rows of values uniform in (-scale, scale): codes as k_fill_fp8_rows's, every block's exponent the one amax =
 * scale gives, the rotated dims bf16 */
__global__ void k_fill_kv8_rows(uint8_t *dst, int rows, int hd, int rope_half, uint64_t seed, float scale)
{
    const uint8_t e = fp8_block_exp(scale);
    const float inv = fp8_scale(254u - e);
    const int nope = hd - 2 * rope_half;
    const size_t rb = v4_kv_row_bytes(hd, rope_half, 1), n = (size_t)rows * hd;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = synth_uniform(seed, i, scale);
        uint8_t *row = dst + (i / hd) * rb;
        const int d = (int)(i % hd);
        if (d < nope) row[d] = __nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
        else ((uint16_t *)(row + nope))[d - nope] = f2bf(v);
        if (d == 0)
            for (int b = 0; b < V4_KV8_EXP_BYTES(nope); b++) row[nope + 4 * rope_half + b] = b < nope / 64 ? e : 0;
    }
}

extern "C" cudaError_t v4_fill_kv8_rows(uint8_t *dst, int rows, int hd, int rope_half, uint64_t seed, float scale,
                                        cudaStream_t st)
{
    if (rows <= 0) return cudaSuccess;
    if (!v4_kv8_ok(hd, rope_half)) return cudaErrorInvalidValue;
    size_t blocks = ((size_t)rows * hd + 255) / 256;
    if (blocks > 8192) blocks = 8192;
    k_fill_kv8_rows<<<(unsigned)blocks, 256, 0, st>>>(dst, rows, hd, rope_half, seed, scale);
    return cudaGetLastError();
}
