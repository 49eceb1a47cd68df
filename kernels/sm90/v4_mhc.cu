/* v4_mhc.cu — embedding, manifold hyper-connections (V4_SPEC 2.3), RMSNorm + RoPE on rows, bf16 casts, the
 * profile's timestamps.
 *
 * The residual stream is hc rows of dim floats per token (fp32). mHC pre is two kernels: the mixes (hc_fn's
 * (2+hc)*hc rows dotted with the flattened streams) split over 512-input chunks, one block per (chunk, token), so
 * hc_fn streams from all SMs even at batch 1; then one block per token adds the chunks, does the tiny per-token math
 * (sigmoid, softmax, Sinkhorn on hc x hc, one lane per entry), the collapse x = sum_j pre_j X_j and the sublayer's
 * RMSNorm, writing the bf16 input of the projections.
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

/* mHC pre, first half: block (chunk kb, row r) dots HCM_CHUNK inputs of the flattened streams with every mix row of
 * fn and sums their squares: part[r][kb][m] (m < n_mix), part[r][kb][n_mix]. Enough blocks to stream hc_fn (1.6 MB
 * on V4-Flash) at the read rate even for one row; the chunks are fixed, so a row's sums do not depend on the batch. */
#define HCM_CHUNK 512
#define HCM_THREADS (HCM_CHUNK / 2)
#define HC_MIX_MAX ((2 + HC_MAX) * HC_MAX)

__global__ void __launch_bounds__(HCM_THREADS) k_hc_mix(const float *X, const int32_t *rows, int width, int n_mix,
                                                        const float *fn, int n_chunks, float *part)
{
    __shared__ float red[HCM_THREADS / 32][HC_MIX_MAX + 1];
    const int r = blockIdx.y, i = rows ? rows[r] : r, kb = blockIdx.x;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, k0 = kb * HCM_CHUNK + 2 * threadIdx.x;
    const bool in = k0 < width;   /* width is even */
    const float2 x = in ? *(const float2 *)(X + (size_t)i * width + k0) : make_float2(0.0f, 0.0f);
    const float ss = warp_sum(x.x * x.x + x.y * x.y);
    if (lane == 0) red[wid][n_mix] = ss;
#pragma unroll 8
    for (int m = 0; m < n_mix; m++) {
        const float2 f = in ? __ldg((const float2 *)(fn + (size_t)m * width + k0)) : make_float2(0.0f, 0.0f);
        const float a = warp_sum(f.x * x.x + f.y * x.y);
        if (lane == 0) red[wid][m] = a;
    }
    __syncthreads();
    for (int m = threadIdx.x; m <= n_mix; m += blockDim.x) {
        float t = 0.0f;
        for (int w = 0; w < HCM_THREADS / 32; w++) t += red[w][m];
        part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m] = t;
    }
}

/* mHC pre, second half, one block per row: the mixes (the chunks' sums in chunk order, times rsqrt(mean(X^2)+eps));
 * pre / post / comb on warp 0 (comb: row softmax, then Sinkhorn, one lane per entry, rows and columns summed in
 * index order as the CPU reference does); the collapse x = sum_j pre_j X_j and the sublayer's RMSNorm into bf16.
 * dynamic shared memory: dim floats (the collapsed x) */
__global__ void __launch_bounds__(MHC_THREADS) k_hc_finish(const float *X, const int32_t *rows, int dim, int hc,
                                                           int n_chunks, const float *part, const float *scale,
                                                           const float *base, int iters, float hc_eps, float norm_eps,
                                                           const float *norm_w, int head, uint16_t *xn, float *post,
                                                           float *comb)
{
    extern __shared__ float xs[];
    __shared__ float red[33];
    __shared__ float mix[HC_MIX_MAX + 1];
    __shared__ float pre[HC_MAX];
    __shared__ float c[HC_MAX * HC_MAX];
    const int r = blockIdx.x, i = rows ? rows[r] : r;
    const int width = hc * dim, n_mix = head ? hc : (2 + hc) * hc;
    const float *Xi = X + (size_t)i * width;
    for (int m = threadIdx.x; m <= n_mix; m += blockDim.x) {
        float t = 0.0f;
        for (int kb = 0; kb < n_chunks; kb++) t += part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m];
        mix[m] = t;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, ne = hc * hc;
        const float rs = rsqrtf(mix[n_mix] / (float)width + norm_eps);
        if (lane < hc) pre[lane] = sigm(mix[lane] * rs * scale[0] + base[lane]) + hc_eps;
        if (!head) {
            if (lane < hc) post[(size_t)r * hc + lane] = 2.0f * sigm(mix[hc + lane] * rs * scale[1] + base[hc + lane]);
            float v[2];
            for (int t = 0; t < 2; t++) {
                const int e = lane + 32 * t;
                if (e < ne) c[e] = mix[2 * hc + e] * rs * scale[2] + base[2 * hc + e];
            }
            __syncwarp();
            for (int t = 0; t < 2; t++) {   /* row softmax + eps */
                const int e = lane + 32 * t, j = e / hc;
                if (e >= ne) continue;
                float mx = -INFINITY, z = 0.0f;
                for (int k = 0; k < hc; k++) mx = fmaxf(mx, c[j * hc + k]);
                for (int k = 0; k < hc; k++) z += expf(c[j * hc + k] - mx);
                v[t] = expf(c[e] - mx) / z + hc_eps;
            }
            __syncwarp();
            for (int t = 0; t < 2; t++)
                if (lane + 32 * t < ne) c[lane + 32 * t] = v[t];
            __syncwarp();
            for (int it = 0; it < iters; it++) {
                for (int pass = it > 0 ? 0 : 1; pass < 2; pass++) {   /* 0: rows, 1: columns */
                    for (int t = 0; t < 2; t++) {
                        const int e = lane + 32 * t, j = e / hc, k = e % hc;
                        if (e >= ne) continue;
                        float sum = 0.0f;
                        for (int q = 0; q < hc; q++) sum += pass ? c[q * hc + k] : c[j * hc + q];
                        v[t] = c[e] / (sum + hc_eps);
                    }
                    __syncwarp();
                    for (int t = 0; t < 2; t++)
                        if (lane + 32 * t < ne) c[lane + 32 * t] = v[t];
                    __syncwarp();
                }
            }
            for (int t = 0; t < 2; t++)
                if (lane + 32 * t < ne) comb[(size_t)r * ne + lane + 32 * t] = c[lane + 32 * t];
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

extern "C" size_t v4_hc_pre_scratch_floats(int nr, int dim, int hc)
{
    const int n_chunks = (hc * dim + HCM_CHUNK - 1) / HCM_CHUNK;
    return (size_t)nr * n_chunks * ((2 + hc) * hc + 1);
}

extern "C" cudaError_t v4_hc_pre(const float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn,
                                 const float *scale, const float *base, int sinkhorn_iters, float hc_eps,
                                 float norm_eps, const float *norm_w, int head, uint16_t *xn, float *post,
                                 float *comb, float *scratch, cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX || dim % 2) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    const size_t smem = (size_t)dim * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_hc_finish, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const int width = hc * dim, n_chunks = (width + HCM_CHUNK - 1) / HCM_CHUNK, n_mix = head ? hc : (2 + hc) * hc;
    k_hc_mix<<<dim3(n_chunks, nr), HCM_THREADS, 0, st>>>(X, rows, width, n_mix, fn, n_chunks, scratch);
    k_hc_finish<<<nr, MHC_THREADS, smem, st>>>(X, rows, dim, hc, n_chunks, scratch, scale, base, sinkhorn_iters, hc_eps,
                                               norm_eps, norm_w, head, xn, post, comb);
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

__global__ void k_stamp(unsigned long long *dst)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *dst = t;
}

extern "C" cudaError_t v4_stamp(uint64_t *dst, cudaStream_t st)
{
    k_stamp<<<1, 1, 0, st>>>((unsigned long long *)dst);
    return cudaGetLastError();
}
