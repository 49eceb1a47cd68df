/* dev_flag.cuh — host-side flags kept per device. cudaFuncSetAttribute (a kernel's dynamic shared memory limit) applies
 * to the current device only, so a process that drives several GPUs (engine/shard.h) raises each kernel's limit once
 * on each of them, not once in all. */
#ifndef SLUICE_DEV_FLAG_CUH
#define SLUICE_DEV_FLAG_CUH

#include <cuda_runtime_api.h>

#define DEV_FLAG_MAX 64   /* device ordinals a flag array covers */

/* The current device's slot of flags[DEV_FLAG_MAX] (NULL without a current device in range: do the work every time). */
static inline unsigned char *dev_flag(unsigned char *flags)
{
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= DEV_FLAG_MAX) return NULL;
    return &flags[d];
}

/* The current device's ordinal, or -1. */
static inline int dev_index(void)
{
    int d = 0;
    return cudaGetDevice(&d) == cudaSuccess && d >= 0 && d < DEV_FLAG_MAX ? d : -1;
}

#endif
