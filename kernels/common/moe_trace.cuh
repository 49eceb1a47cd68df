/* moe_trace.cuh — stage timeline of one forward, for the bench: every kernel of the layer keeps,
 * per stage slot, the earliest block start and the latest warp end (%globaltimer, ns) in a device
 * buffer set with moe_trace_set (kernels/moe_kernels.h); NULL (the default) records nothing. Costs when
 * on: one atomic per block and one per warp on the slot's words. */
#ifndef SLUICE_MOE_TRACE_CUH
#define SLUICE_MOE_TRACE_CUH

static __device__ unsigned long long *g_moe_trace;   /* one copy per .cu module; set by moe_trace_set */

__device__ __forceinline__ unsigned long long moe_now()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Declared first in a kernel: the block's start now, each warp's end when the kernel body returns. */
struct MoeTrace {
    unsigned long long *p;
    __device__ explicit MoeTrace(int slot) : p(g_moe_trace ? g_moe_trace + 2 * slot : nullptr)
    {
        if (p && threadIdx.x == 0) atomicMin(p, moe_now());
    }
    __device__ ~MoeTrace()
    {
        if (p && (threadIdx.x & 31) == 0) atomicMax(p + 1, moe_now());
    }
};

#endif
