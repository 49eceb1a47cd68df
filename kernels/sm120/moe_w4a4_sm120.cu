/* moe_w4a4_sm120.cu — routed-expert gate/up for Blackwell workstation GPUs (sm_120, RTX PRO 6000 class)
 * with the block-scaled FP4 tensor-core MMA: W4A4, both operands NVFP4.
 *
 * NOT RUN HERE: this project's only GPU is an H200 (sm_90); this file is compiled in the default build
 * (CUDA architectures 90a;120a) and its body exists only in the sm_120a pass, guarded by
 * __CUDA_ARCH_FAMILY_SPECIFIC__ == 1200 (sm_90a also defines the family macro, as 900, and sm_100a
 * rejects this instruction). The host launcher refuses any device that is not compute capability 12.x.
 * The A/B fragment layouts follow the PTX ISA's m16n8k64 e2m1 figures; the lane that supplies each
 * row's / column's scale vector ({byte-id, thread-id} = {0, 0}; rows g from lanes q = 0, rows g+8
 * from q = 1, token columns from q = 0) is our reading of the ISA text and is unverified on hardware,
 * so this path has its own tolerance and must be validated on an sm_120 card before use.
 *
 * Work split as on sm_90 (moe_build_lists items; one warp = 16 rows of gate and of up), but the weights
 * are read in the checkpoint's own ModelOpt layout (U8 [out][in/2], E4M3 scale per 16), because the
 * MMA consumes E2M1 codes and UE4M3 scales directly: a0..a3 are 32-bit words of the row-major codes.
 * Activations are quantised per item to NVFP4 in shared memory with the checkpoint's input_scale:
 * s = e4m3(amax16 / (6 * input_scale)), q = e2m1(x / (s * input_scale)); the accumulator is multiplied
 * by weight_scale_2 * input_scale at the end. Shared expert: not handled here (FP8 path is sm_90 only).
 */
#include <stdint.h>
#include <cuda_fp8.h>
#include "moe_kernels.h"
#include "common/moe_fp4_common.cuh"

#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ == 1200
#define MOE_SM120_BODY 1
#endif

#ifdef MOE_SM120_BODY
__device__ __forceinline__ void mma_nvf4(float c[4], const uint32_t a[4], const uint32_t b[2], uint32_t sa, uint32_t sb)
{
    asm volatile("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {0, 0}, %11, {0, 0};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sa), "r"(sb));
}

__device__ __forceinline__ uint32_t e2m1_code(float x)
{
    const float a = fabsf(x);
    const uint32_t c = a <= .25f ? 0 : a < .75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5
                     : a <= 5.f ? 6 : 7;
    return c | (x < 0.f ? 8u : 0u);
}
#endif

/* smem: xq [8][H/2] codes, xs [8][H/16] scales */
__global__ void __launch_bounds__(128) k_gate_up_w4a4(moe_w4a4_args a, const uint16_t *x, const int32_t *off,
                                                      const int32_t *pair_tok, const float *pair_w,
                                                      const int32_t *items, uint16_t *h)
{
#ifdef MOE_SM120_BODY
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *xq = smem, *xs = smem + MOE_TOK_CHUNK * (a.H / 2);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int total = items[a.E];
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        int e = 0;
        for (int lo = 0, hi = a.E; hi - lo > 1;) {   /* largest e with items[e] <= it */
            const int mid = (lo + hi) >> 1;
            if (items[mid] <= it) lo = mid; else hi = mid;
            e = lo;
        }
        const int n_e = off[e + 1] - off[e], nch = (n_e + MOE_TOK_CHUNK - 1) / MOE_TOK_CHUNK;
        const int local = it - items[e], rg = local / nch, tc = local % nch;
        const int p0 = off[e] + tc * MOE_TOK_CHUNK, ntok = min(MOE_TOK_CHUNK, n_e - tc * MOE_TOK_CHUNK);
        const int r = rg * MOE_WARPS + warp;
        __syncthreads();
        /* quantise the item's tokens: one thread per 16-input block */
        for (int b = threadIdx.x; b < MOE_TOK_CHUNK * (a.H / 16); b += blockDim.x) {
            const int row = b / (a.H / 16), blk = b % (a.H / 16);
            float v[16], amax = 0.f;
            for (int i = 0; i < 16; i++) {
                v[i] = row < ntok ? moe_bf16_to_f32(x[(size_t)pair_tok[p0 + row] * a.H + blk * 16 + i]) : 0.f;
                amax = fmaxf(amax, fabsf(v[i]));
            }
            const uint8_t s = __nv_cvt_float_to_fp8(amax / (6.f * a.input_scale), __NV_SATFINITE, __NV_E4M3);
            const __half_raw hr = __nv_cvt_fp8_to_halfraw(s, __NV_E4M3);
            const float d = __half2float(__half(hr)) * a.input_scale;
            xs[row * (a.H / 16) + blk] = s;
            for (int i = 0; i < 16; i += 2)
                xq[row * (a.H / 2) + blk * 8 + i / 2] =
                    (uint8_t)(d > 0.f ? (e2m1_code(v[i] / d) | e2m1_code(v[i + 1] / d) << 4) : 0);
        }
        __syncthreads();
        float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
        const uint8_t *wq = a.w13_q + (size_t)e * a.w13_q_stride, *ws = a.w13_s + (size_t)e * a.w13_s_stride;
        for (int k = 0; k < a.H; k += 64) {
            uint32_t b[2], sb;
            b[0] = *(const uint32_t *)(xq + g * (a.H / 2) + k / 2 + q * 4);
            b[1] = *(const uint32_t *)(xq + g * (a.H / 2) + k / 2 + 16 + q * 4);
            sb = *(const uint32_t *)(xs + g * (a.H / 16) + k / 16);
#pragma unroll
            for (int m = 0; m < 2; m++) {   /* m = 0: gate rows, 1: up rows (w3 after w1 in the tensor) */
                const size_t row0 = (size_t)m * a.I + r * 16 + g;
                const uint8_t *p = wq + row0 * (a.H / 2) + k / 2 + q * 4;
                uint32_t av[4];
                av[0] = __ldg((const uint32_t *)p);
                av[1] = __ldg((const uint32_t *)(p + 8 * (a.H / 2)));
                av[2] = __ldg((const uint32_t *)(p + 16));
                av[3] = __ldg((const uint32_t *)(p + 8 * (a.H / 2) + 16));
                const uint32_t sa = __ldg((const uint32_t *)(ws + (row0 + ((q & 1) ? 8 : 0)) * (a.H / 16) + k / 16));
                mma_nvf4(acc[m], av, b, sa, sb);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r * 16 + g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
            if (n < ntok) {
                float gv = acc[0][i] * a.post13[2 * e] * a.input_scale, uv = acc[1][i] * a.post13[2 * e + 1] * a.input_scale;
                if (a.limit > 0.f) {
                    gv = fminf(gv, a.limit);
                    uv = fmaxf(fminf(uv, a.limit), -a.limit);
                }
                h[(size_t)(p0 + n) * a.I + row] = moe_f32_to_bf16(gv / (1.f + expf(-gv)) * uv * pair_w[p0 + n]);
            }
        }
    }
#else
    (void)a; (void)x; (void)off; (void)pair_tok; (void)pair_w; (void)items; (void)h;
#endif
}

extern "C" cudaError_t moe_gate_up_w4a4_sm120(const moe_w4a4_args *a, const uint16_t *x, const int32_t *off,
                                              const int32_t *pair_tok, const float *pair_w, const int32_t *items,
                                              int grid, uint16_t *h, cudaStream_t st)
{
    int dev, major;
    cudaError_t e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess) return e;
    if (major != 12) return cudaErrorNotSupported;
    if (a->H % 64 || a->I % MOE_ROWS_PER_ITEM || a->input_scale <= 0.f) return cudaErrorInvalidValue;
    const size_t smem = (size_t)MOE_TOK_CHUNK * (a->H / 2 + a->H / 16);
    if ((e = cudaFuncSetAttribute(k_gate_up_w4a4, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) != cudaSuccess)
        return e;
    k_gate_up_w4a4<<<grid, 128, smem, st>>>(*a, x, off, pair_tok, pair_w, items, h);
    return cudaGetLastError();
}
