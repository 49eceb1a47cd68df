/* dense_gemm.h — dense projections y = x · Wᵀ on the GPU with a checkpoint's weights (bf16, or FP8 E4M3 with fp32
 * 128x128 block scales), for decode (skinny: a few tokens) and for prefill chunks and large batches.
 *
 * Numerics (every path, every m): an output element y[i][j] is
 *     acc = 0; for each 128-input block b of its K slice, in order:  acc = fmaf(p_b, s_b, acc)
 * where p_b is the block's dot product from eight chained mma.sync m16n8k16 (bf16 x bf16, fp32 accumulation,
 * starting at 0) and s_b the block's scale (1 for bf16 weights); then the K slices' partials are added in slice order
 * ((p0 + p1) + p2) + .... The number of K slices depends on (nn, k) only (dense_gemm_splits), never on m, x's other rows
 * or the kernel variant chosen for m: a row's result is bitwise the same alone and inside any batch, and run to run.
 * A call with another nn (another sub-range of the same weight) may round differently.
 * See kernels/sm90/dense_gemm.cu for the layout and the paths.
 */
#ifndef SLUICE_DENSE_GEMM_H
#define SLUICE_DENSE_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DENSE_BF16 = 0, DENSE_FP8_B128 = 1 };

typedef struct {
    int fmt;              /* DENSE_BF16 or DENSE_FP8_B128 */
    int n, k;             /* out features (rows), in features (cols) */
    void *w;              /* device, owned: the weights repacked into mma fragment order (16-row x 128-input chunks,
                             zero-padded to whole chunks) */
    float *scale;         /* device, owned: FP8 block scales fp32 [ceil(n/128)][ceil(k/128)]; NULL for bf16 */
    size_t bytes;         /* device bytes held */
} dense_weight;

/* Build a device weight from row-major device data: bf16 [n][k], or e4m3 [n][k] with fp32 block scales
 * [ceil(n/128)][ceil(k/128)] (one per 128x128 block, partial last blocks allowed). Allocates (cudaMalloc) and
 * repacks; the sources may be freed afterwards. Load time: synchronises st. Returns cudaSuccess or the error. */
cudaError_t dense_weight_init(dense_weight *dw, int fmt, int n, int k, const void *w_dev, const float *scale_dev,
                              cudaStream_t st);
void dense_weight_free(dense_weight *dw);

/* y[i][j - n0] (row stride ldy floats) = sum_c x[i][c] * W[j][c] for i in [0,m), j in [n0, n0+nn), c in [0,k):
 * x bf16 row-major with row stride ldx elements (ldx >= k; 16-byte loads where x is 16-byte aligned and
 * ldx % 8 == 0), y fp32 (ldy >= nn). Any shapes; m == 0 or nn == 0 enqueue nothing. Only enqueues on st (launched
 * with programmatic dependent launch: x is read after the previous kernel completes): no allocation, no host sync,
 * graph-capturable. Returns the launch's cudaError_t (cudaErrorInvalidValue for bad arguments). */
cudaError_t dense_gemm(const dense_weight *W, int n0, int nn, const uint16_t *x, int ldx, int m,
                       float *y, int ldy, cudaStream_t st);

/* Grouped: y[t][r] = sum_c W[r][c] x[t][g gx + c] for every row r of W, g = r / (W->n / groups): each group of
 * rows reads its own slice of the inputs (V4's grouped output projection wo_a); y fp32, or bf16 (round to nearest)
 * with y_bf16. One launch where W->n / groups is a multiple of 32, else one a group. Batch-invariant like
 * dense_gemm. */
cudaError_t dense_gemm_grouped(const dense_weight *W, int groups, const uint16_t *x, int ldx, int gx, int m, void *y,
                               int y_bf16, int ldy, cudaStream_t st);

/* The number of K slices whose partials are added in a fixed order for a call of nn rows of a k-input weight
 * (1, 2, 4, 8 or 16): a function of (nn, k) only. */
int dense_gemm_splits(int nn, int k);

#ifdef __cplusplus
}
#endif

#endif
