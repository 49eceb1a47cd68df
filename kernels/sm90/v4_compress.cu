/* v4_compress.cu — the CSA / HCA compressors (V4_SPEC 2.5) with an online per-dim softmax.
 *
 * A window's entry is, per feature dim j, softmax over its slots of Z (scores) applied to C. Instead
 * of keeping the open window's rows, each window keeps (m, s, a) per dim: the running max of Z, the
 * sum of e^(Z-m) and the sum of e^(Z-m)*C, so state is O(d) whatever the ratio. HCA (ratio r != 4):
 * one accumulator over the window's r rows. CSA (ratio 4, coff 2): entry w pools the "a" halves of
 * window w-1 with the "b" halves of window w, so three accumulators: the previous window's "a"
 * (complete), the open window's "a" and "b". When window w closes ((t+1) mod r == 0) the entry is
 * the combination of its accumulators, then RMSNorm (norm_w) and RoPE at position w*r, stored bf16, or as an FP8
 * row (the indexer's keys when they are stored FP8) or an FP8 KV row (the main entries with FP8 KV): a warp a block of
 * 64 dims, its scale from the block's amax.
 *
 * One block per span; thread j owns dims j, j+blockDim.x, ...; the span's rows are folded in order,
 * so chunked prefill and token-by-token decode fold the same values in the same order.
 */
#include <math.h>

#include "common/v4_dev.cuh"

#define CMP_THREADS 256
#define CMP_DPT 4        /* dims per thread: d <= 1024 */

struct acc3 {
    float m, s, a;
};

__device__ __forceinline__ void acc_push(acc3 &q, float z, float c)
{
    if (q.s == 0.0f) {
        q.m = z; q.s = 1.0f; q.a = c;
    } else if (z > q.m) {
        const float f = expf(q.m - z);
        q.s = q.s * f + 1.0f;
        q.a = q.a * f + c;
        q.m = z;
    } else {
        const float e = expf(z - q.m);
        q.s += e;
        q.a += e * c;
    }
}

/* pooled value of the union of two accumulators (either may be empty) */
__device__ __forceinline__ float acc_pool(const acc3 &p, const acc3 &q)
{
    if (p.s == 0.0f) return q.a / q.s;
    if (q.s == 0.0f) return p.a / p.s;
    const float m = fmaxf(p.m, q.m), fp = expf(p.m - m), fq = expf(q.m - m);
    return (p.a * fp + q.a * fq) / (p.s * fp + q.s * fq);
}

__global__ void __launch_bounds__(CMP_THREADS) k_compress(v4_step s, v4_arena ar, size_t state_off, size_t page_off,
                                                          int ratio, int d, const float *C, const float *Z, int ld,
                                                          const float *ape, const float *norm_w, float eps,
                                                          int rope_half, const double *inv_freq, int entry)
{
    pdl_enter();
    __shared__ float red[33];
    __shared__ float ent[CMP_DPT * CMP_THREADS];
    const int sp = blockIdx.x, csa = ratio == 4, coff = csa ? 2 : 1, width = coff * d;
    const int row0 = s.span_row0[sp], n = s.span_n[sp], pos0 = s.span_pos0[sp];
    float *state = (float *)(ar.slots + (size_t)s.span_slot[sp] * ar.slot_bytes + state_off);
    const int groups = csa ? 3 : 1;   /* CSA: 0 prev a, 1 open a, 2 open b; HCA: 0 open */

    acc3 q[3][CMP_DPT];
#pragma unroll
    for (int u = 0; u < CMP_DPT; u++) {
        const int j = threadIdx.x + u * CMP_THREADS;
        for (int g = 0; g < 3; g++) q[g][u] = acc3{0.0f, 0.0f, 0.0f};
        if (j < d)
            for (int g = 0; g < groups; g++) {
                q[g][u].m = state[((size_t)g * 3 + 0) * d + j];
                q[g][u].s = state[((size_t)g * 3 + 1) * d + j];
                q[g][u].a = state[((size_t)g * 3 + 2) * d + j];
            }
    }
    const int r0 = d - 2 * rope_half;
    for (int k = 0; k < n; k++) {
        const long t = pos0 + k;
        const float *c = C + (size_t)(row0 + k) * ld, *z = Z + (size_t)(row0 + k) * ld;
        const float *ap = ape + (size_t)(t % ratio) * width;
#pragma unroll
        for (int u = 0; u < CMP_DPT; u++) {
            const int j = threadIdx.x + u * CMP_THREADS;
            if (j >= d) continue;
            if (csa) {
                acc_push(q[1][u], z[j] + ap[j], c[j]);
                acc_push(q[2][u], z[d + j] + ap[d + j], c[d + j]);
            } else {
                acc_push(q[0][u], z[j] + ap[j], c[j]);
            }
        }
        if ((t + 1) % ratio) continue;
        const int w = (int)(t / ratio);
        float ss = 0.0f;
#pragma unroll
        for (int u = 0; u < CMP_DPT; u++) {
            const int j = threadIdx.x + u * CMP_THREADS;
            if (j >= d) continue;
            float v;
            if (csa) {
                v = acc_pool(q[0][u], q[2][u]);
                q[0][u] = q[1][u];
                q[1][u] = acc3{0.0f, 0.0f, 0.0f};
                q[2][u] = acc3{0.0f, 0.0f, 0.0f};
            } else {
                v = q[0][u].a / q[0][u].s;
                q[0][u] = acc3{0.0f, 0.0f, 0.0f};
            }
            ent[j] = v;
            ss += v * v;
        }
        ss = block_sum(ss, red);   /* its barriers also publish ent[] */
        const float rs = rsqrtf(ss / (float)d + eps);
        const bool fp8 = entry != V4_ENTRY_BF16;
        uint16_t *out = fp8 ? nullptr : v4_entry_ptr(s, ar, page_off, sp, w, ratio, d);
        const long epos = (long)w * ratio;
        for (int p = threadIdx.x; 2 * p < d; p += blockDim.x) {
            const int j = 2 * p;
            float a = ent[j] * rs * norm_w[j], b = ent[j + 1] * rs * norm_w[j + 1];
            if (rope_half > 0 && j >= r0) {
                float cs, sn;
                v4_rope_cs(epos, inv_freq[(j - r0) >> 1], &cs, &sn);
                const float re = a, im = b;
                a = re * cs - im * sn;
                b = re * sn + im * cs;
            }
            if (fp8) {   /* the thread's own pair: no other thread reads it before the barrier below */
                ent[j] = a;
                ent[j + 1] = b;
            } else {
                out[j] = f2bf(a);
                out[j + 1] = f2bf(b);
            }
        }
        if (fp8) {
            __syncthreads();
            const int lane = threadIdx.x & 31, kv8 = entry == V4_ENTRY_KV8;
            uint8_t *sc, *codes;
            if (kv8) {   /* codes for dims < r0, the rotated dims bf16 after them, then the exponents */
                codes = v4_entry_row(s, ar, page_off, sp, w, ratio, v4_kv_row_bytes(d, rope_half, 1));
                sc = codes + r0 + 4 * rope_half;
                for (int p = threadIdx.x; 2 * p < d - r0; p += blockDim.x)
                    *(uint32_t *)(codes + r0 + 4 * p) =
                        (uint32_t)f2bf(ent[r0 + 2 * p]) | ((uint32_t)f2bf(ent[r0 + 2 * p + 1]) << 16);
            } else {
                codes = v4_fp8_entry(s, ar, page_off, sp, w, ratio, d, &sc);
            }
            for (int b = threadIdx.x >> 5; b < (kv8 ? r0 : d) / 64; b += CMP_THREADS / 32)
                fp8_store_block(ent[64 * b + 2 * lane], ent[64 * b + 2 * lane + 1], codes + 64 * b, sc + b);
        }
        __syncthreads();   /* ent[] is rewritten by the next closing window */
    }
#pragma unroll
    for (int u = 0; u < CMP_DPT; u++) {
        const int j = threadIdx.x + u * CMP_THREADS;
        if (j < d)
            for (int g = 0; g < groups; g++) {
                state[((size_t)g * 3 + 0) * d + j] = q[g][u].m;
                state[((size_t)g * 3 + 1) * d + j] = q[g][u].s;
                state[((size_t)g * 3 + 2) * d + j] = q[g][u].a;
            }
    }
}

extern "C" cudaError_t v4_compress(const v4_step *s, const v4_arena *a, size_t state_off, size_t page_off, int ratio,
                                   int d, const float *C, const float *Z, int ld, const float *ape,
                                   const float *norm_w, float eps, int rope_half, const double *inv_freq,
                                   int entry, cudaStream_t st)
{
    if (d > CMP_DPT * CMP_THREADS || d % 2 || ratio <= 0 || ld < (ratio == 4 ? 2 : 1) * d) return cudaErrorInvalidValue;
    if ((entry == V4_ENTRY_FP8_ROWS && d % 64) || (entry == V4_ENTRY_KV8 && !v4_kv8_ok(d, rope_half)) ||
        entry < V4_ENTRY_BF16 || entry > V4_ENTRY_KV8)
        return cudaErrorInvalidValue;
    if (s->n_spans <= 0) return cudaSuccess;
    return moe_launch(k_compress, dim3(s->n_spans), dim3(CMP_THREADS), 0, st, *s, *a, state_off, page_off, ratio, d, C, Z,
                     ld, ape, norm_w, eps, rope_half, inv_freq, entry);
}
