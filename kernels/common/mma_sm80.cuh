/* mma_sm80.cuh — warp-level tensor-core and async-copy primitives (sm_80+ PTX) shared by the V4 layer kernels:
 * cp.async 16-byte copies into shared memory, ldmatrix (plain and transposed) and mma.sync m16n8k16 bf16 with
 * fp32 accumulation.
 *
 * The one home of these primitives: the MoE, dense and V4 layer kernels all use them.
 *
 * Fragment layout of mma.m16n8k16 (lane = 4 g + q): A (16 x 16, row-major) a0 = (g, 2q..2q+1), a1 = (g+8, ..),
 * a2 = (g, 2q+8..), a3 = (g+8, 2q+8..); B (16 x 8, k x n) b0 = (k 2q..2q+1, n g), b1 = (k 2q+8.., n g); C (16 x 8)
 * c0,c1 = (g, 2q..2q+1), c2,c3 = (g+8, 2q..2q+1). ldmatrix.x4 loads four 8 x 8 b16 matrices whose row addresses
 * come from lanes 0-7, 8-15, 16-23, 24-31; lane l receives row l/4, columns 2 (l%4).. of each (.trans: the
 * transpose).
 */
#ifndef SLUICE_MMA_SM80_CUH
#define SLUICE_MMA_SM80_CUH

#include <stdint.h>

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronous (cache at L2 only) */
__device__ __forceinline__ void cp_async16(void *smem, const void *g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem)), "l"(g) : "memory");
}
/* 8 bytes global -> shared, asynchronous (through L1: .cg takes 16 bytes only) */
__device__ __forceinline__ void cp_async8(void *smem, const void *g)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_u32(smem)), "l"(g) : "memory");
}
/* 4 bytes global -> shared, asynchronous (through L1) */
__device__ __forceinline__ void cp_async4(void *smem, const void *g)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(smem)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
}

/* Word i of a 16-byte fragment piece (i a compile-time constant where it matters: registers, no local array) */
__device__ __forceinline__ uint32_t u4get(const uint4 &v, int i)
{
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

/* Two E4M3 bytes of w (chosen by the prmt selector) as a bf16x2 of value e4m3 * 2^-120: sign, then exponent and
 * mantissa bits moved into bf16 positions (e4m3 subnormals become bf16 subnormals); times 2^120 is exact */
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t w, uint32_t sel)
{
    const uint32_t t = __byte_perm(w, 0u, sel);
    return (t & 0x80008000u) | ((t >> 4) & 0x07F007F0u);
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* C += A (16 x 16 bf16: a0..a3) B (16 x 8 bf16: b0, b1), fp32 */
__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#endif
