/* v4_allreduce.cu — the all-reduce that makes a sublayer's output whole again across the ranks of one host
 * (engine/shard.h): every rank adds the ranks' partial sums in rank order, so every rank ends with the same bits.
 *
 * Ranks on distinct GPUs read each other's partials directly (peer access over NVLink or PCIe): a one-shot
 * all-reduce, one launch per rank, whose blocks first meet their peers' blocks of the same launch through flags:
 * block b of rank s raises rank d's flag [b][s] to its epoch (the count of launches it has run), then waits for its
 * own flags [b][r] of every rank r to reach it. A peer's raised flag means its partial is complete (the kernel that
 * wrote it ran before the peer's all-reduce started) and that it has finished reading this rank's previous input
 * (the caller alternates two input buffers, so the one written next is never the one a peer may still read). A wait
 * longer than the timeout (a GPU stopped or hung) sets the fault word in host memory and the block goes on; once the
 * word is set no launch waits (each checks it as it starts and while it waits), so the step ends within one timeout
 * with garbage and the host fails it. */
#include "common/v4_dev.cuh"
#include "v4_ops.h"

__global__ void k_ar_local(v4_ar_local a, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float s = a.buf[0][i];
#pragma unroll
        for (int r = 1; r < V4_AR_MAX_RANKS; r++)   /* constant indices: the pointers stay in parameter space */
            if (r < a.n) s += a.buf[r][i];
#pragma unroll
        for (int r = 0; r < V4_AR_MAX_RANKS; r++)
            if (r < a.n) a.buf[r][i] = s;
    }
}

extern "C" cudaError_t v4_allreduce_local(const v4_ar_local *a, size_t count, cudaStream_t st)
{
    if (a->n < 1 || a->n > V4_AR_MAX_RANKS) return cudaErrorInvalidValue;
    if (!count || a->n == 1) return cudaSuccess;
    size_t blocks = (count + 255) / 256;
    if (blocks > 1024) blocks = 1024;
    k_ar_local<<<(unsigned)blocks, 256, 0, st>>>(*a, count);
    return cudaGetLastError();
}

__device__ __forceinline__ void st_release_sys(unsigned *p, unsigned v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void __launch_bounds__(512) k_ar_peer(v4_ar_peer a, size_t count, float *out)
{
    __shared__ unsigned ep;
    const int b = blockIdx.x;
    if (threadIdx.x == 0) ep = ++a.epoch[b];
    __syncthreads();
    if (threadIdx.x < a.n) {
        const int r = threadIdx.x;
        st_release_sys(a.inbox[r] + b * V4_AR_MAX_RANKS + a.me, ep);
        const unsigned *mine = a.inbox[a.me] + b * V4_AR_MAX_RANKS + r;
        const volatile unsigned *fault = a.fault;
        const unsigned long long t0 = now_ns();
        /* after a fault no wait: the step is lost anyway, and its later all-reduces must not wait again (the word is
           in host memory: read as the wait starts and every 256 polls) */
        if (*fault == 0)
            for (unsigned k = 1; (int)(ld_acquire_sys(mine) - ep) < 0; k++) {
                if (now_ns() - t0 > a.timeout_ns) {
                    *(volatile unsigned *)a.fault = 1u + (unsigned)r;
                    break;
                }
                if (k % 256 == 0 && *fault) break;   /* another block or rank gave up */
                __nanosleep(128);
            }
    }
    __syncthreads();
    const size_t per = (count + gridDim.x - 1) / gridDim.x, i0 = (size_t)b * per, i1 = i0 + per < count ? i0 + per : count;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        float s = a.in[0][i];
#pragma unroll
        for (int r = 1; r < V4_AR_MAX_RANKS; r++)
            if (r < a.n) s += a.in[r][i];
        out[i] = s;
    }
}

extern "C" cudaError_t v4_allreduce_peer(const v4_ar_peer *a, size_t count, float *out, cudaStream_t st)
{
    if (a->n < 1 || a->n > V4_AR_MAX_RANKS || a->me < 0 || a->me >= a->n) return cudaErrorInvalidValue;
    k_ar_peer<<<V4_AR_BLOCKS, 512, 0, st>>>(*a, count, out);
    return cudaGetLastError();
}
