/* moe_fp4_common.cuh — device helpers shared by the MoE kernels: the repacked FP4/FP8 bit layout,
 * register dequantisation, the bf16 mma and streaming loads.
 *
 * FP4 -> bf16 in registers. A bf16 whose exponent field holds E2M1's two exponent bits and whose top
 * mantissa bit holds E2M1's mantissa bit is exactly e2m1_value * 2^-126 (E2M1's subnormal 0.5 lands
 * on a bf16 subnormal), so a code needs only to be masked into bits {6,7,8} (+15 for the sign) of a
 * 16-bit lane. One 32-bit word carries 4 such bf16x2 pairs; the repacker places each pair's 8 bits
 * so that pairs 0..2 come out with one rotate + one AND (rotations 0, 4, 10) and pair 3 with two
 * rotates, an AND and a LOP3 (no single-rotation tiling of a word exists: checked exhaustively).
 * The bf16 pair is then multiplied (exact) by the block's scale factor, a bf16 made from the
 * E5M3 scale code by one integer multiply-add: bits = code*16 + (F0 << 7).
 * Net: w_bf16 = e2m1 * scale * 2^(F0-253-emin); the fp32 accumulator is multiplied by
 * post = 2^(253+emin-F0) * weight_scale_2 once at the end.
 */
#ifndef SLUICE_MOE_FP4_COMMON_CUH
#define SLUICE_MOE_FP4_COMMON_CUH

#include <stdint.h>

#define MOE_F0 190                      /* bf16 exponent bias of scale code 0 */
#define MOE_FP4_MASK 0x81C081C0u        /* bf16x2 bits {6,7,8,15} of each lane */

/* Stored bit position (0..31) in its word of bit b (0..3: mantissa, exp lo, exp hi, sign) of
 * element L (0/1) of pair j (0..3). */
__host__ __device__ static inline int moe_fp4_bitpos(int j, int L, int b)
{
    int o = (b == 3 ? 15 : 6 + b) + 16 * L;
    if (j < 3) {
        const int rot = j == 0 ? 0 : (j == 1 ? 4 : 10);
        return (o + rot) & 31;
    }
    return b == 2 ? ((o + 6) & 31) : ((o + 14) & 31);
}

__device__ __forceinline__ uint32_t moe_rotr(uint32_t w, int s) { return __funnelshift_r(w, w, s); }

/* 4 bf16x2 pairs (value * 2^-126) from one repacked word. */
__device__ __forceinline__ void moe_fp4_word(uint32_t w, uint32_t p[4])
{
    p[0] = w & MOE_FP4_MASK;
    p[1] = moe_rotr(w, 4) & MOE_FP4_MASK;
    p[2] = moe_rotr(w, 10) & MOE_FP4_MASK;
    const uint32_t x = moe_rotr(w, 14) & 0x80C080C0u;  /* rotl 18 */
    const uint32_t y = moe_rotr(w, 6) & 0x01000100u;   /* rotl 26 */
    p[3] = x | y;
}

/* bf16x2 factor from a scale code (0..255) */
__device__ __forceinline__ uint32_t moe_scale_factor(uint32_t code)
{
    return code * 0x00100010u + ((uint32_t)(MOE_F0 << 7) * 0x00010001u);
}

/* Two E4M3 bytes (selected by prmt selector) -> bf16x2 of value * 2^-120 */
__device__ __forceinline__ uint32_t moe_fp8_pair(uint32_t w, uint32_t sel)
{
    const uint32_t t = __byte_perm(w, 0u, sel);
    return (t & 0x80008000u) | ((t >> 4) & 0x07F007F0u);
}

__device__ __forceinline__ uint32_t moe_bf16x2_mul(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* D += A(16x16 bf16, row) * B(16x8 bf16, col), fp32 accumulate */
__device__ __forceinline__ void moe_mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Streaming 16-byte load: read once, keep out of L1 */
__device__ __forceinline__ uint4 moe_ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ float moe_bf16_to_f32(uint16_t v) { return __uint_as_float((uint32_t)v << 16); }
__device__ __forceinline__ uint16_t moe_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Input permutation inside 32 inputs: mma k index kk (0..15) of step s for lane q maps to the
 * original input 8q + 4s + 2*(kk>=8) + (kk&1); equivalently lane q's A pairs j (0..3) of step s
 * hold original inputs 8q + 4s + 2*(j>>1) + {0,1} for rows g + 8*(j&1). */

#endif
