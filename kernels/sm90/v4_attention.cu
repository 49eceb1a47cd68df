/* v4_attention.cu — V4 sparse attention (V4_SPEC 2.4 steps 5-6), the lightning indexer and its top-k
 * (2.6), and the sliding-window ring store.
 *
 * Key set of a query at position t: the window (the last min(t+1, W) positions, this step's rows
 * read straight from the step's kv, earlier ones from the ring) and the compressed entries: the
 * indexer's top-k for CSA, every closed entry for HCA. K = V (one shared head); every query head
 * attends over the same keys, with its sink logit in the softmax denominator.
 *
 * Top-k: an exact radix select on the scores' order-preserving 32-bit keys (four 8-bit passes find
 * the k-th largest key T; the keys are staged in shared memory when the row fits, and each thread adds
 * its runs of one bin to the histogram with one atomic), then every key > T and the lowest-index entries
 * equal to T, so ties go to the lower entry index as in the CPU reference. Zero scores are canonicalised to +0 first (a ReLU'd
 * head times a negative weight gives -0, which the reference compares equal to +0).
 */
#include <math.h>

#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "common/dev_flag.cuh"
#include "common/v4_dev.cuh"

#define IDX_THREADS 128
#define IDX_EPB 64            /* entries per indexer block */
#define TOPK_THREADS 1024
#define TOPK_STAGE_MAX 49152  /* rows of up to this many entries (192K context) keep their keys in shared memory,
                                 * where the device has room for them */
#define ATT_THREADS 128

__device__ __forceinline__ int idx_count(const v4_step &s, int i) { return (s.tok_pos[i] + 1) / 4; }

/* dynamic shared memory: q fp32 [nI][dI+1], w [nI], one key row per warp [dI] */
__global__ void __launch_bounds__(IDX_THREADS) k_index_scores(v4_step s, v4_arena ar, size_t page_off, int key_fp8,
                                                              int r0, const uint16_t *q, int nI, int dI,
                                                              const float *wI, int ld_w, float w_scale, int topk,
                                                              float *scores, int ld)
{
    pdl_enter();
    extern __shared__ float sm[];
    const int i = r0 + blockIdx.x, N = idx_count(s, i);
    const int e0 = blockIdx.y * IDX_EPB;
    if (N <= topk || e0 >= N) return;
    const int qs = dI + 1;
    float *qf = sm, *wf = sm + (size_t)nI * qs, *kb = wf + nI;
    for (int k = threadIdx.x; k < nI * dI; k += blockDim.x)
        qf[(k / dI) * qs + k % dI] = bf2f(q[(size_t)i * nI * dI + k]);
    for (int h = threadIdx.x; h < nI; h += blockDim.x) wf[h] = wI[(size_t)i * ld_w + h] * w_scale;
    __syncthreads();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float *kw = kb + (size_t)wid * dI;
    const int sp = s.tok_span[i];
    const int e1 = min(N, e0 + IDX_EPB);
    for (int e = e0 + wid; e < e1; e += IDX_THREADS / 32) {
        if (key_fp8) {
            uint8_t *sc;
            const uint8_t *K = v4_fp8_entry(s, ar, page_off, sp, e, 4, dI, &sc);
            for (int k = lane; k < dI; k += 32) {
                const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)K[k], __NV_E4M3);
                kw[k] = __half2float(*(const __half *)&h) * fp8_scale(sc[k / 64]);
            }
        } else {
            const uint16_t *K = v4_entry_ptr(s, ar, page_off, sp, e, 4, dI);
            for (int k = lane; k < dI; k += 32) kw[k] = bf2f(K[k]);
        }
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

/* ---- 64 heads x 128 on the tensor cores (the V4 indexer's shape): a block scores tpb tiles of IX_EPB entries of one
 * row with the row's queries loaded once, the next tile's keys loading while this one is scored; in a tile warp w
 * takes entries 16w..16w+15 against every head (S = q K^T, mma.sync bf16 -> fp32), then each lane folds its
 * fragments through w_h ReLU(.) and the warp sums over heads with shuffles. Dynamic shared memory: the queries and
 * min(tpb, 2) key tiles (ix_smem_bytes). FP8 keys: a tile is the entries' codes (16-byte chunks swizzled as the bf16
 * tiles' are) and their scale exponents; each lane builds its bf16 key fragments from the codes times the scale
 * (exact), so the scores are those of the dequantised keys. */
#define IX_H 64
#define IX_D 128
#define IX_EPB 128
#define IX_THREADS 256
#define IX_TPB_MAX 4          /* tiles a block scores at most */

__device__ __forceinline__ int sw128(int r, int c) { return r * IX_D + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7); }

#define IX_SC 4               /* scale bytes a key row: V4_FP8_SCALE_STRIDE(IX_D) */
#define IX_TILE_BYTES(fp8) ((fp8) ? IX_EPB * (IX_D + IX_SC) : IX_EPB * IX_D * 2)

static size_t ix_smem_bytes(int tpb, int fp8)
{
    return (size_t)IX_H * IX_D * sizeof(uint16_t) + (size_t)(tpb < 2 ? tpb : 2) * IX_TILE_BYTES(fp8);
}

template <bool FP8>
__global__ void __launch_bounds__(IX_THREADS) k_index_scores_mma(v4_step s, v4_arena ar, size_t page_off, int r0,
                                                                 const uint16_t *q, int nI, const float *wI, int ld_w,
                                                                 float w_scale, int topk, int tpb, float *scores,
                                                                 int ld)
{
    static_assert(V4_FP8_SCALE_STRIDE(IX_D) == IX_SC, "scale bytes of a key row");
    pdl_enter();
    extern __shared__ __align__(16) uint16_t ix_smem[];
    uint16_t *const qs = ix_smem;
    const int i = r0 + blockIdx.x, N = idx_count(s, i), tile0 = blockIdx.y * tpb;
    if (N <= topk || tile0 * IX_EPB >= N) return;
    const int n_tiles = min(tpb, (N + IX_EPB - 1) / IX_EPB - tile0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, qd = lane & 3, sp = s.tok_span[i];
    const uint16_t *qi = q + (size_t)i * nI * IX_D;
    for (int c = tid; c < IX_H * (IX_D / 8); c += IX_THREADS) {
        const int r = c / (IX_D / 8), ch = c % (IX_D / 8);
        uint16_t *d = qs + r * IX_D + ((ch ^ (r & 7)) << 3);
        if (r < nI) cp_async16(d, qi + (size_t)r * IX_D + ch * 8);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
    uint8_t *const tiles = (uint8_t *)(ix_smem + IX_H * IX_D);   /* buffer b at tiles + b * IX_TILE_BYTES(FP8) */
    auto load_tile = [&](int t) {   /* tile t of the block into buffer t % 2 */
        uint8_t *buf = tiles + (t & 1) * IX_TILE_BYTES(FP8);
        const int e0 = (tile0 + t) * IX_EPB;
        if (FP8) {   /* 8 chunks of 16 codes a key (chunk ch of row r at ch ^ (r & 7)), then the keys' scale words */
            for (int c = tid; c < IX_EPB * (IX_D / 16); c += IX_THREADS) {
                const int r = c / (IX_D / 16), ch = c % (IX_D / 16), e = e0 + r;
                uint8_t *d = buf + r * IX_D + ((ch ^ (r & 7)) << 4), *sc;
                if (e < N) cp_async16(d, v4_fp8_entry(s, ar, page_off, sp, e, 4, IX_D, &sc) + ch * 16);
                else *(uint4 *)d = make_uint4(0, 0, 0, 0);
            }
            for (int r = tid; r < IX_EPB; r += IX_THREADS) {
                const int e = e0 + r;
                uint8_t *d = buf + IX_EPB * IX_D + r * IX_SC, *sc;
                if (e < N) {
                    v4_fp8_entry(s, ar, page_off, sp, e, 4, IX_D, &sc);
                    cp_async4(d, sc);
                } else {
                    *(uint32_t *)d = 0x7F7F7F7Fu;   /* scale 1 for the zero codes of the missing keys */
                }
            }
        } else {
            uint16_t *ks = (uint16_t *)buf;
            for (int c = tid; c < IX_EPB * (IX_D / 8); c += IX_THREADS) {
                const int r = c / (IX_D / 8), ch = c % (IX_D / 8), e = e0 + r;
                uint16_t *d = ks + r * IX_D + ((ch ^ (r & 7)) << 3);
                if (e < N) cp_async16(d, v4_entry_ptr(s, ar, page_off, sp, e, 4, IX_D) + ch * 8);
                else *(uint4 *)d = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };
    load_tile(0);   /* with the queries */
    float wh[4][2];   /* the weights of this lane's heads 16 mt + g (+ 8) */
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int h = 16 * mt + g + 8 * hf;
            wh[mt][hf] = h < nI ? wI[(size_t)i * ld_w + h] * w_scale : 0.0f;
        }
    for (int t = 0; t < n_tiles; t++) {
        if (t + 1 < n_tiles) {   /* the next tile loads into the other buffer (free since the last barrier) */
            load_tile(t + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint8_t *buf = tiles + (t & 1) * IX_TILE_BYTES(FP8);
        const uint16_t *ks = (const uint16_t *)buf;
        const int e0 = (tile0 + t) * IX_EPB;
        float ksc[2][2];   /* FP8: the scales of this lane's keys 16 w + g (+ 8), dims 0-63 and 64-127 */
        if (FP8)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int b = 0; b < 2; b++) ksc[nt][b] = fp8_scale(buf[IX_EPB * IX_D + (16 * w + 8 * nt + g) * IX_SC + b]);
        float sc[4][2][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
#pragma unroll
                for (int c = 0; c < 4; c++) sc[a][b][c] = 0.0f;
#pragma unroll
        for (int kq = 0; kq < IX_D / 16; kq++) {
            uint32_t b[4];
            if (FP8) {   /* b[2 nt + hi]: key 16 w + 8 nt + g, dims 16 kq + 8 hi + 2 qd and the next */
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const uint8_t *row = buf + (16 * w + 8 * nt + g) * IX_D + ((kq ^ g) << 4) + 2 * qd;
                    b[2 * nt] = e4m3x2_scaled_bf16x2(*(const uint16_t *)row, ksc[nt][kq >> 2]);
                    b[2 * nt + 1] = e4m3x2_scaled_bf16x2(*(const uint16_t *)(row + 8), ksc[nt][kq >> 2]);
                }
            } else {
                ldsm_x4(b, ks + sw128(16 * w + (lane & 7) + ((lane >> 4) << 3), 16 * kq + (((lane >> 3) & 1) << 3)));
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                uint32_t a[4];
                ldsm_x4(a, qs + sw128(16 * mt + (lane & 15), 16 * kq + ((lane >> 4) << 3)));
                mma_bf16(sc[mt][0], a[0], a[1], a[2], a[3], b[0], b[1]);
                mma_bf16(sc[mt][1], a[0], a[1], a[2], a[3], b[2], b[3]);
            }
        }
        float part[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};   /* [n-tile][entry 2q + j] */
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            const float w0 = wh[mt][0], w1 = wh[mt][1];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                part[nt][0] += w0 * fmaxf(sc[mt][nt][0], 0.0f) + w1 * fmaxf(sc[mt][nt][2], 0.0f);
                part[nt][1] += w0 * fmaxf(sc[mt][nt][1], 0.0f) + w1 * fmaxf(sc[mt][nt][3], 0.0f);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float v = part[nt][j];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                const int e = e0 + 16 * w + 8 * nt + 2 * qd + j;
                if (g == 0 && e < N) scores[(size_t)blockIdx.x * ld + e] = v;
            }
        __syncthreads();   /* every warp is done with buffer t % 2 before tile t + 2 loads into it */
    }
}

__device__ __forceinline__ unsigned score_key(float v)
{
    if (v != v) return 0u;               /* NaN: worst */
    if (v == 0.0f) v = 0.0f;             /* -0 -> +0 */
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Key e of the row: from the copy in shared memory (staged), else from the scores in global memory. */
__device__ __forceinline__ unsigned topk_key(bool staged, const unsigned *sk, const float *sc, int e)
{
    return staged ? sk[e] : score_key(sc[e]);
}

/* One block per row. A row of at most stage_cap candidates (the dynamic shared memory's keys) has its keys computed
 * once into shared memory and every pass reads them there; a longer one re-reads the scores from global memory in
 * each pass. */
__global__ void __launch_bounds__(TOPK_THREADS) k_topk(v4_step s, int r0, int topk, const float *scores, int ld,
                                                       int stage_cap, int32_t *sel)
{
    pdl_enter();
    extern __shared__ unsigned sk[];
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
    const bool staged = N <= stage_cap;
    if (staged)
        for (int e = threadIdx.x; e < N; e += blockDim.x) sk[e] = score_key(sc[e]);
    if (threadIdx.x == 0) { prefix = 0; mask = 0; rem = topk; n_gt = 0; eq_base = 0; }
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const unsigned pf = prefix, mk = mask;
        /* a thread's keys mostly share a bin in the first passes (sign and exponent bits): it adds runs of one bin
         * with one atomic, so the block's atomics on that bin do not serialise per key */
        unsigned run_bin = 0u, run = 0u;
        for (int e = threadIdx.x; e < N; e += blockDim.x) {
            const unsigned key = topk_key(staged, sk, sc, e);
            if ((key & mk) != pf) continue;
            const unsigned bin = (key >> shift) & 255u;
            if (run && bin != run_bin) atomicAdd(&hist[run_bin], run), run = 0u;
            run_bin = bin;
            run++;
        }
        if (run) atomicAdd(&hist[run_bin], run);
        __syncthreads();
        if (threadIdx.x < 32) {   /* the bin holding the rem-th largest key: lane l owns bins 8l..8l+7 */
            const int l = threadIdx.x, need = rem;
            int c = 0;
#pragma unroll
            for (int b = 0; b < 8; b++) c += (int)hist[8 * l + b];
            int above = c;   /* keys in lanes l.. (suffix sum), then in lanes above l */
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int v = __shfl_down_sync(0xffffffffu, above, o);
                if (l + o < 32) above += v;
            }
            above -= c;
            if (above < need && above + c >= need) {   /* exactly one lane */
                int cum = above;
                for (int b = 8 * l + 7; b >= 8 * l; b--) {
                    if (cum + (int)hist[b] >= need) {
                        rem = need - cum;
                        prefix |= (unsigned)b << shift;
                        mask |= 255u << shift;
                        break;
                    }
                    cum += (int)hist[b];
                }
            }
        }
        __syncthreads();
    }
    const unsigned T = prefix;
    const int need_eq = rem, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    /* keys above T: all of them, any order */
    for (int e = threadIdx.x; e < N; e += blockDim.x)
        if (topk_key(staged, sk, sc, e) > T) out[atomicAdd(&n_gt, 1)] = e;
    __syncthreads();
    const int gt = n_gt;
    /* keys equal to T: the lowest indices first */
    for (int c0 = 0; c0 < N; c0 += blockDim.x) {
        const int e = c0 + threadIdx.x;
        const int eq = e < N && topk_key(staged, sk, sc, e) == T;
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

extern "C" int v4_indexer_tiles_per_block(int rows, int tiles, int n_sms)
{
    const long slots = 2L * (n_sms > 0 ? n_sms : 1), t = ((long)rows * tiles + slots - 1) / slots;
    return t < 1 ? 1 : t > IX_TPB_MAX ? IX_TPB_MAX : (int)t;
}

extern "C" cudaError_t v4_indexer(const v4_step *s, const v4_arena *a, size_t page_off, int key_fp8, int r0, int nr,
                                  const uint16_t *q, int nI, int dI, const float *wI, int ld_w, float w_scale,
                                  int topk, int32_t *sel, float *scores, int max_entries, cudaStream_t st)
{
    if (nr <= 0) return cudaSuccess;
    if (topk <= 0 || (q && key_fp8 && dI % 64)) return cudaErrorInvalidValue;
    if (!q) {   /* the scores are given */
    } else if (max_entries > topk && dI == IX_D && nI <= IX_H) {
        static int sms[DEV_FLAG_MAX];     /* the device's multiprocessors (0: not known yet) */
        static unsigned char raiseds[DEV_FLAG_MAX];
        const int d = dev_index();
        int n_sms = d >= 0 ? sms[d] : 0;
        if (n_sms == 0) {
            if (cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, d >= 0 ? d : 0) != cudaSuccess)
                n_sms = 1;
            if (d >= 0) sms[d] = n_sms;
        }
        unsigned char *raised = dev_flag(raiseds);
        if (!raised || !*raised) {
            cudaError_t e = cudaFuncSetAttribute(k_index_scores_mma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)ix_smem_bytes(2, 0));
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k_index_scores_mma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)ix_smem_bytes(2, 1));
            if (e != cudaSuccess) return e;
            if (raised) *raised = 1;
        }
        const int n_tiles = (max_entries + IX_EPB - 1) / IX_EPB, tpb = v4_indexer_tiles_per_block(nr, n_tiles, n_sms);
        dim3 grid(nr, (n_tiles + tpb - 1) / tpb);
        cudaError_t e = moe_launch(key_fp8 ? k_index_scores_mma<true> : k_index_scores_mma<false>, grid,
                                   dim3(IX_THREADS), ix_smem_bytes(tpb, key_fp8), st, *s, *a, page_off, r0, q, nI, wI,
                                   ld_w, w_scale, topk, tpb, scores, max_entries);
        if (e != cudaSuccess) return e;
    } else if (max_entries > topk) {
        const size_t smem = ((size_t)nI * (dI + 1) + nI + (size_t)(IDX_THREADS / 32) * dI) * sizeof(float);
        if (smem > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(k_index_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (e != cudaSuccess) return e;
        }
        dim3 grid(nr, (max_entries + IDX_EPB - 1) / IDX_EPB);
        cudaError_t e = moe_launch(k_index_scores, grid, dim3(IDX_THREADS), smem, st, *s, *a, page_off, key_fp8, r0, q, nI,
                                  dI, wI, ld_w, w_scale, topk, scores, max_entries);
        if (e != cudaSuccess) return e;
    }
    /* the longest row whose keys fit this device's shared memory beside the static histogram (0: not known yet) */
    static int stage_caps[DEV_FLAG_MAX];
    const int d = dev_index();
    int cap = d >= 0 ? stage_caps[d] : 0;
    if (cap == 0) {
        int optin = 0;
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d >= 0 ? d : 0) != cudaSuccess)
            optin = 48 * 1024;
        cudaFuncAttributes fa;   /* the kernel's static shared memory (the histogram and its counters) */
        const int stat = cudaFuncGetAttributes(&fa, k_topk) == cudaSuccess ? (int)fa.sharedSizeBytes : 2048;
        cap = (optin - stat) / (int)sizeof(unsigned);
        if (cap > TOPK_STAGE_MAX) cap = TOPK_STAGE_MAX;
        if (cap * sizeof(unsigned) > 48 * 1024) {
            const cudaError_t e = cudaFuncSetAttribute(k_topk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       (int)(cap * sizeof(unsigned)));
            if (e != cudaSuccess) return e;
        }
        if (d >= 0) stage_caps[d] = cap;
    }
    const int stage = max_entries <= cap ? max_entries : 0;
    return moe_launch(k_topk, dim3(nr), dim3(TOPK_THREADS), (size_t)stage * sizeof(unsigned), st, *s, r0, topk,
                      (const float *)scores, max_entries, stage, sel);
}

/* The key set of row i: n_win window positions from pw0, then the compressed entries; nk keys in all. */
__device__ __forceinline__ int att_key_count(const v4_step &s, int i, int W, int ratio, int topk, int max_keys,
                                             int *n_win, int *pw0)
{
    const int t = s.tok_pos[i];
    *n_win = min(t + 1, W);
    *pw0 = t - *n_win + 1;
    int n_cmp = 0;
    if (ratio == 4) n_cmp = min(topk, (t + 1) / 4);
    else if (ratio > 0) n_cmp = (t + 1) / ratio;
    return min(*n_win + n_cmp, max_keys);
}

/* Key kk of a row: a window position (this step's kv row, or the ring), or a compressed entry, rows of rb bytes (bf16,
 * or FP8 KV rows); NULL for none (kk >= nk, or an unfilled top-k slot). */
__device__ __forceinline__ const uint8_t *att_key(const v4_step &s, const v4_arena &ar, const uint8_t *ring,
                                                  const uint8_t *kv, size_t rb, int W, int pos0, int row0, int pw0,
                                                  int n_win, int nk, int kk, int ratio, const int32_t *seli,
                                                  size_t page_off, int sp)
{
    if (kk >= nk) return nullptr;
    if (kk < n_win) {
        const int pos = pw0 + kk;
        return pos >= pos0 ? kv + (size_t)(row0 + pos - pos0) * rb : ring + (size_t)(pos % W) * rb;
    }
    const int e = ratio == 4 ? seli[kk - n_win] : kk - n_win;
    return e >= 0 ? v4_entry_row(s, ar, page_off, sp, e, ratio, rb) : nullptr;
}

/* Output pair (d, d+1) of row i: the attention output de-rotated (RoPE by -pos on the last 2 rope_half dims, as
 * V4_SPEC 2.4 step 6) and rounded to bf16. */
__device__ __forceinline__ void att_store_pair(uint16_t *o, int d, float a, float b, long pos, int hd, int rope_half,
                                               const double *inv_freq)
{
    const int r0 = hd - 2 * rope_half;
    if (rope_half > 0 && d >= r0) {
        float c, sn;
        v4_rope_cs(pos, inv_freq[(d - r0) >> 1], &c, &sn);
        sn = -sn;
        const float re = a, im = b;
        a = re * c - im * sn;
        b = re * sn + im * c;
    }
    *(uint32_t *)&o[d] = (uint32_t)f2bf(a) | ((uint32_t)f2bf(b) << 16);
}

/* ---- 64 heads x 512 on the tensor cores (the V4 shape).
 * A block takes one row and one split: `split` consecutive keys of its key list. It reads each key once for every
 * head: S = Q K^T (64 x 32 keys a tile, mma.sync bf16 -> fp32), an online softmax per head over the tiles, P rounded
 * to bf16 (the normaliser sums the rounded values, so the weights stay exactly normalised), O += P V with O in
 * registers (warp w owns dims 64w..64w+63 of every head). Keys stream through a double-buffered cp.async ring.
 * The splits are fixed runs of keys: with FA_SPLIT ones a row's arithmetic depends neither on the batch nor on the
 * step's key bound (splits past a row's keys are empty and the combine skips them); longer ones, chosen by the
 * batch (v4_attention_split), trade that for less scratch traffic. One
 * split: the block normalises (sink included) and writes o; more: each writes its unnormalised O (128 KB, twice the
 * bytes of a 64-key split's keys), running max and sum to a scratch unit and k_attention_combine merges them in split
 * order. Short splits give a batch-1 row enough blocks; at large batches they cost that scratch traffic, hence
 * v4_attention_split. */
#define FA_H 64
#define FA_HD 512
#define FA_TILE 32
#define FA_SPLIT 64
#define FA_THREADS 256
#define FA_S_LD 40            /* score rows, floats */
#define FA_P_LD 40            /* probability rows, bf16 (80 bytes: ldmatrix rows on distinct banks) */
#define FA_UNIT_FLOATS ((size_t)FA_H * FA_HD + 2 * FA_H)
#define FA_KP 1024            /* key addresses resolved ahead (a split's first FA_KP keys, then the next ...) */

/* One block's split of one row's keys, as both tensor-core kernels take it: block b is row r0 + b / n_splits, keys
 * kb.. (split of them, n_keys in this row) of its key list. */
struct AttSplit {
    int i, sp, pos0, row0, n_win, pw0, nk, kb, n_keys;
    float *unit;              /* the split's scratch unit (NULL: one split, the block normalises) */
    const uint8_t *ring;      /* the row's window ring */
    const int32_t *seli;      /* CSA: the row's selected entries */
};

/* The block's split; false (the unit marked empty where there is one) past the row's keys. */
__device__ __forceinline__ bool att_split(AttSplit &a, const v4_step &s, const v4_arena &ar, size_t ring_off, int W,
                                          int ratio, const int32_t *sel, int topk, int max_keys, int split,
                                          int n_splits, int r0, float *part)
{
    a.i = r0 + blockIdx.x / n_splits;
    a.sp = s.tok_span[a.i];
    a.pos0 = s.span_pos0[a.sp];
    a.row0 = s.span_row0[a.sp];
    a.nk = att_key_count(s, a.i, W, ratio, topk, max_keys, &a.n_win, &a.pw0);
    a.kb = (blockIdx.x % n_splits) * split;
    a.unit = part ? part + (size_t)blockIdx.x * FA_UNIT_FLOATS : nullptr;
    if (a.kb >= a.nk) {   /* past this row's keys (only with several splits) */
        if (threadIdx.x < FA_H) {
            a.unit[FA_H * FA_HD + 2 * threadIdx.x] = -INFINITY;
            a.unit[FA_H * FA_HD + 2 * threadIdx.x + 1] = 0.0f;
        }
        return false;
    }
    a.n_keys = a.nk - a.kb < split ? a.nk - a.kb : split;
    a.ring = ar.slots + (size_t)s.span_slot[a.sp] * ar.slot_bytes + ring_off;
    a.seli = ratio == 4 ? sel + (size_t)a.i * topk : nullptr;
    return true;
}

/* The addresses of the split's keys k0.. (up to FA_KP of them, rows of rb bytes) into kp: every thread resolves some at
 * once, so the index and block-table reads behind them are not on each tile's path. */
__device__ __forceinline__ void att_resolve(const AttSplit &a, const v4_step &s, const v4_arena &ar,
                                            const uint8_t *kv, size_t rb, int W, int ratio, size_t page_off, int k0,
                                            const uint8_t **kp)
{
    for (int k = threadIdx.x; k < FA_KP && k0 + k < a.n_keys; k += blockDim.x)
        kp[k] = att_key(s, ar, a.ring, kv, rb, W, a.pos0, a.row0, a.pw0, a.n_win, a.nk, a.kb + k0 + k, ratio,
                        a.seli, page_off, a.sp);
}

/* Before tile j of n_tiles (TILE keys each, double-buffered): where tile j + 1 starts the next FA_KP keys their
 * addresses first (every thread has issued the tiles before), then tile j + 1's copies issued and tile j's awaited
 * (this thread's copies; a barrier must follow). */
template <int TILE, class Resolve, class Load>
__device__ __forceinline__ void att_advance(int j, int n_tiles, const Resolve &resolve, const Load &load_tile)
{
    if (j + 1 < n_tiles && (j + 1) * TILE % FA_KP == 0) {
        resolve((j + 1) * TILE);
        __syncthreads();
    }
    if (j + 1 < n_tiles) {
        load_tile(j + 1, (j + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* Row i's queries (H heads x FA_HD bf16; heads past H zero) into shared memory at dst, 16-byte piece pc of head r at
 * byte offset off(r, pc): each kernel's own layout. */
template <typename Off>
__device__ __forceinline__ void att_load_q(uint8_t *dst, const uint16_t *q, int i, int H, int tid, Off off)
{
    const uint16_t *qi = q + (size_t)i * H * FA_HD;
    for (int c = tid; c < FA_H * (FA_HD / 8); c += FA_THREADS) {
        const int r = c / (FA_HD / 8), pc = c % (FA_HD / 8);
        uint8_t *d = dst + off(r, pc);
        if (r < H) cp_async16(d, qi + (size_t)r * FA_HD + pc * 8);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

/* The block's output pair (d, d+1) of head h (x, y: its unnormalised sums): with several splits into the split's
 * scratch unit as they are; with one, times f / L, de-rotated from the block's angle table (rc, rsn: pair p of the
 * last 2 rope_half dims) and rounded to bf16 in o. f and L: k_attention_combine's arithmetic for one split. */
__device__ __forceinline__ void att_out_factors(float m, float l, float sk, float *f, float *L)
{
    const float M = fmaxf(m, sk);
    *f = m == -INFINITY ? 0.0f : expf(m - M);
    *L = expf(sk - M) + l * *f;
}
__device__ __forceinline__ void att_out(float *unit, uint16_t *o, int h, int d, float x, float y, float f, float L,
                                        int rope_half, const float *rc, const float *rsn)
{
    if (unit) {
        *(float2 *)&unit[(size_t)h * FA_HD + d] = make_float2(x, y);
        return;
    }
    float a = x * f / L, b = y * f / L;
    const int rot0 = FA_HD - 2 * rope_half;
    if (rope_half > 0 && d >= rot0) {   /* att_store_pair's de-rotation, from the table */
        const float c = rc[(d - rot0) >> 1], sn = -rsn[(d - rot0) >> 1], re = a, im = b;
        a = re * c - im * sn;
        b = re * sn + im * c;
    }
    *(uint32_t *)&o[(size_t)h * FA_HD + d] = (uint32_t)f2bf(a) | ((uint32_t)f2bf(b) << 16);
}

struct FaSmem {
    uint16_t q[FA_H * FA_HD];             /* rows swizzled: 16-byte chunk c of row r at c ^ (r & 7) */
    uint16_t k[2][FA_TILE * FA_HD];       /* same swizzle */
    float s[FA_H * FA_S_LD];
    uint16_t p[FA_H * FA_P_LD];
    float m[FA_H], l[FA_H], alpha[FA_H];
    int valid[2][FA_TILE];
    const uint8_t *kp[FA_KP];             /* the keys' addresses (NULL: none), resolved before their tiles load */
    float rc[FA_HD / 2], rsn[FA_HD / 2];  /* one split: the de-rotation's cos / sin per rotated pair */
};

__device__ __forceinline__ int sw512(int r, int c) { return r * FA_HD + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7); }

__global__ void __launch_bounds__(FA_THREADS, 1)
    k_attention_mma(v4_step s, v4_arena ar, size_t ring_off, int W, size_t page_off, int ratio, const int32_t *sel,
                    int topk, const uint16_t *q, const uint8_t *kv, int H, float scale, const float *sink,
                    int max_keys, int split, int n_splits, int r0, float *part, int rope_half, const double *inv_freq,
                    uint16_t *o)
{
    pdl_enter();
    extern __shared__ __align__(16) uint8_t fa_raw[];
    FaSmem &sm = *reinterpret_cast<FaSmem *>(fa_raw);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, qd = lane & 3;
    AttSplit a;
    if (!att_split(a, s, ar, ring_off, W, ratio, sel, topk, max_keys, split, n_splits, r0, part)) return;
    const int i = a.i, n_keys = a.n_keys;
    float *const unit = a.unit;

    att_load_q((uint8_t *)sm.q, q, i, H, tid,
               [](int r, int pc) { return (r * FA_HD + ((pc ^ (r & 7)) << 3)) * (int)sizeof(uint16_t); });
    auto resolve = [&](int k0) { att_resolve(a, s, ar, kv, FA_HD * 2, W, ratio, page_off, k0, sm.kp); };
    /* tile `tile` of the split into buffer buf: 8 threads a key, 128 bytes each */
    auto load_tile = [&](int tile, int buf) {
        const int kr = tid >> 3, part8 = tid & 7, k = tile * FA_TILE + kr;
        const uint16_t *src = k < n_keys ? (const uint16_t *)sm.kp[k % FA_KP] : nullptr;
        uint16_t *dst = sm.k[buf] + kr * FA_HD;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int ch = part8 * 8 + j;
            uint16_t *d = dst + ((ch ^ (kr & 7)) << 3);
            if (src) cp_async16(d, src + ch * 8);
            else *(uint4 *)d = make_uint4(0, 0, 0, 0);
        }
        if (part8 == 0) sm.valid[buf][kr] = src != nullptr;
    };
    if (tid < FA_H) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
    resolve(0);
    __syncthreads();
    load_tile(0, 0);
    cp_async_commit();
    float acc[4][8][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 8; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.0f;

    const int n_tiles = (n_keys + FA_TILE - 1) / FA_TILE;
    for (int j = 0; j < n_tiles; j++) {
        att_advance<FA_TILE>(j, n_tiles, resolve, load_tile);
        __syncthreads();
        const uint16_t *kt = sm.k[j & 1];
        {   /* S = Q K^T * scale: warp w, heads 16 (w & 3).., keys 16 (w >> 2).. */
            const int mt = w & 3, np = w >> 2;
            float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll 8
            for (int ks = 0; ks < FA_HD / 16; ks++) {
                uint32_t a[4], b[4];
                ldsm_x4(a, sm.q + sw512(16 * mt + (lane & 15), 16 * ks + ((lane >> 4) << 3)));
                ldsm_x4(b, kt + sw512(16 * np + (lane & 7) + ((lane >> 4) << 3), 16 * ks + (((lane >> 3) & 1) << 3)));
                mma_bf16(sc[0], a[0], a[1], a[2], a[3], b[0], b[1]);
                mma_bf16(sc[1], a[0], a[1], a[2], a[3], b[2], b[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int col = 16 * np + 8 * nt + 2 * qd, row = 16 * mt + g;
                *(float2 *)&sm.s[row * FA_S_LD + col] = make_float2(sc[nt][0] * scale, sc[nt][1] * scale);
                *(float2 *)&sm.s[(row + 8) * FA_S_LD + col] = make_float2(sc[nt][2] * scale, sc[nt][3] * scale);
            }
        }
        __syncthreads();
        {   /* online softmax: 4 threads a head, 8 keys each */
            const int hh = tid >> 2, c0 = (tid & 3) * 8;
            float v[8], mx = -INFINITY;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                v[k] = sm.valid[j & 1][c0 + k] ? sm.s[hh * FA_S_LD + c0 + k] : -INFINITY;
                mx = fmaxf(mx, v[k]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_old = sm.m[hh], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            uint32_t pk[4];
#pragma unroll
            for (int k = 0; k < 8; k += 2) {
                const uint16_t p0 = f2bf(m_new == -INFINITY ? 0.0f : expf(v[k] - m_new));
                const uint16_t p1 = f2bf(m_new == -INFINITY ? 0.0f : expf(v[k + 1] - m_new));
                sum += bf2f(p0) + bf2f(p1);
                pk[k / 2] = (uint32_t)p0 | ((uint32_t)p1 << 16);
            }
            *(uint4 *)&sm.p[hh * FA_P_LD + c0] = make_uint4(pk[0], pk[1], pk[2], pk[3]);
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if ((tid & 3) == 0) {
                const float al = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
                sm.alpha[hh] = al;
                sm.l[hh] = sm.l[hh] * al + sum;
                sm.m[hh] = m_new;
            }
        }
        __syncthreads();
        {   /* O = O * alpha + P V: warp w, every head, dims 64 w.. */
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const float a0 = sm.alpha[16 * mt + g], a1 = sm.alpha[16 * mt + g + 8];
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    acc[mt][nt][0] *= a0;
                    acc[mt][nt][1] *= a0;
                    acc[mt][nt][2] *= a1;
                    acc[mt][nt][3] *= a1;
                }
            }
#pragma unroll
            for (int ks = 0; ks < FA_TILE / 16; ks++) {
                uint32_t a[4][4];
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
                    ldsm_x4(a[mt], sm.p + (16 * mt + (lane & 15)) * FA_P_LD + 16 * ks + ((lane >> 4) << 3));
#pragma unroll
                for (int pr = 0; pr < 4; pr++) {
                    uint32_t b[4];
                    ldsm_x4_t(b, kt + sw512(16 * ks + (lane & 7) + (((lane >> 3) & 1) << 3), 64 * w + 16 * pr + ((lane >> 4) << 3)));
#pragma unroll
                    for (int mt = 0; mt < 4; mt++) {
                        mma_bf16(acc[mt][2 * pr], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
                        mma_bf16(acc[mt][2 * pr + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
                    }
                }
            }
        }
        __syncthreads();
    }
    if (unit && tid < FA_H) {
        unit[FA_H * FA_HD + 2 * tid] = sm.m[tid];
        unit[FA_H * FA_HD + 2 * tid + 1] = sm.l[tid];
    }
    if (!unit && rope_half > 0) {   /* the de-rotation's angles, once a block (not once a head on one warp) */
        for (int p = tid; p < rope_half; p += FA_THREADS) v4_rope_cs(s.tok_pos[i], inv_freq[p], &sm.rc[p], &sm.rsn[p]);
        __syncthreads();
    }
    uint16_t *oi = o + (size_t)i * H * FA_HD;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int h = 16 * mt + g + 8 * hf;
            if (h >= H) continue;
            float f = 1.0f, L = 1.0f;
            if (!unit) att_out_factors(sm.m[h], sm.l[h], sink[h], &f, &L);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                att_out(unit, oi, h, 64 * w + 8 * nt + 2 * qd, acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1], f, L,
                        rope_half, sm.rc, sm.rsn);
        }
}

/* ---- The same attention on sm_90a's warpgroup MMA (wgmma), 64 keys a tile.
 * The mma.sync kernel above is bound by its issue slots: every warp re-reads its heads' Q and its keys from shared
 * memory through ldmatrix for each 32-key tile, and the phases wait on each other through the block's barriers, so a
 * tile costs several times its tensor work. Here Q and each key tile sit in shared memory in wgmma's 128-byte swizzled
 * layout (wgmma_sm90.cuh) and the tensor cores read them directly: warpgroup 0 computes S = Q K^T for the tile
 * (64 heads x 64 keys, 32 m64n64k16 steps, S in registers), its online softmax in registers (a head's row is held by
 * one quad), and writes P (bf16) to shared memory; then both warpgroups add P V, warpgroup 0 for dims 0-255 (P from
 * its registers), warpgroup 1 for dims 256-511 (P from shared memory), reading the same key tile as V (N-major).
 * The next tile loads (cp.async, every thread) while this one computes. Numerics as k_attention_mma: scores scaled in
 * fp32, P rounded to bf16 with the normaliser summing the rounded values, fp32 accumulation in a fixed order (a row's
 * result depends only on its keys and the split), the same scratch units and combine. */
#define WA_TILE 64
#define WA_CHUNK (64 * 128)   /* one 64-dim chunk of 64 rows, bytes */
#define WA_KV8_HALF 32        /* FP8 KV rows on the tensor cores: V4's 64 rotated dims (448 codes, 592-byte rows) */
#define WA_KV8_NOPE (FA_HD - 2 * WA_KV8_HALF)
#define WA_KV8_ROW (WA_KV8_NOPE + 4 * WA_KV8_HALF + V4_KV8_EXP_BYTES(WA_KV8_NOPE))

/* KV8: FP8 KV rows stream into two raw tiles (cp.async) and each is widened to bf16 in the one key tile just before
 * the tensor cores read it; bf16 keys stream into two key tiles. */
template <bool KV8> struct WaSmem {
    uint8_t q[8 * WA_CHUNK];              /* Q: 8 chunks of 64 dims x 64 heads */
    uint8_t k[KV8 ? 1 : 2][8 * WA_CHUNK]; /* key tiles: 8 chunks of 64 dims x 64 keys */
    uint8_t p[WA_CHUNK];                  /* P: 64 heads x 64 keys */
    float alpha[FA_H], m[FA_H], l[FA_H];
    int valid[2][WA_TILE];
    const uint8_t *kp[FA_KP];
    float rc[FA_HD / 2], rsn[FA_HD / 2];
    alignas(16) uint8_t raw[2][KV8 ? WA_TILE * WA_KV8_ROW : 16];   /* last: q, k and p keep 1 KB alignment (wgmma) */
};
static_assert(offsetof(WaSmem<false>, p) % 1024 == 0 && offsetof(WaSmem<true>, p) % 1024 == 0,
              "wgmma's 128-byte swizzled tiles start on 1 KB");

/* byte offset of 16-byte piece p (columns 8p..8p+7) of row r in a matrix of 64-row chunks */
__device__ __forceinline__ uint32_t wa_off(int r, int p)
{
    return (uint32_t)((p >> 3) * WA_CHUNK + r * 128 + (((p & 7) ^ (r & 7)) << 4));
}
__device__ __forceinline__ uint32_t pack_bf2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

template <bool KV8>
__global__ void __launch_bounds__(FA_THREADS, 1)
    k_attention_wg(v4_step s, v4_arena ar, size_t ring_off, int W, size_t page_off, int ratio, const int32_t *sel,
                   int topk, const uint16_t *q, const uint8_t *kv, int H, float scale, const float *sink,
                   int max_keys, int split, int n_splits, int r0, float *part, int rope_half, const double *inv_freq,
                   uint16_t *o)
{
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();   /* sm_90a's alone; the host launches it on compute capability 9.0 only */
#else
    pdl_enter();
    extern __shared__ __align__(16) uint8_t wa_raw[];
    WaSmem<KV8> &sm = *reinterpret_cast<WaSmem<KV8> *>(wa_raw + ((1024u - (smem_u32(wa_raw) & 1023u)) & 1023u));
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, qd = lane & 3, w = (tid >> 5) & 3;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);   /* warp-uniform to the compiler: wgmma on its branches */
    const int hr0 = 16 * w + g, hr1 = hr0 + 8;   /* the two heads (rows) of this thread's fragments */
    AttSplit a;
    if (!att_split(a, s, ar, ring_off, W, ratio, sel, topk, max_keys, split, n_splits, r0, part)) return;
    const int i = a.i, n_keys = a.n_keys;
    float *const unit = a.unit;
    att_load_q(sm.q, q, i, H, tid, [](int r, int pc) { return wa_off(r, pc); });
    auto resolve = [&](int k0) { att_resolve(a, s, ar, kv, KV8 ? WA_KV8_ROW : FA_HD * 2, W, ratio, page_off, k0, sm.kp); };
    /* tile `tile` into buffer buf: 4 threads a key; bf16: 16 pieces of 16 bytes each into the key tile; KV8: the row's
     * 37 pieces as they are into the raw tile */
    auto load_tile = [&](int tile, int buf) {
        const int kr = tid >> 2, p4 = tid & 3, k = tile * WA_TILE + kr;
        const uint8_t *src = k < n_keys ? sm.kp[k % FA_KP] : nullptr;
        if constexpr (KV8) {
            uint8_t *d = sm.raw[buf] + kr * WA_KV8_ROW;
            if (src)
                for (int pc = p4; pc < WA_KV8_ROW / 16; pc += 4) cp_async16(d + pc * 16, src + pc * 16);
        } else {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int pc = p4 * 16 + j;
                uint8_t *d = sm.k[buf] + wa_off(kr, pc);
                if (src) cp_async16(d, src + pc * 16);
                else *(uint4 *)d = make_uint4(0, 0, 0, 0);
            }
        }
        if (p4 == 0) sm.valid[buf][kr] = src != nullptr;
    };
    /* KV8: raw tile buf widened into the key tile, 16 bytes (8 dims) a thread at a time; a missing key is zeros (its
     * P is 0, and 0 times stale bytes could be NaN) */
    auto widen_tile = [&](int buf) {
        for (int c = tid; c < WA_TILE * (FA_HD / 8); c += FA_THREADS) {
            const int kr = c / (FA_HD / 8), pc = c % (FA_HD / 8);
            const uint8_t *row = sm.raw[buf] + kr * WA_KV8_ROW;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (sm.valid[buf][kr]) {
                if (8 * pc < WA_KV8_NOPE) {
                    const uint2 cd = *(const uint2 *)(row + 8 * pc);
                    const float sc = fp8_scale(row[WA_KV8_NOPE + 4 * WA_KV8_HALF + (pc >> 3)]);
                    v = make_uint4(e4m3x2_scaled_bf16x2((uint16_t)cd.x, sc), e4m3x2_scaled_bf16x2((uint16_t)(cd.x >> 16), sc),
                                   e4m3x2_scaled_bf16x2((uint16_t)cd.y, sc), e4m3x2_scaled_bf16x2((uint16_t)(cd.y >> 16), sc));
                } else {
                    v = *(const uint4 *)(row + WA_KV8_NOPE + 16 * (pc - WA_KV8_NOPE / 8));
                }
            }
            *(uint4 *)(sm.k[0] + wa_off(kr, pc)) = v;
        }
    };
    resolve(0);
    __syncthreads();
    load_tile(0, 0);
    cp_async_commit();
    float acc[128];   /* O: heads hr0, hr1 x this warpgroup's 256 dims (wgmma's m64n256 fragment) */
#pragma unroll
    for (int k = 0; k < 128; k++) acc[k] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;   /* warpgroup 0: its rows' running max and sum */
    const uint32_t qb = smem_u32(sm.q), pb = smem_u32(sm.p);
    const int n_tiles = (n_keys + WA_TILE - 1) / WA_TILE;
    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1;
        att_advance<WA_TILE>(j, n_tiles, resolve, load_tile);
        if constexpr (KV8) {
            __syncthreads();   /* every thread's copies of the raw tile have landed */
            widen_tile(buf);
        }
        fence_async_smem();
        __syncthreads();
        const uint32_t kt = smem_u32(sm.k[KV8 ? 0 : buf]);
        float al0 = 1.0f, al1 = 1.0f;
        uint32_t pa[4][4];   /* warpgroup 0: P as the A fragments of the four k16 steps of P V */
        if (wg == 0) {
            float sc[32];
#pragma unroll
            for (int k = 0; k < 32; k++) sc[k] = 0.0f;
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < FA_HD / 16; ks++) {
                const uint32_t off = (ks >> 2) * WA_CHUNK + (ks & 3) * 32;
                wg_m64n64k16_ss(sc, wg_desc(qb + off, 16, 1024), wg_desc(kt + off, 16, 1024), ks > 0);
            }
            wg_commit();
            wg_wait<0>();
            wg_fence_acc(sc);
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int b = 0; b < 8; b++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float v = sm.valid[buf][8 * b + 2 * qd + (e & 1)] ? sc[4 * b + e] * scale : -INFINITY;
                    sc[4 * b + e] = v;
                    if (e < 2) mx0 = fmaxf(mx0, v);
                    else mx1 = fmaxf(mx1, v);
                }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int b = 0; b < 8; b++) {
                uint16_t pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float mn = e < 2 ? mn0 : mn1;
                    pv[e] = f2bf(mn == -INFINITY ? 0.0f : expf(sc[4 * b + e] - mn));
                    if (e < 2) s0 += bf2f(pv[e]);
                    else s1 += bf2f(pv[e]);
                }
                const uint32_t lo = pack_bf2(pv[0], pv[1]), hi = pack_bf2(pv[2], pv[3]);
                pa[b >> 1][(b & 1) * 2] = lo;       /* rows hr0 / hr1, keys 16 (b / 2) + 8 (b % 2) + 2 qd */
                pa[b >> 1][(b & 1) * 2 + 1] = hi;
                *(uint32_t *)(sm.p + hr0 * 128 + ((b ^ (hr0 & 7)) << 4) + qd * 4) = lo;
                *(uint32_t *)(sm.p + hr1 * 128 + ((b ^ (hr1 & 7)) << 4) + qd * 4) = hi;
            }
            s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
            s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
            s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
            s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
            al0 = mn0 == -INFINITY ? 1.0f : expf(m0 - mn0);
            al1 = mn1 == -INFINITY ? 1.0f : expf(m1 - mn1);
            l0 = l0 * al0 + s0;
            l1 = l1 * al1 + s1;
            m0 = mn0;
            m1 = mn1;
            if (qd == 0) {
                sm.alpha[hr0] = al0;
                sm.alpha[hr1] = al1;
            }
            fence_async_smem();
        }
        __syncthreads();   /* P and the rescale factors are in shared memory */
        if (wg == 1) {
            al0 = sm.alpha[hr0];
            al1 = sm.alpha[hr1];
        }
#pragma unroll
        for (int b = 0; b < 32; b++) {
            acc[4 * b] *= al0;
            acc[4 * b + 1] *= al0;
            acc[4 * b + 2] *= al1;
            acc[4 * b + 3] *= al1;
        }
        const uint32_t vt = kt + wg * 4 * WA_CHUNK;   /* V: this warpgroup's 4 chunks, keys 16 ks.. (N-major) */
        if (wg == 0) {
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < WA_TILE / 16; ks++)
                wg_m64n256k16_rs(acc, pa[ks], wg_desc(vt + ks * 2048, WA_CHUNK, 1024), 1);
        } else {
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < WA_TILE / 16; ks++)
                wg_m64n256k16_ss<1>(acc, wg_desc(pb + ks * 32, 16, 1024), wg_desc(vt + ks * 2048, WA_CHUNK, 1024), 1);
        }
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(acc);
        __syncthreads();   /* the tile's buffer and P are free */
    }
    if (wg == 0 && qd == 0) {
        sm.m[hr0] = m0;
        sm.m[hr1] = m1;
        sm.l[hr0] = l0;
        sm.l[hr1] = l1;
    }
    if (!unit && rope_half > 0)   /* the de-rotation's angles, once a block */
        for (int p = tid; p < rope_half; p += FA_THREADS) v4_rope_cs(s.tok_pos[i], inv_freq[p], &sm.rc[p], &sm.rsn[p]);
    __syncthreads();
    if (unit && tid < FA_H) {
        unit[FA_H * FA_HD + 2 * tid] = sm.m[tid];
        unit[FA_H * FA_HD + 2 * tid + 1] = sm.l[tid];
    }
    uint16_t *oi = o + (size_t)i * H * FA_HD;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int h = hf ? hr1 : hr0;
        if (h >= H) continue;
        float f = 1.0f, L = 1.0f;
        if (!unit) att_out_factors(sm.m[h], sm.l[h], sink[h], &f, &L);
#pragma unroll
        for (int b = 0; b < 32; b++)
            att_out(unit, oi, h, wg * 256 + 8 * b + 2 * qd, acc[4 * b + 2 * hf], acc[4 * b + 2 * hf + 1], f, L,
                    rope_half, sm.rc, sm.rsn);
    }
#endif
}

/* o[r0 + b][h] from the row's n_splits scratch units, in split order; empty splits (sum 0) skipped.
 * dynamic shared memory: 3 n_splits + 1 floats */
__global__ void __launch_bounds__(128) k_attention_combine(const int32_t *tok_pos, int r0, int n_splits, int H,
                                                           const float *part, const float *sink, int rope_half,
                                                           const double *inv_freq, uint16_t *o)
{
    pdl_enter();
    extern __shared__ float fac[];   /* per split: its factor e^(m - M), or 0 when empty; then L at [n_splits]; then
                                        every split's m and l as read */
    const int b = blockIdx.x, h = blockIdx.y;
    const float *u = part + (size_t)b * n_splits * FA_UNIT_FLOATS;
    float *ms = fac + n_splits + 1, *ls = ms + n_splits;
    const float sk = sink[h];
    for (int sp = threadIdx.x; sp < n_splits; sp += blockDim.x) {   /* the splits' (m, l) read at once */
        const float2 ml = *(const float2 *)(u + (size_t)sp * FA_UNIT_FLOATS + FA_H * FA_HD + 2 * h);
        ms[sp] = ml.x;
        ls[sp] = ml.y;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = sk;
        for (int sp = 0; sp < n_splits; sp++)
            if (ls[sp] > 0.0f) M = fmaxf(M, ms[sp]);
        float L = expf(sk - M);
        for (int sp = 0; sp < n_splits; sp++) {
            fac[sp] = ls[sp] > 0.0f ? expf(ms[sp] - M) : 0.0f;
            if (ls[sp] > 0.0f) L += ls[sp] * fac[sp];
        }
        fac[n_splits] = L;
    }
    __syncthreads();
    const float L = fac[n_splits];
    for (int d = threadIdx.x * 2; d < FA_HD; d += blockDim.x * 2) {
        float x = 0.0f, y = 0.0f;
#pragma unroll 4
        for (int sp = 0; sp < n_splits; sp++) {
            if (fac[sp] == 0.0f) continue;
            const float2 v = *(const float2 *)&u[(size_t)sp * FA_UNIT_FLOATS + (size_t)h * FA_HD + d];
            x += v.x * fac[sp];
            y += v.y * fac[sp];
        }
        att_store_pair(o + ((size_t)(r0 + b) * H + h) * FA_HD, d, x / L, y / L, tok_pos[r0 + b], FA_HD, rope_half,
                       inv_freq);
    }
}

extern "C" int v4_attention_split(int rows, int max_keys, int n_sms)
{
    /* one wave of blocks (one a multiprocessor: either kernel's shared memory is over half of it): as many splits a
     * row as fit, no shorter than FA_SPLIT; a row alone keeps FA_SPLIT */
    int per_row = rows > 0 ? n_sms / rows : 1;
    if (per_row < 1) per_row = 1;
    const int most = (max_keys + FA_SPLIT - 1) / FA_SPLIT;
    if (per_row >= most) return FA_SPLIT;
    const int keys = (max_keys + per_row - 1) / per_row;
    return (keys + WA_TILE - 1) / WA_TILE * WA_TILE;   /* whole tiles of either kernel */
}

extern "C" size_t v4_attention_scratch_floats(int H, int hd, int rows, int max_keys)
{
    if (hd != FA_HD || H > FA_H || H < 1) return 0;
    const int n_splits = (max_keys + FA_SPLIT - 1) / FA_SPLIT;
    return n_splits > 1 ? (size_t)rows * n_splits * FA_UNIT_FLOATS : 0;
}

/* Any H and hd, bf16 or FP8 KV rows: one block per (row, head), fp32 on the CUDA cores.
 * dynamic shared memory: q fp32 [hd], scores [max_keys], key row pointers [max_keys] */
__global__ void __launch_bounds__(ATT_THREADS) k_attention_generic(v4_step s, v4_arena ar, size_t ring_off, int W,
                                                           size_t page_off, int ratio, const int32_t *sel, int topk,
                                                           const uint16_t *q, const uint8_t *kv, int kv8, int H,
                                                           int hd, float scale, const float *sink, int max_keys,
                                                           int rope_half, const double *inv_freq, uint16_t *o)
{
    pdl_enter();
    extern __shared__ float sm[];
    __shared__ float red[33];
    const int i = blockIdx.x, h = blockIdx.y;
    float *qf = sm, *sc = sm + hd;
    const uint8_t **kp = (const uint8_t **)(sc + ((max_keys + 1) & ~1));
    const int sp = s.tok_span[i], pos0 = s.span_pos0[sp], row0 = s.span_row0[sp], nope = hd - 2 * rope_half;
    int n_win, pw0;
    const int nk = att_key_count(s, i, W, ratio, topk, max_keys, &n_win, &pw0);
    const uint8_t *ring = ar.slots + (size_t)s.span_slot[sp] * ar.slot_bytes + ring_off;
    for (int k = threadIdx.x; k < hd; k += blockDim.x) qf[k] = bf2f(q[((size_t)i * H + h) * hd + k]);
    const int32_t *seli = ratio == 4 ? sel + (size_t)i * topk : nullptr;
    const size_t rb = v4_kv_row_bytes(hd, rope_half, kv8);
    for (int kk = threadIdx.x; kk < nk; kk += blockDim.x)
        kp[kk] = att_key(s, ar, ring, kv, rb, W, pos0, row0, pw0, n_win, nk, kk, ratio, seli, page_off, sp);
    __syncthreads();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int kk = wid; kk < nk; kk += nw) {
        const uint8_t *k = kp[kk];
        float dot = 0.0f;
        if (k)
            for (int d = lane; d < hd; d += 32) dot += qf[d] * v4_kv_val(k, d, nope, rope_half, kv8);
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
    uint16_t *oh = o + ((size_t)i * H + h) * hd;
    for (int d = 2 * threadIdx.x; d < hd; d += 2 * blockDim.x) {   /* hd is even */
        float a = 0.0f, b = 0.0f;
        for (int kk = 0; kk < nk; kk++)
            if (kp[kk]) {
                a += sc[kk] * v4_kv_val(kp[kk], d, nope, rope_half, kv8);
                b += sc[kk] * v4_kv_val(kp[kk], d + 1, nope, rope_half, kv8);
            }
        att_store_pair(oh, d, a * inv, b * inv, s.tok_pos[i], hd, rope_half, inv_freq);
    }
}

extern "C" cudaError_t v4_attention(const v4_step *s, const v4_arena *a, size_t ring_off, int W, size_t page_off,
                                    int ratio, const int32_t *sel, int topk, const uint16_t *q, const void *kv_rows,
                                    int kv8, int H, int hd, float scale, const float *sink, int max_keys,
                                    float *scratch, size_t scratch_floats, int rope_half, const double *inv_freq,
                                    int split_keys, uint16_t *o, cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    if (kv8 && !v4_kv8_ok(hd, rope_half)) return cudaErrorInvalidValue;
    const uint8_t *kv = (const uint8_t *)kv_rows;
    signed char use = 0;   /* the tensor-core kernel for V4's shape: 1 wgmma, -1 mma.sync */
    if (hd == FA_HD && H <= FA_H && H >= 1) {
        /* compute capability 9.0: the wgmma kernel; elsewhere the mma.sync one */
        static signed char wgs[DEV_FLAG_MAX];   /* per device: 0 unknown, 1 wgmma, -1 mma.sync; limits raised */
        signed char *wgf = (signed char *)dev_flag((unsigned char *)wgs);
        use = wgf ? *wgf : 0;
        if (!use) {
            int dev, major;
            cudaError_t e = cudaGetDevice(&dev);
            if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
            if (e != cudaSuccess) return e;
            use = major == 9 ? 1 : -1;
            if (use > 0) {
                e = cudaFuncSetAttribute(k_attention_wg<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)(sizeof(WaSmem<false>) + 1024));
                if (e == cudaSuccess)
                    e = cudaFuncSetAttribute(k_attention_wg<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)(sizeof(WaSmem<true>) + 1024));
            } else {
                e = cudaFuncSetAttribute(k_attention_mma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)sizeof(FaSmem));
            }
            if (e != cudaSuccess) return e;
            if (wgf) *wgf = use;
        }
        /* FP8 KV rows on the tensor cores: the wgmma kernel at V4's rotated width; other FP8 shapes take the CUDA
         * cores */
        if (kv8 && (use < 0 || rope_half != WA_KV8_HALF)) use = 0;
    }
    if (use) {
        auto *kern = use < 0 ? k_attention_mma : kv8 ? k_attention_wg<true> : k_attention_wg<false>;
        const size_t wg_smem = (kv8 ? sizeof(WaSmem<true>) : sizeof(WaSmem<false>)) + 1024;   /* base aligned to 1 KB */
        const size_t smem = use < 0 ? sizeof(FaSmem) : wg_smem;
        if (split_keys <= 0) split_keys = FA_SPLIT;
        if (split_keys % (use > 0 ? WA_TILE : FA_TILE)) return cudaErrorInvalidValue;
        const int n_splits = (max_keys + split_keys - 1) / split_keys;
        if (n_splits <= 1) {
            return moe_launch(kern, dim3(s->n), dim3(FA_THREADS), smem, st, *s, *a, ring_off, W, page_off, ratio, sel,
                             topk, q, kv, H, scale, sink, max_keys, max_keys, 1, 0, (float *)nullptr, rope_half,
                             inv_freq, o);
        }
        const size_t rows = scratch_floats / ((size_t)n_splits * FA_UNIT_FLOATS);
        if (rows < 1) return cudaErrorInvalidValue;
        for (int r0 = 0; r0 < s->n; r0 += (int)rows) {
            const int nr = s->n - r0 < (int)rows ? s->n - r0 : (int)rows;
            cudaError_t e = moe_launch(kern, dim3(nr * n_splits), dim3(FA_THREADS), smem, st, *s, *a, ring_off, W,
                                      page_off, ratio, sel, topk, q, kv, H, scale, sink, max_keys, split_keys,
                                      n_splits, r0, scratch, rope_half, inv_freq, o);
            if (e == cudaSuccess)
                e = moe_launch(k_attention_combine, dim3(nr, H), dim3(128), (3 * n_splits + 1) * sizeof(float), st,
                              s->tok_pos, r0, n_splits, H, (const float *)scratch, sink, rope_half, inv_freq, o);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    const size_t smem = (size_t)hd * sizeof(float) + (size_t)((max_keys + 1) & ~1) * sizeof(float) +
                        (size_t)max_keys * sizeof(void *);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_attention_generic, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return moe_launch(k_attention_generic, dim3(s->n, H), dim3(ATT_THREADS), smem, st, *s, *a, ring_off, W, page_off, ratio,
                     sel, topk, q, kv, kv8, H, hd, scale, sink, max_keys, rope_half, inv_freq, o);
}

/* row_bytes / 4 words a row */
__global__ void k_ring_store(v4_step s, v4_arena ar, size_t ring_off, int W, const uint32_t *kv, int words)
{
    pdl_enter();
    const int i = blockIdx.x, sp = s.tok_span[i], t = s.tok_pos[i];
    if (t < s.span_pos0[sp] + s.span_n[sp] - W) return;
    uint32_t *ring = (uint32_t *)(ar.slots + (size_t)s.span_slot[sp] * ar.slot_bytes + ring_off) + (size_t)(t % W) * words;
    for (int d = threadIdx.x; d < words; d += blockDim.x) ring[d] = kv[(size_t)i * words + d];
}

extern "C" cudaError_t v4_ring_store(const v4_step *s, const v4_arena *a, size_t ring_off, int W, const void *kv,
                                     size_t row_bytes, cudaStream_t st)
{
    if (s->n <= 0) return cudaSuccess;
    if (row_bytes % 4 || ring_off % 4) return cudaErrorInvalidValue;
    return moe_launch(k_ring_store, dim3(s->n), dim3(128), 0, st, *s, *a, ring_off, W, (const uint32_t *)kv,
                      (int)(row_bytes / 4));
}
