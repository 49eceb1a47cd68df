/* v4_synth.cu — random bytes for synthetic models' weights, drawn on the GPU at load (engine/synthetic.h):
 * byte i = lo + h(seed, i) mod span, h a 64-bit mix of the index, so any slice can be drawn independently. */
#include "common/v4_dev.cuh"

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
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
        const uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull * (i + 1));
        dst[i] = f2bf(((float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
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
