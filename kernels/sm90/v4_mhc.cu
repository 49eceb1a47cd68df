/* v4_mhc.cu — embedding, manifold hyper-connections (V4_SPEC 2.3), RMSNorm + RoPE on rows, the profile's
 * timestamps.
 *
 * The residual stream is hc rows of dim floats per token (fp32). mHC pre is three kernels (the mixes split over chunks
 * of dims; pre, the collapse and the sublayer's norm; post and comb), described above k_hc_mix; the previous
 * sublayer's mHC post is folded into the first, so it has no pass of its own.
 */
#include <math.h>

#include "common/v4_dev.cuh"

#define HC_MAX 8
#define MHC_THREADS 256

__global__ void k_embed(int32_t *tok, const int32_t *fed, const void *E, int e_bf16, int dim, int hc, float *X)
{
    const int i = blockIdx.x;
    const int32_t t0 = tok[i], t = t0 < 0 ? fed[-1 - t0] : t0;
    if (t0 < 0) {   /* the row's id resolved for the kernels after this one (the MoE's hash routing) */
        __syncthreads();
        if (threadIdx.x == 0) tok[i] = t;
    }
    const size_t row = (size_t)t * dim;
    float *Xi = X + (size_t)i * hc * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const float v = e_bf16 ? bf2f(((const uint16_t *)E)[row + d]) : ((const float *)E)[row + d];
        for (int j = 0; j < hc; j++) Xi[(size_t)j * dim + d] = v;
    }
}

extern "C" cudaError_t v4_embed(const v4_step *s, const void *E, int e_bf16, int dim, int hc, const int32_t *fed,
                                float *X, cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    k_embed<<<s->n, 256, 0, st>>>((int32_t *)s->tok_id, fed, E, e_bf16, dim, hc, X);
    return cudaGetLastError();
}

__device__ __forceinline__ float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

/* mHC pre is three kernels:
 *   k_hc_mix      the previous sublayer's mHC post applied in place (with f), then every mix row of fn dotted with the
 *                 streams, in chunks of dims so that fn streams from all SMs even at batch 1: part[r][kb][m];
 *   k_hc_collapse pre from the chunk sums, x = sum_j pre_j X_j and the sublayer's RMSNorm: the sublayer's bf16 input;
 *   k_hc_comb     post and comb (row softmax, then the Sinkhorn): only the next sublayer's mHC post reads them, so the
 *                 backend runs this one on a second stream beside the sublayer, off the step's critical path.
 * Block (chunk kb, row group) of k_hc_mix takes pp = HCM_THREADS / hc pairs of dims of every stream (thread t: stream
 * t / pp, pair kb pp + t % pp) for each of its rows; its slice of fn is loaded into registers once, before the
 * previous kernel has finished, and serves every row of the group. The chunks are fixed and every row's sums are
 * added in the same order whatever the group, so a row's mixes do not depend on the batch. */
#define HCM_THREADS 256
#define HC_MIX_MAX ((2 + HC_MAX) * HC_MAX)
#define HCM_PF 24   /* fn rows held in registers: V4's (2 + 4) * 4; further rows (hc > 4) are read as they are used */

__global__ void __launch_bounds__(HCM_THREADS) k_hc_mix(float *X, const int32_t *rows, int nr, int rpb, int dim,
                                                        int hc, int n_mix, const float *fn, int n_chunks,
                                                        const float *f, const float *post, const float *comb,
                                                        float *part)
{
    moe_pdl_release();
    __shared__ float red[HCM_THREADS / 32][HC_MIX_MAX + 1];
    __shared__ float2 xo[HCM_THREADS];
    const int kb = blockIdx.x;
    const int pp = HCM_THREADS / hc, j = threadIdx.x / pp, d = 2 * (kb * pp + threadIdx.x % pp);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, width = hc * dim;
    const bool in = j < hc && d < dim;   /* dim is even */
    const size_t k0 = (size_t)j * dim + d;
    float2 w[HCM_PF];   /* the weights do not depend on the previous kernel: loaded before the wait */
#pragma unroll
    for (int m = 0; m < HCM_PF; m++)
        w[m] = in && m < n_mix ? __ldg((const float2 *)(fn + (size_t)m * width + k0)) : make_float2(0.0f, 0.0f);
    moe_pdl_wait();
    const int rend = min(nr, (blockIdx.y + 1) * rpb);
    for (int r = blockIdx.y * rpb; r < rend; r++) {
        const int i = rows ? rows[r] : r;
        float *xp = X + (size_t)i * width + k0;
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
        auto dot = [&](int m, float2 wm) {   /* the warp's share of mix m (index n_mix: the sum of squares) */
            const float a = warp_sum(wm.x * x.x + wm.y * x.y);
            if (lane == 0) red[wid][m] = a;
        };
        dot(n_mix, x);
#pragma unroll
        for (int m = 0; m < HCM_PF; m++)
            if (m < n_mix) dot(m, w[m]);
        for (int m = HCM_PF; m < n_mix; m++)
            dot(m, in ? __ldg((const float2 *)(fn + (size_t)m * width + k0)) : make_float2(0.0f, 0.0f));
        __syncthreads();
        for (int m = threadIdx.x; m <= n_mix; m += blockDim.x) {
            float t = 0.0f;
            for (int q = 0; q < HCM_THREADS / 32; q++) t += red[q][m];
            part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m] = t;
        }
        __syncthreads();   /* red and xo are free for the next row */
    }
}

/* Mix m of row r (index n_mix: the sum of squares), on a whole warp: lane l adds chunks l, l + 32, ..., then the
 * warp's fixed tree; k_hc_collapse and k_hc_comb both use it, so they see the same bits. */
__device__ __forceinline__ float mix_total(const float *part, int r, int n_chunks, int n_mix, int m)
{
    float t = 0.0f;
    for (int kb = threadIdx.x & 31; kb < n_chunks; kb += 32) t += part[((size_t)r * n_chunks + kb) * (n_mix + 1) + m];
    return warp_sum(t);
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

/* post and comb, one block a row: the mixes from the chunk sums (a warp a mix) times rsqrt(mean(X^2)+eps); then on
 * warp 0 post, comb's row softmax (+ eps) and the Sinkhorn, one lane per entry, rows and columns summed in index order
 * as the CPU reference does. */
__global__ void __launch_bounds__(MHC_THREADS) k_hc_comb(int n_chunks, int width, int hc, const float *part,
                                                          const float *scale, const float *base, int iters,
                                                          float hc_eps, float norm_eps, float *post, float *comb)
{
    __shared__ float mix[HC_MIX_MAX + 1];
    __shared__ float c[HC_MAX * HC_MAX];
    const int r = blockIdx.x, lane = threadIdx.x & 31, n_mix = (2 + hc) * hc, ne = hc * hc;
    for (int m = hc + (threadIdx.x >> 5); m <= n_mix; m += MHC_THREADS / 32) {
        const float t = mix_total(part, r, n_chunks, n_mix, m);
        if (lane == 0) mix[m] = t;
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const float rs = rsqrtf(mix[n_mix] / (float)width + norm_eps);
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

/* pre, the collapse and the norm, one block per row: the pre mixes and the sum of squares from the chunk sums (a warp
 * a mix), pre on warp 0, x = sum_j pre_j X_j and the sublayer's RMSNorm into bf16.
 * dynamic shared memory: dim floats (the collapsed x) */
__global__ void __launch_bounds__(MHC_THREADS) k_hc_collapse(const float *X, const int32_t *rows, int dim, int hc,
                                                             int n_chunks, int n_mix, const float *part,
                                                             const float *scale, const float *base, float hc_eps,
                                                             float norm_eps, const float *norm_w, uint16_t *xn)
{
    pdl_enter();
    extern __shared__ float xs[];
    __shared__ float red[33];
    __shared__ float mix[HC_MAX + 1];
    __shared__ float pre[HC_MAX];
    const int r = blockIdx.x, i = rows ? rows[r] : r;
    const int width = hc * dim;
    const float *Xi = X + (size_t)i * width;
    for (int q = threadIdx.x >> 5; q <= hc; q += MHC_THREADS / 32) {   /* mixes 0..hc-1, then the sum of squares */
        const float t = mix_total(part, r, n_chunks, n_mix, q < hc ? q : n_mix);
        if ((threadIdx.x & 31) == 0) mix[q] = t;
    }
    __syncthreads();
    if (threadIdx.x < hc) {
        const float rs = rsqrtf(mix[hc] / (float)width + norm_eps);
        pre[threadIdx.x] = sigm(mix[threadIdx.x] * rs * scale[0] + base[threadIdx.x]) + hc_eps;
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

/* Rows a k_hc_mix block takes: one below 32 rows (every SM streams fn at batch 1), more from there, so fn is read
 * from L2 fewer times while the grid still fills the GPU. */
static int hc_rows_per_block(int nr) { return nr < 32 ? 1 : nr < 64 ? 2 : nr < 128 ? 4 : 8; }

extern "C" size_t v4_hc_pre_scratch_floats(int nr, int dim, int hc)
{
    return hc < 1 || hc > HC_MAX ? 0 : (size_t)nr * hc_chunks(dim, hc) * ((2 + hc) * hc + 1);
}

extern "C" cudaError_t v4_hc_mix(float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn, int head,
                                 const float *pend_f, const float *pend_post, const float *pend_comb, float *scratch,
                                 cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX || dim % 2 || (pend_f && (!pend_post || !pend_comb))) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    const int n_chunks = hc_chunks(dim, hc), n_mix = head ? hc : (2 + hc) * hc, rpb = hc_rows_per_block(nr);
    return moe_launch(k_hc_mix, dim3(n_chunks, (nr + rpb - 1) / rpb), dim3(HCM_THREADS), 0, st, X, rows, nr, rpb, dim,
                      hc, n_mix, fn, n_chunks, pend_f, pend_post, pend_comb, scratch);
}

extern "C" cudaError_t v4_hc_collapse(const float *X, int nr, const int32_t *rows, int dim, int hc,
                                      const float *scale, const float *base, float hc_eps, float norm_eps,
                                      const float *norm_w, int head, const float *scratch, uint16_t *xn,
                                      cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX || dim % 2) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    const size_t smem = (size_t)dim * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_hc_collapse, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const int n_mix = head ? hc : (2 + hc) * hc;
    return moe_launch(k_hc_collapse, dim3(nr), dim3(MHC_THREADS), smem, st, X, rows, dim, hc, hc_chunks(dim, hc),
                      n_mix, scratch, scale, base, hc_eps, norm_eps, norm_w, xn);
}

extern "C" cudaError_t v4_hc_comb(int nr, int dim, int hc, const float *scale, const float *base, int sinkhorn_iters,
                                  float hc_eps, float norm_eps, const float *scratch, float *post, float *comb,
                                  cudaStream_t st)
{
    if (hc < 1 || hc > HC_MAX || dim % 2) return cudaErrorInvalidValue;
    if (nr <= 0) return cudaSuccess;
    k_hc_comb<<<nr, MHC_THREADS, 0, st>>>(hc_chunks(dim, hc), hc * dim, hc, scratch, scale, base, sinkhorn_iters, hc_eps,
                                 norm_eps, post, comb);
    return cudaGetLastError();
}

extern "C" cudaError_t v4_hc_pre(float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn,
                                 const float *scale, const float *base, int sinkhorn_iters, float hc_eps,
                                 float norm_eps, const float *norm_w, int head, const float *pend_f,
                                 const float *pend_post, const float *pend_comb, uint16_t *xn, float *post,
                                 float *comb, float *scratch, cudaStream_t st)
{
    cudaError_t e = v4_hc_mix(X, nr, rows, dim, hc, fn, head, pend_f, pend_post, pend_comb, scratch, st);
    if (e == cudaSuccess && !head)
        e = v4_hc_comb(nr, dim, hc, scale, base, sinkhorn_iters, hc_eps, norm_eps, scratch, post, comb, st);
    if (e == cudaSuccess)
        e = v4_hc_collapse(X, nr, rows, dim, hc, scale, base, hc_eps, norm_eps, norm_w, head, scratch, xn, st);
    return e;
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
    const float *x = jb.ld_tok > 0 ? jb.in + (size_t)(r / jb.rows_per_tok) * jb.ld_tok + (size_t)(r % jb.rows_per_tok) * jb.ld_in
                                   : jb.in + (size_t)r * jb.ld_in;
    float rs = 1.0f;
    if (jb.norm) {
        float ss = 0.0f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) ss += x[c] * x[c];
        ss = block_sum(ss, red);
        rs = rsqrtf(ss / (float)d + eps);
    }
    const long pos = jb.rope_half > 0 ? tok_pos[r / jb.rows_per_tok] : 0;
    const int r0 = d - 2 * jb.rope_half;
    uint8_t *o8 = jb.out_kv8 ? jb.out_kv8 + (size_t)r * v4_kv_row_bytes(d, jb.rope_half, 1) : nullptr;
    uint16_t *o = o8 ? nullptr : jb.out + (size_t)r * jb.ld_out;
    /* every thread takes the same number of turns: with out_kv8 a warp's 64 dims are one FP8 block (r0 is a multiple
     * of 64, blockDim.x of 32) whose amax the warp reduces */
    for (int p0 = 0; 2 * p0 < d; p0 += blockDim.x) {
        const int c = 2 * (p0 + threadIdx.x);
        const bool in = c < d;   /* d is even */
        float a = 0.0f, b = 0.0f;
        if (in) {
            a = x[c] * rs;
            b = x[c + 1] * rs;
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
        }
        if (!o8) {
            if (in) {
                o[c] = f2bf(a);
                o[c + 1] = f2bf(b);
            }
        } else if (2 * (p0 + (threadIdx.x & ~31)) < r0) {   /* the warp's block is FP8 */
            fp8_store_block(a, b, o8 + (c & ~63), o8 + r0 + 4 * jb.rope_half + (c >> 6));
        } else if (in) {
            *(uint32_t *)(o8 + r0 + 2 * (c - r0)) = (uint32_t)f2bf(a) | ((uint32_t)f2bf(b) << 16);
        }
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
        if (jb->out_kv8 && !v4_kv8_ok(jb->d, jb->rope_half)) return cudaErrorInvalidValue;
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
