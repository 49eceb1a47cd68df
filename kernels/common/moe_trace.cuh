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

/* The timer read as a compiler barrier ("memory"): it cannot move above a __syncthreads or a memory access
 * before it (moe_now can; the MOE_TRACE_TL lists start read before the barrier). For the
 * diagnostic builds only: in the default build it would pin the code around every trace point. */
__device__ __forceinline__ unsigned long long moe_now_fenced()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
    return t;
}

/* The timer read once v is computed: v's inputs (e.g. loaded values) have arrived. The read is
 * predicated on v == v, so it cannot issue before v exists (a plain data use of v could be dropped as
 * dead by ptxas and the read hoisted); 0 if v is NaN. */
__device__ __forceinline__ unsigned long long moe_now_after(float v)
{
    unsigned long long t;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.f32 p, %1, %1;\n\tmov.u64 %0, 0;\n\t@p mov.u64 %0, %%globaltimer;\n\t}"
                 : "=l"(t) : "f"(v) : "memory");
    return t;
}

/* One warp's span [t0, now] into a slot's earliest start / latest end (the fused kernel's item kinds). */
__device__ __forceinline__ void moe_trace_span(int slot, unsigned long long t0)
{
    unsigned long long *p = g_moe_trace;
    if (p && (threadIdx.x & 31) == 0) {
        atomicMin(p + 2 * slot, t0);
        atomicMax(p + 2 * slot + 1, moe_now());
    }
}

/* item log (bench, builds with -DMOE_TRACE_ITEMS=1; moe_ilog_set): every warp-item of the T <= 8 kernel as one
 * record of 2 words, after a header (word 0: records written, word 1: capacity): its start (%globaltimer ns) and
 * duration (ns, bits 0-31) | slot << 32 | (bytes / 16) << 40 | SM << 56. NULL (the default) records nothing. */
static __device__ unsigned long long *g_moe_ilog;

__device__ __forceinline__ unsigned moe_smid()
{
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

/* moe_trace_span, and the item into the log when one is set */
__device__ __forceinline__ void moe_trace_item(int slot, unsigned long long t0, size_t bytes)
{
    moe_trace_span(slot, t0);
    unsigned long long *p = g_moe_ilog;
    if (p && (threadIdx.x & 31) == 0) {
        const unsigned long long n = atomicAdd(p, 1ull);
        if (n < p[1]) {
            const unsigned long long d = moe_now() - t0;
            p[2 + 2 * n] = t0;
            p[3 + 2 * n] = (d & 0xffffffffull) | (unsigned long long)slot << 32 |
                           (unsigned long long)((bytes >> 4) & 0xffff) << 40 | (unsigned long long)(moe_smid() & 0xff) << 56;
        }
    }
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
