/* moe_router_dev.cuh — device building blocks of the router (moe_router.cu): one token's
 * scores + top-k + weights by a warp, and the per-expert lists built by one block.
 */
#ifndef SLUICE_MOE_ROUTER_DEV_CUH
#define SLUICE_MOE_ROUTER_DEV_CUH

#include <stdint.h>
#include <math.h>
#include "moe_kernels.h"
#include "common/moe_trace.cuh"

#define RT_MAXPL 16    /* experts per lane in top-k: E <= 512 */


/* acc[j] += the 8 gate values w . token j's 8 inputs at xk + j * kn (bf16), for j < nt <= TOK. */
template <int TOK>
__device__ __forceinline__ void router_logits_step(const float w[8], const uint16_t *xk, int kn, int nt,
                                                   float acc[TOK])
{
#pragma unroll
    for (int j = 0; j < TOK; j++) {
        if (j < nt) {
            const uint4 v = *(const uint4 *)(xk + (size_t)j * kn);
            const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int h = 0; h < 4; h++) {
                acc[j] = fmaf(__uint_as_float(u[h] << 16), w[2 * h], acc[j]);
                acc[j] = fmaf(__uint_as_float(u[h] & 0xffff0000u), w[2 * h + 1], acc[j]);
            }
        }
    }
}

/* The warp's partial sums added by a fixed shuffle tree (deterministic); the sum in every lane. */
template <int TOK>
__device__ __forceinline__ void router_logits_reduce(float acc[TOK])
{
#pragma unroll
    for (int j = 0; j < TOK; j++)
        for (int o = 16; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
}

/* One warp: logits of one expert for nt <= TOK tokens over kn inputs; g: the expert's gate row at the
 * first input, xt: the tokens' inputs (bf16, [nt][kn], shared memory). Lanes stride over K with 16-byte
 * loads (all independent), then a fixed shuffle tree: deterministic. acc: the sums, in every lane. */
template <int TOK>
__device__ __forceinline__ void router_logits_warp(const uint16_t *xt, const float *g, int kn, int nt, int lane,
                                                   float acc[TOK])
{
#pragma unroll
    for (int j = 0; j < TOK; j++) acc[j] = 0.f;
#pragma unroll 8
    for (int k = lane * 8; k < kn; k += 256) {
        const float4 w0 = __ldg((const float4 *)(g + k)), w1 = __ldg((const float4 *)(g + k + 4));
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        router_logits_step<TOK>(w, xt + k, kn, nt, acc);
    }
    router_logits_reduce<TOK>(acc);
}

/* (v, e) beats (v2, e2): higher value, equal values -> lower index */
__device__ __forceinline__ bool rt_better(float v, int e, float v2, int e2)
{
    return v > v2 || (v == v2 && e < e2);
}

/* Order-preserving unsigned key of a float (larger float -> larger key; -0 as +0, so equal floats get
 * equal keys as rt_better sees them) */
__device__ __forceinline__ unsigned rt_key(float v)
{
    const unsigned b = __float_as_uint(v == 0.f ? 0.f : v);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

/* One level of the per-lane argmax tree: slot i keeps the better of i and i + W, and its score (so the
 * winner's score is the winning lane's slot 0, not picked out of sc[] after the warp's reductions by PL
 * sequential multiply-adds (9)). */
template <int W, int PL>
__device__ __forceinline__ void rt_tree_level(float v[PL], int id[PL], float s[PL])
{
#pragma unroll
    for (int i = 0; i < W; i++) {
        const bool b = rt_better(v[i + W], id[i + W], v[i], id[i]);
        v[i] = b ? v[i + W] : v[i];
        id[i] = b ? id[i + W] : id[i];
        s[i] = b ? s[i + W] : s[i];
    }
}

/* The token's selection (lane k < topk holds the k-th expert and its gathered score) as indices and weights:
 * normalised to sum 1 (not for softmax), times route_scale; the sum by a fixed shuffle tree. */
__device__ __forceinline__ void router_topk_write(int my_e, float my_w, int t, int lane, int topk, int func,
                                                  float route_scale, int32_t *idx, float *wout)
{
    float ws = lane < topk ? my_w : 0.f;
    for (int o = 16; o > 0; o >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, o);
    if (lane < topk) {
        float w = my_w;
        if (func != MOE_SCORE_SOFTMAX) w = w / ws;
        idx[(size_t)t * topk + lane] = my_e;
        wout[(size_t)t * topk + lane] = w * route_scale;
    }
}

/* Scores, selection and weights of token t by one whole warp. PL: experts per lane (E <= 32 * PL). */
template <int PL = RT_MAXPL>
__device__ __forceinline__ void router_topk_token(const float *part, int ksplit, int T, int t, int lane, int E,
                                                  int topk, int func, const float *bias, const int32_t *tid2eid,
                                                  const int32_t *token_ids, float route_scale, int32_t *idx,
                                                  float *wout)
{
    /* every load is issued before any is used (a runtime-length loop per element had serialised
     * them into ~30 L2 round trips per warp, ~20 us) */
    float lg[PL], sc[PL], sel[PL], bb[PL];
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        lg[i] = e < E ? __ldcg(part + (size_t)t * E + e) : -INFINITY;
        bb[i] = bias && e < E ? __ldg(bias + e) : 0.f;
    }
    {   /* parts 1..3 loaded together (a runtime loop would take one L2 round trip per part), then added in
         * order ((p0 + p1) + p2) + p3; more parts (never used by the callers) in a plain loop */
        float pp[3][PL];
#pragma unroll
        for (int s = 1; s < 4; s++)
#pragma unroll
            for (int i = 0; i < PL; i++)
                pp[s - 1][i] = s < ksplit && lane + 32 * i < E ? __ldcg(part + ((size_t)s * T + t) * E + lane + 32 * i) : 0.f;
#pragma unroll
        for (int s = 1; s < 4; s++)
#pragma unroll
            for (int i = 0; i < PL; i++)
                if (s < ksplit) lg[i] += pp[s - 1][i];
        for (int s = 4; s < ksplit; s++)
#pragma unroll
            for (int i = 0; i < PL; i++)
                if (lane + 32 * i < E) lg[i] += __ldcg(part + ((size_t)s * T + t) * E + lane + 32 * i);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < PL; i++) mx = fmaxf(mx, lg[i]);
    float sum = 0.f;
    if (func == MOE_SCORE_SOFTMAX) {
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
        for (int i = 0; i < PL; i++) sum += (lane + 32 * i < E) ? expf(lg[i] - mx) : 0.f;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        const float l = lg[i];
        float s;
        if (func == MOE_SCORE_SOFTMAX) s = expf(l - mx) / sum;
        else if (func == MOE_SCORE_SIGMOID) s = 1.f / (1.f + expf(-l));
        else s = sqrtf(l > 20.f ? l : log1pf(expf(l)));   /* torch softplus, threshold 20 */
        sc[i] = e < E ? s : 0.f;
        sel[i] = e < E ? s + bb[i] : -INFINITY;
    }
    int my_e = -1;
    float my_w = 0.f;
    if (tid2eid) {
        const int tok = token_ids ? token_ids[t] : t;
        for (int k = 0; k < topk; k++) {
            const int e = tid2eid[(size_t)tok * topk + k];
            float v = 0.f;   /* sc[e >> 5] as an exact multiply-add select (a conditional select becomes an indexed
                                read, which puts sc[] in local memory) */
#pragma unroll
            for (int i = 0; i < PL; i++) v = fmaf(sc[i], e >= 0 && (e >> 5) == i ? 1.f : 0.f, v);
            v = __shfl_sync(0xffffffffu, v, e & 31);
            if (lane == k) { my_e = e; my_w = v; }
        }
    } else {
        unsigned taken = 0;   /* bit i: expert lane + 32 i already picked */
        for (int k = 0; k < topk; k++) {
            /* the lane's best by a tree (not a PL-long chain); invalid / taken slots are -inf and lose to every
             * real score (scores are finite) */
            float v[PL], s[PL];
            int id[PL];
#pragma unroll
            for (int i = 0; i < PL; i++) {
                id[i] = lane + 32 * i;
                v[i] = id[i] < E && !(taken >> i & 1u) ? sel[i] : -INFINITY;
                s[i] = sc[i];
            }
            if (PL >= 16) rt_tree_level<PL / 2, PL>(v, id, s);
            if (PL >= 8) rt_tree_level<4, PL>(v, id, s);
            rt_tree_level<2, PL>(v, id, s);
            rt_tree_level<1, PL>(v, id, s);
            /* the warp's best: the largest value by one integer max over order-preserving keys, then the
             * lowest index among the lanes that hold it by one integer min: the same winner as rt_better
             * (higher value, equal values -> lower index); two warp reductions instead of the 5-level
             * shuffle tree (A/B: equal within 1 us) */
            const unsigned key = rt_key(v[0]), bk = __reduce_max_sync(0xffffffffu, key);
            const int be = (int)__reduce_min_sync(0xffffffffu, key == bk ? (unsigned)id[0] : 0xffffffffu);
            const float bs = __shfl_sync(0xffffffffu, s[0], be & 31);   /* the winner's score */
            if ((be & 31) == lane) taken |= 1u << (be >> 5);
            if (lane == k) { my_e = be; my_w = bs; }
        }
    }
    router_topk_write(my_e, my_w, t, lane, topk, func, route_scale, idx, wout);
}

/* ---- one token's top-k over RT_GROUP warps (E <= 32 * RT_GROUP: one expert per lane), for the smallest
 * batches, where the one-warp top-k above leaves the block's other warps idle and its chain of 8 scores per lane
 * and 6 selection rounds over 8-slot trees is the router's critical path (`sluice-bench moe`). Phase 1 (every warp of
 * the group): the scores of its 32 experts and its own top-k by the same rule (higher sel, equal -> lower index),
 * written to shared memory as (key, expert, score); phase 2, after a block barrier (the caller's), by the group's
 * first warp: the top-k of the group's RT_GROUP x topk candidates. The global top-k is inside the union of the
 * warps' top-k, and keys order like rt_better, so the experts, the order and the weights are those of
 * router_topk_token (same score formula, same gathered score, same sum). Not for softmax scores (they need the
 * whole row's max and sum) or hash routing; topk <= RT_GROUP_MAXK. */
#define RT_GROUP 8
#define RT_GROUP_MAXK 8

/* Whether the top-k + lists launch (nwarps warps) takes the grouped top-k: T <= grp tokens, RT_GROUP warps each */
__host__ __device__ __forceinline__ bool moe_topk_grouped(int T, int E, int topk, int func, const int32_t *tid2eid, int grp,
                                                          int nwarps)
{
    return T <= grp && T * RT_GROUP <= nwarps && E <= 32 * RT_GROUP && topk <= RT_GROUP_MAXK &&
           func != MOE_SCORE_SOFTMAX && !tid2eid;
}

/* phase 1 by warp gw of token t's group; cand: the token's RT_GROUP x RT_GROUP_MAXK x 3 words */
__device__ __forceinline__ void router_topk_group_local(const float *part, int ksplit, int T, int t, int gw, int lane,
                                                        int E, int topk, int func, const float *bias, unsigned *cand)
{
    const int e = lane + 32 * gw;
    const bool ok = e < E;
    float pp[4];
#pragma unroll
    for (int s = 0; s < 4; s++) pp[s] = ok && s < ksplit ? __ldcg(part + ((size_t)s * T + t) * E + e) : 0.f;
    const float bb = bias && ok ? __ldg(bias + e) : 0.f;
    float l = ok ? pp[0] : -INFINITY;
#pragma unroll
    for (int s = 1; s < 4; s++)
        if (s < ksplit) l += pp[s];   /* ((p0 + p1) + p2) + p3, as router_topk_token */
    for (int s = 4; s < ksplit; s++)
        if (ok) l += __ldcg(part + ((size_t)s * T + t) * E + e);
    float sc;   /* router_topk_token's formulas (not softmax: moe_topk_grouped) */
    if (func == MOE_SCORE_SIGMOID) sc = 1.f / (1.f + expf(-l));
    else sc = sqrtf(l > 20.f ? l : log1pf(expf(l)));   /* torch softplus, threshold 20 */
    sc = ok ? sc : 0.f;
    const float sel = ok ? sc + bb : -INFINITY;
    bool taken = false;
    for (int k = 0; k < topk; k++) {
        const unsigned key = rt_key(taken ? -INFINITY : sel), bk = __reduce_max_sync(0xffffffffu, key);
        const unsigned be = __reduce_min_sync(0xffffffffu, key == bk ? (unsigned)e : 0xffffffffu);
        const float bs = __shfl_sync(0xffffffffu, sc, be & 31);
        if ((unsigned)e == be) taken = true;
        if (lane == 0) {
            unsigned *c = cand + (gw * RT_GROUP_MAXK + k) * 3;
            c[0] = bk;
            c[1] = be;
            c[2] = __float_as_uint(bs);
        }
    }
}

/* phase 2 by the group's first warp: the token's top-k of the candidates, its weights, idx / wout */
__device__ __forceinline__ void router_topk_group_merge(const unsigned *cand, int t, int lane, int topk, int func,
                                                        float route_scale, int32_t *idx, float *wout)
{
    unsigned key[2], id[2];
    float sc[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {   /* candidate c = lane + 32 h: warp c / topk's (c % topk)-th */
        const int c = lane + 32 * h, w = c / topk, k = c - w * topk;
        const bool ok = w < RT_GROUP;
        const unsigned *p = cand + (w * RT_GROUP_MAXK + k) * 3;
        key[h] = ok ? p[0] : 0u;
        id[h] = ok ? p[1] : 0xffffffffu;
        sc[h] = ok ? __uint_as_float(p[2]) : 0.f;
    }
    int my_e = -1;
    float my_w = 0.f;
    for (int k = 0; k < topk; k++) {
        /* the lane's better candidate (higher key, equal keys -> lower expert) */
        const bool b1 = key[1] > key[0] || (key[1] == key[0] && id[1] < id[0]);
        const unsigned lk = b1 ? key[1] : key[0], li = b1 ? id[1] : id[0];
        const float ls = b1 ? sc[1] : sc[0];
        const unsigned bk = __reduce_max_sync(0xffffffffu, lk);
        const unsigned be = __reduce_min_sync(0xffffffffu, lk == bk ? li : 0xffffffffu);
        const int src = __ffs(__ballot_sync(0xffffffffu, lk == bk && li == be)) - 1;
        const float bs = __shfl_sync(0xffffffffu, ls, src);
        if (lane == src) {   /* taken: below every real key (rt_key of any finite value is > 0) */
            if (b1) key[1] = 0u, id[1] = 0xffffffffu;
            else key[0] = 0u, id[0] = 0xffffffffu;
        }
        if (lane == k) { my_e = (int)be; my_w = bs; }
    }
    router_topk_write(my_e, my_w, t, lane, topk, func, route_scale, idx, wout);
}

/* Exclusive scan of n ints in smem by one warp; returns the total. */
__device__ static int warp_scan(int *v, int n, int lane)
{
    int carry = 0;
    for (int base = 0; base < n; base += 32) {
        const int i = base + lane;
        const int x = i < n ? v[i] : 0;
        int inc = x;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += y;
        }
        if (i < n) v[i] = carry + inc - x;
        carry += __shfl_sync(0xffffffffu, inc, 31);
    }
    return carry;
}

/* Exclusive scan of n ints in smem by one warp, each lane a contiguous run of ceil(n / 32) (one shuffle scan instead
 * of one per 32 entries); returns the total. */
__device__ static int warp_scan_runs(int *v, int n, int lane)
{
    const int per = (n + 31) / 32, b = min(lane * per, n), e = min(b + per, n);
    int s = 0;
#pragma unroll 4
    for (int i = b; i < e; i++) s += v[i];
    int inc = s;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    int run = inc - s;
#pragma unroll 4
    for (int i = b; i < e; i++) {
        const int x = v[i];
        v[i] = run;
        run += x;
    }
    return __shfl_sync(0xffffffffu, inc, 31);
}

/* Lists body, run by every thread of one block. smem: cnt[E+1], fill[E+1], scan arrays 3 x (E+2).
 * U > 0 (moe_build_lists runs): each thread loads its first U pairs at once and keeps them in registers for both
 * passes (the strided loop of loads and shared-memory atomics is one L2 round trip per step), and the scans take
 * warp_scan_runs. */
template <int U = 0>
__device__ __forceinline__ void build_lists_block(int *sm, const int32_t *idx, const float *w, int T, int E, int topk,
                                                  int has_shared, int rg_gu, int rg_dn, int tok_chunk, int32_t *off,
                                                  int32_t *pair_tok, float *pair_w, int32_t *inv, int32_t *items_gu,
                                                  int32_t *items_dn)
{
    constexpr int UR = U > 0 ? U : 1;
    const int nE = E + (has_shared ? 1 : 0);
    int *cnt = sm, *fill = sm + (E + 2), *so = sm + 2 * (E + 2), *sg = sm + 3 * (E + 2), *sd = sm + 4 * (E + 2);
    const int P = T * topk, i0 = U * (int)blockDim.x;   /* pairs below i0: in registers */
    int re[UR];
    float rw[UR];
    if (U > 0) {
#pragma unroll
        for (int u = 0; u < UR; u++) {
            const int i = threadIdx.x + u * blockDim.x;
            re[u] = i < P ? idx[i] : -1;
            rw[u] = i < P ? w[i] : 0.f;
        }
    }
    for (int i = threadIdx.x; i < E + 2; i += blockDim.x) cnt[i] = 0, fill[i] = 0;
    __syncthreads();
    if (U > 0) {
#pragma unroll
        for (int u = 0; u < UR; u++)
            if (re[u] >= 0 && re[u] < E) atomicAdd(&cnt[re[u]], 1);
    }
    for (int i = i0 + threadIdx.x; i < P; i += blockDim.x) {
        const int e = idx[i];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (has_shared && threadIdx.x == 0) cnt[E] = T;
    __syncthreads();
    for (int i = threadIdx.x; i < nE + 1; i += blockDim.x) {
        const int c = i < nE ? cnt[i] : 0, ch = (c + tok_chunk - 1) / tok_chunk;
        so[i] = c;
        /* the shared expert's items are single 16-row tiles whose K the block's 4 warps split */
        const int ks = (has_shared && i == E) ? MOE_WARPS : 1;
        sg[i] = ch * rg_gu * ks;
        sd[i] = ch * rg_dn * ks;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto scan = U > 0 ? warp_scan_runs : warp_scan;
    if (warp == 0) scan(so, nE + 1, lane);
    if (warp == 1) scan(sg, nE + 1, lane);
    if (warp == 2) scan(sd, nE + 1, lane);
    __syncthreads();
    for (int i = threadIdx.x; i < nE + 1; i += blockDim.x) {
        off[i] = so[i];
        items_gu[i] = sg[i];
        items_dn[i] = sd[i];
    }
    if (U > 0) {
#pragma unroll
        for (int u = 0; u < UR; u++) {
            const int i = threadIdx.x + u * blockDim.x, e = re[u];
            if (i >= P) continue;
            if (e < 0 || e >= E) { inv[i] = -1; continue; }
            const int pos = so[e] + atomicAdd(&fill[e], 1);
            pair_tok[pos] = i / topk;
            pair_w[pos] = rw[u];
            inv[i] = pos;
        }
    }
    for (int i = i0 + threadIdx.x; i < P; i += blockDim.x) {
        const int e = idx[i];
        if (e < 0 || e >= E) { inv[i] = -1; continue; }
        const int pos = so[e] + atomicAdd(&fill[e], 1);
        pair_tok[pos] = i / topk;
        pair_w[pos] = w[i];
        inv[i] = pos;
    }
    if (has_shared)
        for (int t = threadIdx.x; t < T; t += blockDim.x) {
            pair_tok[so[E] + t] = t;
            pair_w[so[E] + t] = 1.f;
        }
}

#endif
