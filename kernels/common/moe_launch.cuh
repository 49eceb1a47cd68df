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
 * cudaGraphInstantiateFlagUseNodePriority): its blocks take free SM slots before lower-priority ones. */
template <typename... KArgs, typename... Args>
static cudaError_t moe_launch_prio(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                   const int *prio, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (prio) {
        at[1].id = cudaLaunchAttributePriority;
        at[1].val.priority = *prio;
        cfg.numAttrs = 2;
    }
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t moe_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                              Args &&...args)
{
    return moe_launch_prio(kernel, grid, block, smem, st, (const int *)0, static_cast<Args &&>(args)...);
}

#endif
