/* moe_launch.cuh — launch with programmatic dependent launch (PDL, sm_90+): the next kernel in the
 * stream may be launched while this one drains, and waits in moe_pdl_wait() until this one has
 * finished and its writes are visible. Works inside CUDA graph capture. Hides the per-kernel launch
 * gap (a few us), which matters at batch 1 where the whole layer is ~30 us of HBM time. */
#ifndef SLUICE_MOE_LAUNCH_CUH
#define SLUICE_MOE_LAUNCH_CUH

#include <cuda_runtime.h>

/* Call first in every kernel launched with moe_launch, before reading what the previous kernel wrote. */
__device__ __forceinline__ void moe_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
/* Call when this block's main work is done: lets the dependent kernel start launching. */
__device__ __forceinline__ void moe_pdl_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* prio: NULL, or the launch's scheduling priority (cudaLaunchAttributePriority, in the range of
 * cudaDeviceGetStreamPriorityRange; a graph honours it when instantiated with
 * cudaGraphInstantiateFlagUseNodePriority): its blocks take free SM slots before lower-priority ones.
 * pev: NULL, or an event (created with cudaEventDisableTiming) this launch records as a programmatic event
 * (cudaLaunchAttributeProgrammaticEvent, triggered as each block starts): a kernel in another stream that waits on
 * it (cudaStreamWaitEvent) may be launched once every block of this one has started, and must call moe_pdl_wait()
 * before reading what this one writes (the wait covers it as it covers the previous kernel of its own stream). */
template <typename... KArgs, typename... Args>
static cudaError_t moe_launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                 const int *prio, cudaEvent_t pev, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[3];
    int n = 0;
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n++].val.programmaticStreamSerializationAllowed = 1;
    if (prio) {
        at[n].id = cudaLaunchAttributePriority;
        at[n++].val.priority = *prio;
    }
    if (pev) {
        at[n].id = cudaLaunchAttributeProgrammaticEvent;
        at[n].val.programmaticEvent.event = pev;
        at[n].val.programmaticEvent.flags = 0;
        at[n++].val.programmaticEvent.triggerAtBlockStart = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t moe_launch_prio(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                   const int *prio, Args &&...args)
{
    return moe_launch_ex(kernel, grid, block, smem, st, prio, (cudaEvent_t)0, static_cast<Args &&>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t moe_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                              Args &&...args)
{
    return moe_launch_prio(kernel, grid, block, smem, st, (const int *)0, static_cast<Args &&>(args)...);
}

#endif
