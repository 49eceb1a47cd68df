/* v4_mhc.cu — embedding, manifold hyper-connections (V4_SPEC 2.3), RMSNorm + RoPE on rows, bf16 casts.
 *
 * The residual stream is hc rows of dim floats per token (fp32). mHC pre is one block per token: the
 * mixes are hc_fn's (2+hc)*hc rows dotted with the flattened streams (one warp per mix, the block's
 * warps take turns), the tiny per-token math (sigmoid, softmax, Sinkhorn on hc x hc) runs in one
 * thread, then the collapse x = sum_j pre_j X_j and the sublayer's RMSNorm write the bf16 input of the
 * projections. Memory-wise a token reads its streams ~(2+hc)*hc/warps + 2 times from L1/L2 and hc_fn
 * once per block (1.6 MB fp32 on V4-Flash, from L2 after the first block).
 */
#include <math.h>

#include "common/v4_dev.cuh"

#define HC_MAX 8
#define MHC_THREADS 256

__global__ void k_embed(const int32_t *tok, const void *E, int e_bf16, int dim, int hc, float *X)
{
    const int i = blockIdx.x;
    const size_t row = (size_t)tok[i] * dim;
    float *Xi = X + (size_t)i * hc * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const float v = e_bf16 ? bf2f(((const uint16_t *)E)[row + d]) : ((const float *)E)[row + d];
        for (int j = 0; j < hc; j++) Xi[(size_t)j * dim + d] = v;
    }
}

extern "C" cudaError_t v4_embed(const v4_step *s, const void *E, int e_bf16, int dim, int hc, float *X,
                                cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    k_embed<<<s->n, 256, 0, st>>>(s->tok_id, E, e_bf16, dim, hc, X);
    return cudaGetLastError();
}

__device__ __forceinline__ float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

/* dynamic shared memory: dim floats (the collapsed x) */
__global__ void __launch_bounds__(MHC_THREADS) k_hc_pre(const float *X, const int32_t *rows, int dim, int hc,
                                                        const float *fn, const float *scale, const float *base,
                                                        int iters, float hc_eps, float norm_eps, const float *norm_w,
                                                        int head, uint16_t *xn, float *post, float *comb)
{
    extern __shared__ float xs[];
    __shared__ float red[33];
    __shared__ float mix[(2 + HC_MAX) * HC_MAX];
    __shared__ float pre[HC_MAX];
    __shared__ float c[HC_MAX * HC_MAX];
    const int r = blockIdx.x, i = rows ? rows[r] : r;
    const int width = hc * dim, n_mix = head ? hc : (2 + hc) * hc;
    const float *Xi = X + (size_t)i * width;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

    float ss = 0.0f;
    for (int k = threadIdx.x; k < width; k += blockDim.x) ss += Xi[k] * Xi[k];
    ss = block_sum(ss, red);
    const float rs = rsqrtf(ss / (float)width + norm_eps);
    for (int m = wid; m < n_mix; m += nw) {
        const float *f = fn + (size_t)m * width;
        float acc = 0.0f;
        for (int k = lane; k < width; k += 32) acc += f[k] * Xi[k];
        acc = warp_sum(acc);
        if (lane == 0) mix[m] = acc * rs;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int j = 0; j < hc; j++) pre[j] = sigm(mix[j] * scale[0] + base[j]) + hc_eps;
        if (!head) {
            float *po = post + (size_t)r * hc, *C = comb + (size_t)r * hc * hc;
            for (int j = 0; j < hc; j++) po[j] = 2.0f * sigm(mix[hc + j] * scale[1] + base[hc + j]);
            for (int j = 0; j < hc; j++) {
                float mx = -INFINITY, z = 0.0f;
                for (int k = 0; k < hc; k++) {
                    c[j * hc + k] = mix[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
                    mx = fmaxf(mx, c[j * hc + k]);
                }
                for (int k = 0; k < hc; k++) { c[j * hc + k] = expf(c[j * hc + k] - mx); z += c[j * hc + k]; }
                for (int k = 0; k < hc; k++) c[j * hc + k] = c[j * hc + k] / z + hc_eps;
            }
            for (int it = 0; it < iters; it++) {
                if (it > 0)
                    for (int j = 0; j < hc; j++) {
                        float sum = 0.0f;
                        for (int k = 0; k < hc; k++) sum += c[j * hc + k];
                        for (int k = 0; k < hc; k++) c[j * hc + k] /= sum + hc_eps;
                    }
                for (int k = 0; k < hc; k++) {
                    float sum = 0.0f;
                    for (int j = 0; j < hc; j++) sum += c[j * hc + k];
                    for (int j = 0; j < hc; j++) c[j * hc + k] /= sum + hc_eps;
                }
            }
            for (int k = 0; k < hc * hc; k++) C[k] = c[k];
        }
    }
    __syncthreads();
    float ssx = 0.0f;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float v = 0.0f;
        for (int j = 0; j < hc; j++) v += pre[j] * Xi[(size_t)j * dim + d];
        xs[d] = v;
        ssx += v * v;
    }
    ssx = block_sum(ssx, red);
    const float rx = rsqrtf(ssx / (float)dim + norm_eps);
    uint16_t *o = xn + (size_t)r * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) o[d] = f2bf(xs[d] * rx * norm_w[d]);
}

extern "C" cudaError_t v4_hc_pre(const float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn,
                                 const float *scale, const float *base, int sinkhorn_iters, float hc_eps,
                                 float norm_eps, const float *norm_w, int head, uint16_t *xn, float *post,
                                 float *comb, cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    const size_t smem = (size_t)dim * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_hc_pre, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    k_hc_pre<<<nr, MHC_THREADS, smem, st>>>(X, rows, dim, hc, fn, scale, base, sinkhorn_iters, hc_eps, norm_eps,
                                            norm_w, head, xn, post, comb);
    return cudaGetLastError();
}

__global__ void k_hc_post(float *X, const float *f, const float *post, const float *comb, int dim, int hc)
{
    const int i = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dim) return;
    float *Xi = X + (size_t)i * hc * dim;
    const float *po = post + (size_t)i * hc, *C = comb + (size_t)i * hc * hc;
    float old[HC_MAX];   /* unrolled with constant indices: stays in registers */
#pragma unroll
    for (int j = 0; j < HC_MAX; j++) old[j] = j < hc ? Xi[(size_t)j * dim + d] : 0.0f;
    const float fv = f[(size_t)i * dim + d];
#pragma unroll
    for (int k = 0; k < HC_MAX; k++) {
        if (k >= hc) break;
        float v = po[k] * fv;
#pragma unroll
        for (int j = 0; j < HC_MAX; j++)
            if (j < hc) v += C[j * hc + k] * old[j];
        Xi[(size_t)k * dim + d] = v;
    }
}

extern "C" cudaError_t v4_hc_post(float *X, const float *f, const float *post, const float *comb, int n, int dim,
                                  int hc, cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    k_hc_post<<<dim3((dim + 255) / 256, n), 256, 0, st>>>(X, f, post, comb, dim, hc);
    return cudaGetLastError();
}

/* one block per row; each thread takes pairs (2p, 2p+1) */
__global__ void k_norm_rope(const int32_t *tok_pos, const float *in, int ld_in, int rows_per_tok, int d, int norm,
                            const float *w, float eps, int rope_half, const double *inv_freq, int inverse,
                            uint16_t *out, int ld_out)
{
    __shared__ float red[33];
    const int r = blockIdx.x;
    const float *x = in + (size_t)r * ld_in;
    float rs = 1.0f;
    if (norm) {
        float ss = 0.0f;
        for (int k = threadIdx.x; k < d; k += blockDim.x) ss += x[k] * x[k];
        ss = block_sum(ss, red);
        rs = rsqrtf(ss / (float)d + eps);
    }
    const long pos = rope_half > 0 ? tok_pos[r / rows_per_tok] : 0;
    const int r0 = d - 2 * rope_half;
    uint16_t *o = out + (size_t)r * ld_out;
    for (int p = threadIdx.x; 2 * p < d; p += blockDim.x) {
        const int k = 2 * p;
        float a = x[k] * rs, b = k + 1 < d ? x[k + 1] * rs : 0.0f;
        if (norm && w) {
            a *= w[k];
            if (k + 1 < d) b *= w[k + 1];
        }
        if (rope_half > 0 && k >= r0 && k + 1 < d) {
            float c, sn;
            v4_rope_cs(pos, inv_freq[(k - r0) >> 1], &c, &sn);
            if (inverse) sn = -sn;
            const float re = a, im = b;
            a = re * c - im * sn;
            b = re * sn + im * c;
        }
        o[k] = f2bf(a);
        if (k + 1 < d) o[k + 1] = f2bf(b);
    }
}

extern "C" cudaError_t v4_norm_rope(const v4_step *s, const float *in, int ld_in, int rows, int rows_per_tok, int d,
                                    int norm, const float *w, float eps, int rope_half, const double *inv_freq,
                                    int inverse, uint16_t *out, int ld_out, cudaStream_t st)
{
    if (rows <= 0) return cudaSuccess;
    if (rope_half > 0 && (d % 2 || 2 * rope_half > d)) return cudaErrorInvalidValue;
    const int threads = d >= 512 ? 256 : 128;
    k_norm_rope<<<rows, threads, 0, st>>>(s->tok_pos, in, ld_in, rows_per_tok > 0 ? rows_per_tok : 1, d, norm, w,
                                          eps, rope_half, inv_freq, inverse, out, ld_out);
    return cudaGetLastError();
}

__global__ void k_to_bf16(const float *in, size_t count, float scale, uint16_t *out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(in[i] * scale);
}

extern "C" cudaError_t v4_to_bf16(const float *in, size_t count, float scale, uint16_t *out, cudaStream_t st)
{
    if (!count) return cudaSuccess;
    size_t blocks = (count + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    k_to_bf16<<<(unsigned)blocks, 256, 0, st>>>(in, count, scale, out);
    return cudaGetLastError();
}
