/* v4_attention.cu — V4 sparse attention (V4_SPEC 2.4 steps 5-6), the lightning indexer and its top-k
 * (2.6), and the sliding-window ring store.
 *
 * Key set of a query at position t: the window (the last min(t+1, W) positions, this step's rows
 * read straight from the step's kv, earlier ones from the ring) and the compressed entries: the
 * indexer's top-k for CSA, every closed entry for HCA. K = V (one shared head); every query head
 * attends over the same keys, with its sink logit in the softmax denominator.
 *
 * Top-k: an exact radix select on the scores' order-preserving 32-bit keys (four 8-bit passes find
 * the k-th largest key T), then every key > T and the lowest-index entries equal to T, so ties go to
 * the lower entry index as in the CPU reference. Zero scores are canonicalised to +0 first (a ReLU'd
 * head times a negative weight gives -0, which the reference compares equal to +0).
 */
#include <math.h>

#include "common/v4_dev.cuh"

#define IDX_THREADS 128
#define IDX_EPB 64            /* entries per indexer block */
#define TOPK_THREADS 1024
#define ATT_THREADS 128

__device__ __forceinline__ int idx_count(const v4_step &s, int i) { return (s.tok_pos[i] + 1) / 4; }

/* dynamic shared memory: q fp32 [nI][dI+1], w [nI], one key row per warp [dI] */
__global__ void __launch_bounds__(IDX_THREADS) k_index_scores(v4_step s, v4_arena ar, size_t page_off, int r0,
                                                              const uint16_t *q, int nI, int dI, const float *wI,
                                                              float w_scale, int topk, float *scores, int ld)
{
    extern __shared__ float sm[];
    const int i = r0 + blockIdx.x, N = idx_count(s, i);
    const int e0 = blockIdx.y * IDX_EPB;
    if (N <= topk || e0 >= N) return;
    const int qs = dI + 1;
    float *qf = sm, *wf = sm + (size_t)nI * qs, *kb = wf + nI;
    for (int k = threadIdx.x; k < nI * dI; k += blockDim.x)
        qf[(k / dI) * qs + k % dI] = bf2f(q[(size_t)i * nI * dI + k]);
    for (int h = threadIdx.x; h < nI; h += blockDim.x) wf[h] = wI[(size_t)i * nI + h] * w_scale;
    __syncthreads();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float *kw = kb + (size_t)wid * dI;
    const int sp = s.tok_span[i];
    const int e1 = min(N, e0 + IDX_EPB);
    for (int e = e0 + wid; e < e1; e += IDX_THREADS / 32) {
        const uint16_t *K = v4_entry_ptr(s, ar, page_off, sp, e, 4, dI);
        for (int k = lane; k < dI; k += 32) kw[k] = bf2f(K[k]);
        __syncwarp();
        float acc = 0.0f;
        for (int h = lane; h < nI; h += 32) {
            const float *qh = qf + (size_t)h * qs;
            float dot = 0.0f;
            for (int k = 0; k < dI; k++) dot += qh[k] * kw[k];
            acc += wf[h] * fmaxf(dot, 0.0f);
        }
        acc = warp_sum(acc);
        if (lane == 0) scores[(size_t)blockIdx.x * ld + e] = acc;
        __syncwarp();
    }
}

__device__ __forceinline__ unsigned score_key(float v)
{
    if (v != v) return 0u;               /* NaN: worst */
    if (v == 0.0f) v = 0.0f;             /* -0 -> +0 */
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(TOPK_THREADS) k_topk(v4_step s, int r0, int topk, const float *scores, int ld,
                                                       int32_t *sel)
{
    __shared__ unsigned hist[256];
    __shared__ unsigned prefix, mask;
    __shared__ int rem, n_gt, eq_base;
    __shared__ int wtot[TOPK_THREADS / 32];
    const int i = r0 + blockIdx.x, N = idx_count(s, i);
    int32_t *out = sel + (size_t)i * topk;
    if (N <= topk) {
        for (int j = threadIdx.x; j < topk; j += blockDim.x) out[j] = j < N ? j : -1;
        return;
    }
    const float *sc = scores + (size_t)blockIdx.x * ld;
    if (threadIdx.x == 0) { prefix = 0; mask = 0; rem = topk; n_gt = 0; eq_base = 0; }
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const unsigned pf = prefix, mk = mask;
        for (int e = threadIdx.x; e < N; e += blockDim.x) {
            const unsigned key = score_key(sc[e]);
            if ((key & mk) == pf) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cum = 0;
            for (int b = 255; b >= 0; b--) {
                if (cum + (int)hist[b] >= rem) {
                    rem -= cum;
                    prefix |= (unsigned)b << shift;
                    mask |= 255u << shift;
                    break;
                }
                cum += (int)hist[b];
            }
        }
        __syncthreads();
    }
    const unsigned T = prefix;
    const int need_eq = rem, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    /* keys above T: all of them, any order */
    for (int e = threadIdx.x; e < N; e += blockDim.x)
        if (score_key(sc[e]) > T) out[atomicAdd(&n_gt, 1)] = e;
    __syncthreads();
    const int gt = n_gt;
    /* keys equal to T: the lowest indices first */
    for (int c0 = 0; c0 < N; c0 += blockDim.x) {
        const int e = c0 + threadIdx.x;
        const int eq = e < N && score_key(sc[e]) == T;
        const unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) wtot[wid] = __popc(bal);
        __syncthreads();
        int before = eq_base;
        for (int w = 0; w < wid; w++) before += wtot[w];
        const int rank = before + __popc(bal & ((1u << lane) - 1u));
        if (eq && rank < need_eq) out[gt + rank] = e;
        __syncthreads();
        if (threadIdx.x == 0) {
            int tot = 0;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += wtot[w];
            eq_base += tot;
        }
        __syncthreads();
        if (eq_base >= need_eq) break;
    }
}

extern "C" cudaError_t v4_indexer(const v4_step *s, const v4_arena *a, size_t page_off, int r0, int nr,
                                  const uint16_t *q, int nI, int dI, const float *wI, float w_scale, int topk,
                                  int32_t *sel, float *scores, int max_entries, cudaStream_t st)
{
    if (nr <= 0) return cudaSuccess;
    if (topk <= 0) return cudaErrorInvalidValue;
    if (max_entries > topk) {
        const size_t smem = ((size_t)nI * (dI + 1) + nI + (size_t)(IDX_THREADS / 32) * dI) * sizeof(float);
        if (smem > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(k_index_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (e != cudaSuccess) return e;
        }
        dim3 grid(nr, (max_entries + IDX_EPB - 1) / IDX_EPB);
        k_index_scores<<<grid, IDX_THREADS, smem, st>>>(*s, *a, page_off, r0, q, nI, dI, wI, w_scale, topk, scores,
                                                        max_entries);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    k_topk<<<nr, TOPK_THREADS, 0, st>>>(*s, r0, topk, scores, max_entries, sel);
    return cudaGetLastError();
}

/* dynamic shared memory: q fp32 [hd], scores [max_keys], key row pointers [max_keys] */
__global__ void __launch_bounds__(ATT_THREADS) k_attention(v4_step s, v4_arena ar, size_t ring_off, int W,
                                                           size_t page_off, int ratio, const int32_t *sel, int topk,
                                                           const uint16_t *q, const uint16_t *kv, int H, int hd,
                                                           float scale, const float *sink, int max_keys, float *o)
{
    extern __shared__ float sm[];
    __shared__ float red[33];
    const int i = blockIdx.x, h = blockIdx.y;
    float *qf = sm, *sc = sm + hd;
    const uint16_t **kp = (const uint16_t **)(sc + ((max_keys + 1) & ~1));
    const int t = s.tok_pos[i], sp = s.tok_span[i], pos0 = s.span_pos0[sp], row0 = s.span_row0[sp];
    const int n_win = min(t + 1, W), pw0 = t - n_win + 1;
    int n_cmp = 0;
    if (ratio == 4) n_cmp = min(topk, (t + 1) / 4);
    else if (ratio > 0) n_cmp = (t + 1) / ratio;
    const int nk = min(n_win + n_cmp, max_keys);
    const uint16_t *ring = (const uint16_t *)(ar.slots + (size_t)s.span_slot[sp] * ar.slot_bytes + ring_off);
    for (int k = threadIdx.x; k < hd; k += blockDim.x) qf[k] = bf2f(q[((size_t)i * H + h) * hd + k]);
    for (int kk = threadIdx.x; kk < nk; kk += blockDim.x) {
        const uint16_t *p;
        if (kk < n_win) {
            const int pos = pw0 + kk;
            p = pos >= pos0 ? kv + (size_t)(row0 + pos - pos0) * hd : ring + (size_t)(pos % W) * hd;
        } else {
            const int e = ratio == 4 ? sel[(size_t)i * topk + kk - n_win] : kk - n_win;
            p = e >= 0 ? v4_entry_ptr(s, ar, page_off, sp, e, ratio, hd) : nullptr;
        }
        kp[kk] = p;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int kk = wid; kk < nk; kk += nw) {
        const uint16_t *k = kp[kk];
        float dot = 0.0f;
        if (k)
            for (int d = lane; d < hd; d += 32) dot += qf[d] * bf2f(k[d]);
        dot = warp_sum(dot);
        if (lane == 0) sc[kk] = k ? dot * scale : -INFINITY;
    }
    __syncthreads();
    float mx = sink[h];
    for (int kk = threadIdx.x; kk < nk; kk += blockDim.x) mx = fmaxf(mx, sc[kk]);
    mx = block_max(mx, red);
    float z = 0.0f;
    for (int kk = threadIdx.x; kk < nk; kk += blockDim.x) {
        const float e = kp[kk] ? expf(sc[kk] - mx) : 0.0f;
        sc[kk] = e;
        z += e;
    }
    z = block_sum(z, red) + expf(sink[h] - mx);
    const float inv = 1.0f / z;
    float *oh = o + ((size_t)i * H + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int kk = 0; kk < nk; kk++)
            if (kp[kk]) acc += sc[kk] * bf2f(kp[kk][d]);
        oh[d] = acc * inv;
    }
}

extern "C" cudaError_t v4_attention(const v4_step *s, const v4_arena *a, size_t ring_off, int W, size_t page_off,
                                    int ratio, const int32_t *sel, int topk, const uint16_t *q, const uint16_t *kv,
                                    int H, int hd, float scale, const float *sink, int max_keys, float *o,
                                    cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    const size_t smem = (size_t)hd * sizeof(float) + (size_t)((max_keys + 1) & ~1) * sizeof(float) +
                        (size_t)max_keys * sizeof(void *);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    k_attention<<<dim3(s->n, H), ATT_THREADS, smem, st>>>(*s, *a, ring_off, W, page_off, ratio, sel, topk, q, kv, H,
                                                          hd, scale, sink, max_keys, o);
    return cudaGetLastError();
}

__global__ void k_ring_store(v4_step s, v4_arena ar, size_t ring_off, int W, const uint16_t *kv, int hd)
{
    const int i = blockIdx.x, sp = s.tok_span[i], t = s.tok_pos[i];
    if (t < s.span_pos0[sp] + s.span_n[sp] - W) return;
    uint16_t *ring = (uint16_t *)(ar.slots + (size_t)s.span_slot[sp] * ar.slot_bytes + ring_off) + (size_t)(t % W) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) ring[d] = kv[(size_t)i * hd + d];
}

extern "C" cudaError_t v4_ring_store(const v4_step *s, const v4_arena *a, size_t ring_off, int W, const uint16_t *kv,
                                     int hd, cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    k_ring_store<<<s->n, 128, 0, st>>>(*s, *a, ring_off, W, kv, hd);
    return cudaGetLastError();
}
