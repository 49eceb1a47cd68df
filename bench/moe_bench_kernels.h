/* moe_bench_kernels.h — GPU helpers of sluice-bench (bench/moe_bench_kernels.cu), not part of the product:
 * the HBM read-ceiling kernel, a streaming probe, clock and timing helpers, device-side random fills. */
#ifndef SLUICE_MOE_BENCH_KERNELS_H
#define SLUICE_MOE_BENCH_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads n bytes (multiple of 16) and writes one word per block to sink. */
cudaError_t moe_hbm_read(const void *p, size_t n, unsigned *sink, cudaStream_t st);
/* a 1-thread kernel that keeps the stream busy for ns nanoseconds (sluice-bench: replays queued before timing) */
cudaError_t moe_hold(unsigned long long ns, cudaStream_t st);
/* one launch of a kernel that does nothing (1 x 32 threads); pdl: under programmatic dependent launch, releasing
 * its dependents at once and waiting for its predecessor (sluice-bench moe's graph floor) */
cudaError_t moe_empty(int pdl, cudaStream_t st);
/* the SM clock (MHz) over ns nanoseconds of the global timer into *mhz_dev (sluice-bench --sustain) */
cudaError_t moe_sm_mhz(unsigned long long ns, float *mhz_dev, cudaStream_t st);
/* Streaming probe: warps (multiple of 4) each read nchunks chunks of 1152 bytes from base + w * stride, depth
 * chunks in flight, no arithmetic. mode 0: through a cp.async ring of depth (4, 8 or 16), one word per lane read back;
 * 1: the ring (depth 4 or 8), every byte read back; 2: straight into registers (depth 4 or 8), no shared memory. */
cudaError_t moe_stream_read(const void *base, int warps, size_t stride, int nchunks, int depth, int mode,
                            unsigned *sink, cudaStream_t st);
/* reads one 4-byte word every stride bytes of [p, p + n) (the address translations of a region, ~nothing of
 * its bytes: 32 B of L2 per stride); one word per block to sink. */
cudaError_t moe_touch(const void *p, size_t n, size_t stride, unsigned *sink, cudaStream_t st);
/* Fills n bytes with a hash of (seed, offset); kind 0: any byte, 1: E4M3 scale in [lo, hi] codes. */
cudaError_t moe_fill_bytes(uint8_t *p, size_t n, uint32_t seed, int kind, int lo, int hi, cudaStream_t st);
/* Fills n bf16 values with uniform(-a, a). */
cudaError_t moe_fill_bf16(uint16_t *p, size_t n, uint32_t seed, float a, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
