/* moe_l2.cuh — L2 prefetch of weight ranges a later launch of the layer will read.
 *
 * cp.async.bulk.prefetch.L2 (sm_90) asks the L2 to fetch a byte range from HBM: one instruction per
 * range, nothing lands in the SM and nothing waits for it, so a kernel can issue it at its start at no
 * cost to its own work. At small batches each stage of the layer is a one-shot stream that leaves HBM
 * idle while it fills and drains and the router
 * leaves it idle for ~25 us; bytes asked for then are read from L2 by the stage that needs them.
 */
#ifndef SLUICE_MOE_L2_CUH
#define SLUICE_MOE_L2_CUH

#include <stdint.h>
#include <stddef.h>

__device__ __forceinline__ uint64_t moe_l2_policy(int last)
{
    uint64_t p;
    if (last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    return p;
}

/* Piece i of np of the range [p, p + n) (n rounded down to 16 bytes; pieces cut at 16-byte multiples). */
__device__ __forceinline__ void moe_l2_prefetch_piece(const void *p, size_t n, int i, int np, uint64_t pol)
{
    n &= ~(size_t)15;
    const size_t ps = ((n + np - 1) / np + 15) & ~(size_t)15, b = (size_t)i * ps;
    if (!p || b >= n) return;
    const size_t len = n - b < ps ? n - b : ps;
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"((const char *)p + b),
                 "r"((unsigned)len), "l"(pol)
                 : "memory");
}

#endif
