/* v4_moe_ref.cu — a generic V4 MoE (V4_SPEC 2.7) for shapes the MoE fast path (moe_cuda) does not take:
 * the tiny test models (hidden 64, experts 32 wide). One block per token, fp32 weights, warps take
 * rows. It follows the CPU reference's order of operations: router (fp32 logits, score, top-k of
 * score + bias with ties to the lower expert, or the hash table), weights renormalised except for
 * softmax, times route_scale; the shared expert first, then the routed experts in increasing expert
 * order (a doubly listed expert once with the summed weight), each h = silu(min(g, L)) * clamp(u, ±L)
 * times its weight before w2. Not meant for V4-Flash sizes: it reads each expert's weights per token.
 */
#include <math.h>

#include "common/v4_dev.cuh"

#define MOE_REF_THREADS 256
#define MOE_REF_MAXK 16

__device__ __forceinline__ float softplus_f(float v) { return v > 0 ? v + log1pf(expf(-v)) : log1pf(expf(v)); }

/* dynamic shared memory: x [dim], f [dim], h [max inter], logits [E] */
__global__ void __launch_bounds__(MOE_REF_THREADS) k_moe_ref(v4_step s, v4_moe_ref_w w, const uint16_t *x, float *f)
{
    extern __shared__ float sm[];
    __shared__ int idx[MOE_REF_MAXK];
    __shared__ float wt[MOE_REF_MAXK];
    __shared__ int nsel;
    __shared__ int id[MOE_REF_MAXK];
    __shared__ float ww[MOE_REF_MAXK];
    const int i = blockIdx.x, dim = w.dim, E = w.n_experts, K = w.topk;
    const int hmax = w.inter > w.shared_inter ? w.inter : w.shared_inter;
    float *xs = sm, *fs = xs + dim, *hs = fs + dim, *lg = hs + hmax;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        xs[d] = bf2f(x[(size_t)i * dim + d]);
        fs[d] = 0.0f;
    }
    __syncthreads();
    for (int e = wid; e < E; e += nw) {
        float acc = 0.0f;
        for (int k = lane; k < dim; k += 32) acc += w.gate[(size_t)e * dim + k] * xs[k];
        acc = warp_sum(acc);
        if (lane == 0) lg[e] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (w.score_func == 1) {
            float mx = -INFINITY, z = 0.0f;
            for (int e = 0; e < E; e++) mx = fmaxf(mx, lg[e]);
            for (int e = 0; e < E; e++) { lg[e] = expf(lg[e] - mx); z += lg[e]; }
            for (int e = 0; e < E; e++) lg[e] /= z;
        } else if (w.score_func == 2) {
            for (int e = 0; e < E; e++) lg[e] = 1.0f / (1.0f + expf(-lg[e]));
        } else {
            for (int e = 0; e < E; e++) lg[e] = sqrtf(softplus_f(lg[e]));
        }
        float sum = 0.0f;
        for (int k = 0; k < K; k++) {
            if (w.tid2eid) {
                id[k] = w.tid2eid[(size_t)s.tok_id[i] * K + k];
            } else {
                int best = -1;
                float bv = 0.0f;
                for (int e = 0; e < E; e++) {
                    int used = 0;
                    for (int q = 0; q < k; q++) used |= id[q] == e;
                    if (used) continue;
                    const float v = lg[e] + (w.bias ? w.bias[e] : 0.0f);
                    if (best < 0 || v > bv) { best = e; bv = v; }
                }
                id[k] = best;
            }
            ww[k] = lg[id[k]];
            sum += ww[k];
        }
        for (int k = 0; k < K; k++) ww[k] = (w.score_func != 1 ? ww[k] / sum : ww[k]) * w.route_scale;
        /* increasing expert order, duplicates merged */
        int n = 0;
        for (int e = 0; e < E && n < K; e++) {
            float sw = 0.0f;
            int hit = 0;
            for (int k = 0; k < K; k++)
                if (id[k] == e) { sw += ww[k]; hit = 1; }
            if (hit) { idx[n] = e; wt[n] = sw; n++; }
        }
        nsel = n;
    }
    __syncthreads();
    const float lim = w.swiglu_limit;
    for (int x_ = w.s1 ? -1 : 0; x_ < nsel; x_++) {
        const int sh = x_ < 0, inter = sh ? w.shared_inter : w.inter;
        const float *w1 = sh ? w.s1 : w.w1 + (size_t)idx[x_] * inter * dim;
        const float *w3 = sh ? w.s3 : w.w3 + (size_t)idx[x_] * inter * dim;
        const float *w2 = sh ? w.s2 : w.w2 + (size_t)idx[x_] * dim * inter;
        const float sc = sh ? 1.0f : wt[x_];
        for (int r = wid; r < inter; r += nw) {
            float g = 0.0f, u = 0.0f;
            for (int k = lane; k < dim; k += 32) {
                g += w1[(size_t)r * dim + k] * xs[k];
                u += w3[(size_t)r * dim + k] * xs[k];
            }
            g = warp_sum(g);
            u = warp_sum(u);
            if (lane == 0) {
                if (lim > 0) {
                    u = fminf(fmaxf(u, -lim), lim);
                    g = fminf(g, lim);
                }
                hs[r] = g / (1.0f + expf(-g)) * u * sc;
            }
        }
        __syncthreads();
        for (int d = wid; d < dim; d += nw) {
            float y = 0.0f;
            for (int k = lane; k < inter; k += 32) y += w2[(size_t)d * inter + k] * hs[k];
            y = warp_sum(y);
            if (lane == 0) fs[d] += y;
        }
        __syncthreads();
    }
    for (int d = threadIdx.x; d < dim; d += blockDim.x) f[(size_t)i * dim + d] = fs[d];
}

extern "C" cudaError_t v4_moe_ref(const v4_step *s, const v4_moe_ref_w *w, const uint16_t *x, float *f,
                                  cudaStream_t st)
{
    if (w->topk > MOE_REF_MAXK || w->topk < 1) return cudaErrorInvalidValue;
    if (s->n <= 0) return cudaSuccess;
    const int hmax = w->inter > w->shared_inter ? w->inter : w->shared_inter;
    const size_t smem = ((size_t)2 * w->dim + hmax + w->n_experts) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_moe_ref, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    k_moe_ref<<<s->n, MOE_REF_THREADS, smem, st>>>(*s, *w, x, f);
    return cudaGetLastError();
}
