/* moe_fp4_common.cuh — device helpers shared by the MoE kernels: the repacked FP4/FP8 bit layout,
 * register dequantisation, the bf16 mma and streaming loads.
 *
 * FP4 -> bf16 in registers. A bf16 whose exponent field holds E2M1's two exponent bits and whose top
 * mantissa bit holds E2M1's mantissa bit is exactly e2m1_value * 2^-126 (E2M1's subnormal 0.5 lands
 * on a bf16 subnormal), so a code needs only to be masked into bits {6,7,8} (+15 for the sign) of a
 * 16-bit lane. One 32-bit word carries 4 such bf16x2 pairs, placed by the repacker so that pair 0 is
 * the word masked, pairs 1-2 a rotation (3, 6) and a mask, pair 3 the word masked to its 8 bits, times
 * 2^3 + 2^8 + 2^14 (one IMAD, on the FMA pipe: the three shifted copies never overlap, so there are no
 * carries) and masked: 7 integer-pipe ops + 1 IMAD per word.
 * No layout gives every pair one rotate + one mask, nor 6 or fewer integer-pipe ops with IMAD-shifted
 * pairs (bench/fp4_layout_search.py).
 * The bf16 pair is then multiplied (exact) by the block's scale factor, a bf16 whose bits are
 * code * 16 + (F0 << 7), built from the E5M3 scale code with F0 = 192 (no bits below 12, so the sum is
 * an OR). A lane's 8 codes (4 k32 blocks x rows g, g+8) are stored [g b0, g b1, g+8 b0, g+8 b1]
 * [g b2, g b3, g+8 b2, g+8 b3], so one shift and one LOP3 give two factors at once (row g in the low
 * lane, g+8 in the high one), which the bf16x2 multiply takes with a half broadcast
 * (moe_bf16x2_mul_lo/_hi).
 * Net: w_bf16 = e2m1 * scale * 2^(F0-253-emin); the fp32 accumulator is multiplied by
 * post = 2^(253+emin-F0) * weight_scale_2 once at the end (moe_repack_f0() gives F0 to the host).
 */
#ifndef SLUICE_MOE_FP4_COMMON_CUH
#define SLUICE_MOE_FP4_COMMON_CUH

#include <stdint.h>

#include "mma_sm80.cuh"

#define MOE_F0 192                      /* bf16 exponent bias of scale code 0 */
#define MOE_F0_BITS ((uint32_t)(MOE_F0 << 7) * 0x00010001u)   /* F0 << 7 in both bf16 lanes */
#define MOE_FP4_MASK 0x81C081C0u        /* bf16x2 bits {6,7,8,15} of each lane */
#define MOE_FP4_P3_BITS 0x001B001Bu     /* the stored bits of pair 3 */
#define MOE_FP4_P3_MUL 0x00004108u      /* 2^3 + 2^8 + 2^14 */

/* Stored bit position (0..31) in its word of bit b (0..3: mantissa, exp lo, exp hi, sign) of
 * element L (0/1) of pair j (0..3). */
__host__ __device__ static inline int moe_fp4_bitpos(int j, int L, int b)
{
    const int o = (b == 3 ? 15 : 6 + b) + 16 * L;
    if (j < 3) return (o + 3 * j) & 31;
    return (b < 2 ? b + 3 : b - 2) + 16 * L;   /* bits 3,4,0,1 (+16L) land on 6,7,8,15 (+16L) */
}

/* Byte (0..7) of a lane's 8 scale codes holding row half hi (0: row g, 1: g+8) of k32 block ug (0..3). */
__host__ __device__ static inline int moe_fp4_scale_byte(int hi, int ug)
{
    return (ug >> 1) * 4 + hi * 2 + (ug & 1);
}

__device__ __forceinline__ uint32_t moe_rotr(uint32_t w, int s) { return __funnelshift_r(w, w, s); }

/* 4 bf16x2 pairs (value * 2^-126) from one repacked word. */
__device__ __forceinline__ void moe_fp4_word(uint32_t w, uint32_t p[4])
{
    p[0] = w & MOE_FP4_MASK;
    p[1] = moe_rotr(w, 3) & MOE_FP4_MASK;
    p[2] = moe_rotr(w, 6) & MOE_FP4_MASK;
    p[3] = ((w & MOE_FP4_P3_BITS) * MOE_FP4_P3_MUL) & MOE_FP4_MASK;
}

/* The factors of k32 block ug from a lane's two code words sx (blocks 0-1), sy (2-3):
 * row g in the low lane, row g+8 in the high one. */
/* ORS (the 1-tile kernels, and the 2-tile and wide ones without the FP8 branch): the exponent bits come from a
 * constant-bank word, so the mask and the OR are one LOP3 instead of two (LOP3 takes one immediate); the
 * 2-tile kernels with the FP8 branch keep the immediates (the mask's register made the 128-row 2-tile down
 * spill). */
__constant__ uint32_t moe_f0_bits = MOE_F0_BITS;
template <bool ORS>
__device__ __forceinline__ uint32_t moe_scale_factors2(uint32_t sx, uint32_t sy, int ug)
{
    const uint32_t s = ug < 2 ? sx : sy, m = (ug & 1 ? s >> 4 : s << 4) & 0x0FF00FF0u;
    return m | (ORS ? moe_f0_bits : MOE_F0_BITS);
}

/* a * {f.lo, f.lo} and a * {f.hi, f.hi}: the broadcast folds into the multiply's operand (.H0_H0). */
__device__ __forceinline__ uint32_t moe_bf16x2_mul_lo(uint32_t a, uint32_t f)
{
    uint32_t d;
    asm("{ .reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {l, l}; mul.rn.bf16x2 %0, %1, b; }"
        : "=r"(d) : "r"(a), "r"(f));
    return d;
}
__device__ __forceinline__ uint32_t moe_bf16x2_mul_hi(uint32_t a, uint32_t f)
{
    uint32_t d;
    asm("{ .reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {h, h}; mul.rn.bf16x2 %0, %1, b; }"
        : "=r"(d) : "r"(a), "r"(f));
    return d;
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
