/* v4_mhc.cu — embedding, manifold hyper-connections (V4_SPEC 2.3), RMSNorm + RoPE on rows, the profile's
 * timestamps.
 *
 * The residual stream is hc rows of dim floats per token (fp32). mHC pre is two kernels: the mixes (hc_fn's
 * (2+hc)*hc rows dotted with the streams) split over chunks of dims, one block per (chunk, token), so hc_fn streams
 * from all SMs even at batch 1, each block first applying the previous sublayer's mHC post to its elements (no pass
 * of its own); then one block per token adds the chunks, does the tiny per-token math (sigmoid, softmax, Sinkhorn on
 * hc x hc, one lane per entry), the collapse x = sum_j pre_j X_j and the sublayer's RMSNorm, writing the bf16 input
 * of the projections.
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

/* mHC pre, first half: block (chunk kb, row r) takes pp = HCM_THREADS / hc pairs of dims of every stream (thread t:
 * stream t / pp, pair kb pp + t % pp). With f: the previous sublayer's mHC post first, on those elements (X'[j] =
 * post_j f + sum_q comb[q][j] X[q], the old values through shared memory), written back. Then it dots them with every
 * mix row of fn and sums their squares: part[r][kb][m] (m < n_mix), part[r][kb][n_mix]. Enough blocks to stream hc_fn
 * (1.6 MB on V4-Flash) at the read rate even for one row; the chunks are fixed, so a row's sums do not depend on the
 * batch. */
#define HCM_THREADS 256
#define HC_MIX_MAX ((2 + HC_MAX) * HC_MAX)

__global__ void __launch_bounds__(HCM_THREADS) k_hc_mix(float *X, const int32_t *rows, int dim, int hc, int n_mix,
                                                        const float *fn, int n_chunks, const float *f,
                                                        const float *post, const float *comb, float *part)
{
    pdl_enter();
    __shared__ float red[HCM_THREADS / 32][HC_MIX_MAX + 1];
    __shared__ float2 xo[HCM_THREADS];
    const int r = blockIdx.y, i = rows ? rows[r] : r, kb = blockIdx.x;
    const int pp = HCM_THREADS / hc, j = threadIdx.x / pp, d = 2 * (kb * pp + threadIdx.x % pp);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, width = hc * dim;
    const bool in = j < hc && d < dim;   /* dim is even */
    float *xp = X + (size_t)i * width + (size_t)j * dim + d;
    float2 x = in ? *(const float2 *)xp : make_float2(0.0f, 0.0f);
    if (f) {
        xo[threadIdx.x] = x;
        __syncthreads();
        if (in) {
            const float *po = post + (size_t)i * hc, *C = comb + (size_t)i * hc * hc;
            const float2 fv = *(const float2 *)(f + (size_t)i * dim + d);
            float2 v = make_float2(po[j] * fv.x, po[j] * fv.y);
            for (int q = 0; q < hc; q++) {
                const float2 o = xo[q * pp + threadIdx.x % pp];
                v.x += C[q * hc + j] * o.x;
                v.y += C[q * hc + j] * o.y;
            }
            x = v;
            *(float2 *)xp = v;
        }
    }
    const float ss = warp_sum(x.x * x.x + x.y * x.y);
    if (lane == 0) red[wid][n_mix] = ss;
    const size_t k0 = (size_t)j * dim + d;
#pragma unroll 8
    for (int m = 0; m < n_mix; m++) {
        const float2 w = in ? __ldg((const float2 *)(fn + (size_t)m * width + k0)) : make_float2(0.0f, 0.0f);
        const float a = warp_sum(w.x * x.x + w.y * x.y);
        if (lane == 0) red[wid][m] = a;
    }
    __syncthreads();
    for (int m = threadIdx.x; m <= n_mix; m += blockDim.x) {
        float t = 0.0f;
        for (int w = 0; w < HCM_THREADS / 32; w++) t += red[w][m];
        part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m] = t;
    }
}

/* Sinkhorn on warp 0: lane l holds entries l and l + 32 of the hc x hc matrix (row-major) in v; iters rounds of
 * row then column normalisation, the first without the row one (V4_SPEC 2.3). A row or column sum gathers its
 * entries by shuffles and adds them in index order, then divides, as the CPU reference does: the same values. */
template <int HC> __device__ __forceinline__ void sinkhorn(float v[2], int iters, float eps)
{
    constexpr int NE = HC * HC;
    const int lane = threadIdx.x & 31;
    for (int it = 0; it < iters; it++) {
        for (int pass = it > 0 ? 0 : 1; pass < 2; pass++) {   /* 0: rows, 1: columns */
            float nv[2] = {v[0], v[1]};
#pragma unroll
            for (int t = 0; t < (NE > 32 ? 2 : 1); t++) {
                const int e = (lane + 32 * t) % NE, j = e / HC, k = e % HC;
                float sum = 0.0f;
#pragma unroll
                for (int q = 0; q < HC; q++) {
                    const int idx = pass ? q * HC + k : j * HC + q;
                    const float a0 = __shfl_sync(0xffffffffu, v[0], idx & 31);
                    const float a1 = NE > 32 ? __shfl_sync(0xffffffffu, v[1], idx & 31) : 0.0f;
                    sum += idx < 32 ? a0 : a1;
                }
                nv[t] = v[t] / (sum + eps);
            }
            v[0] = nv[0];
            v[1] = nv[1];
        }
    }
}

/* mHC pre, second half, one block per row: the mixes (the chunks' sums, a warp a mix in a fixed order, times
 * rsqrt(mean(X^2)+eps)); pre / post / comb on warp 0 (comb: row softmax, then Sinkhorn, one lane per entry, rows and columns summed in
 * index order as the CPU reference does); the collapse x = sum_j pre_j X_j and the sublayer's RMSNorm into bf16.
 * dynamic shared memory: dim floats (the collapsed x) */
__global__ void __launch_bounds__(MHC_THREADS) k_hc_finish(const float *X, const int32_t *rows, int dim, int hc,
                                                           int n_chunks, const float *part, const float *scale,
                                                           const float *base, int iters, float hc_eps, float norm_eps,
                                                           const float *norm_w, int head, uint16_t *xn, float *post,
                                                           float *comb)
{
    pdl_enter();
    extern __shared__ float xs[];
    __shared__ float red[33];
    __shared__ float mix[HC_MIX_MAX + 1];
    __shared__ float pre[HC_MAX];
    __shared__ float c[HC_MAX * HC_MAX];
    const int r = blockIdx.x, i = rows ? rows[r] : r;
    const int width = hc * dim, n_mix = head ? hc : (2 + hc) * hc;
    const float *Xi = X + (size_t)i * width;
    {   /* a warp a mix: lane l adds chunks l, l + 32, ..., then the warp's fixed tree */
        const int lane = threadIdx.x & 31;
        for (int m = threadIdx.x >> 5; m <= n_mix; m += MHC_THREADS / 32) {
            float t = 0.0f;
            for (int kb = lane; kb < n_chunks; kb += 32) t += part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m];
            t = warp_sum(t);
            if (lane == 0) mix[m] = t;
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, ne = hc * hc;
        const float rs = rsqrtf(mix[n_mix] / (float)width + norm_eps);
        if (lane < hc) pre[lane] = sigm(mix[lane] * rs * scale[0] + base[lane]) + hc_eps;
        if (!head) {
            if (lane < hc) post[(size_t)r * hc + lane] = 2.0f * sigm(mix[hc + lane] * rs * scale[1] + base[hc + lane]);
            float v[2] = {0.0f, 0.0f};   /* entries lane, lane + 32 */
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
            switch (hc) {   /* the Sinkhorn with hc known: its sums unrolled */
            case 1: sinkhorn<1>(v, iters, hc_eps); break;
            case 2: sinkhorn<2>(v, iters, hc_eps); break;
            case 3: sinkhorn<3>(v, iters, hc_eps); break;
            case 4: sinkhorn<4>(v, iters, hc_eps); break;
            case 5: sinkhorn<5>(v, iters, hc_eps); break;
            case 6: sinkhorn<6>(v, iters, hc_eps); break;
            case 7: sinkhorn<7>(v, iters, hc_eps); break;
            default: sinkhorn<8>(v, iters, hc_eps); break;
            }
            for (int t = 0; t < 2; t++)
                if (lane + 32 * t < ne) comb[(size_t)r * ne + lane + 32 * t] = v[t];
        }
    }
    __syncthreads();
    float ssx = 0.0f;
    const int d4 = dim % 4 ? 0 : dim / 4;   /* float4 groups: every stream's loads of a group in flight at once */
    for (int g = threadIdx.x; g < d4; g += blockDim.x) {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < hc; j++) {
            const float4 x = *(const float4 *)(Xi + (size_t)j * dim + 4 * g);
            v.x += pre[j] * x.x;
            v.y += pre[j] * x.y;
            v.z += pre[j] * x.z;
            v.w += pre[j] * x.w;
        }
        *(float4 *)(xs + 4 * g) = v;
        ssx += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int d = 4 * d4 + threadIdx.x; d < dim; d += blockDim.x) {
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

static int hc_chunks(int dim, int hc) { return (dim + 2 * (HCM_THREADS / hc) - 1) / (2 * (HCM_THREADS / hc)); }

extern "C" size_t v4_hc_pre_scratch_floats(int nr, int dim, int hc)
{
    return hc < 1 || hc > HC_MAX ? 0 : (size_t)nr * hc_chunks(dim, hc) * ((2 + hc) * hc + 1);
}

extern "C" cudaError_t v4_hc_pre(float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn,
                                 const float *scale, const float *base, int sinkhorn_iters, float hc_eps,
                                 float norm_eps, const float *norm_w, int head, const float *pend_f,
                                 const float *pend_post, const float *pend_comb, uint16_t *xn, float *post,
                                 float *comb, float *scratch, cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX || dim % 2 || (pend_f && (!pend_post || !pend_comb))) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    const size_t smem = (size_t)dim * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_hc_finish, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const int n_chunks = hc_chunks(dim, hc), n_mix = head ? hc : (2 + hc) * hc;
    cudaError_t e = moe_launch(k_hc_mix, dim3(n_chunks, nr), dim3(HCM_THREADS), 0, st, X, rows, dim, hc, n_mix, fn,
                              n_chunks, pend_f, pend_post, pend_comb, scratch);
    if (e != cudaSuccess) return e;
    return moe_launch(k_hc_finish, dim3(nr), dim3(MHC_THREADS), smem, st, X, rows, dim, hc, n_chunks, (const float *)scratch,
                     scale, base, sinkhorn_iters, hc_eps, norm_eps, norm_w, head, xn, post, comb);
}

/* one block per row of all the jobs (job j's rows after job j-1's); each thread takes pairs (2p, 2p+1) */
struct NormJobs {
    v4_norm_job j[V4_NORM_JOBS];
    int n, row_end[V4_NORM_JOBS];
};

__global__ void __launch_bounds__(256) k_norm_rope(const int32_t *tok_pos, NormJobs J, float eps)
{
    pdl_enter();
    __shared__ float red[33];
    int k = 0;
    while (blockIdx.x >= (unsigned)J.row_end[k]) k++;
    const v4_norm_job &jb = J.j[k];
    const int r = blockIdx.x - (k ? J.row_end[k - 1] : 0), d = jb.d;
    const float *x = jb.in + (size_t)r * jb.ld_in;
    float rs = 1.0f;
    if (jb.norm) {
        float ss = 0.0f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) ss += x[c] * x[c];
        ss = block_sum(ss, red);
        rs = rsqrtf(ss / (float)d + eps);
    }
    const long pos = jb.rope_half > 0 ? tok_pos[r / jb.rows_per_tok] : 0;
    const int r0 = d - 2 * jb.rope_half;
    uint16_t *o = jb.out + (size_t)r * jb.ld_out;
    for (int p = threadIdx.x; 2 * p < d; p += blockDim.x) {
        const int c = 2 * p;
        float a = x[c] * rs, b = x[c + 1] * rs;   /* d is even */
        if (jb.norm && jb.w) {
            a *= jb.w[c];
            b *= jb.w[c + 1];
        }
        if (jb.rope_half > 0 && c >= r0) {
            float cs, sn;
            v4_rope_cs(pos, jb.inv_freq[(c - r0) >> 1], &cs, &sn);
            const float re = a, im = b;
            a = re * cs - im * sn;
            b = re * sn + im * cs;
        }
        o[c] = f2bf(a);
        o[c + 1] = f2bf(b);
    }
}

extern "C" cudaError_t v4_norm_rope(const v4_step *s, const v4_norm_job *jobs, int n_jobs, float eps, cudaStream_t st)
{
    if (n_jobs < 1 || n_jobs > V4_NORM_JOBS) return cudaErrorInvalidValue;
    NormJobs J;
    int rows = 0;
    J.n = n_jobs;
    for (int k = 0; k < n_jobs; k++) {
        const v4_norm_job *jb = &jobs[k];
        if (jb->d % 2 || (jb->rope_half > 0 && 2 * jb->rope_half > jb->d) || jb->rows < 0) return cudaErrorInvalidValue;
        J.j[k] = *jb;
        if (J.j[k].rows_per_tok < 1) J.j[k].rows_per_tok = 1;
        rows += jb->rows;
        J.row_end[k] = rows;
    }
    if (rows <= 0) return cudaSuccess;
    return moe_launch(k_norm_rope, dim3(rows), dim3(256), 0, st, s->tok_pos, J, eps);
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
