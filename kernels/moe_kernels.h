/* moe_kernels.h — launchers for the MoE decode kernels (kernels/sm90, kernels/sm120), callable from C.
 *
 * Contract: every launcher only enqueues work on `st` (no host sync, no allocation) and returns
 * the cudaError_t of the launch (cudaSuccess or the launch error). Pointers are device pointers.
 * Shapes the expert kernels accept: hidden and inter multiples of 128 (V4: 4096 / 2048 for Flash).
 *
 * Repacked expert layout ("sluice fp4 v1", written by moe_repack_fp4, read by moe_gate_up / moe_down):
 *   A matrix W [N, K] (N = out, K = in) is cut into chunks of 16 rows x 128 inputs. A chunk is
 *   1024 bytes of FP4 codes + the chunk's scale codes (128 bytes NVFP4: 16 rows x 8 blocks of 16,
 *   as [g][q>>1][8 codes]; 64 bytes MXFP4: 16 rows x 4 blocks of 32, as [g][8 codes], so each lane
 *   reads its 8 codes (rows g, g+8 x 4 blocks; byte order moe_fp4_scale_byte) in one 8-byte load). Chunk (r, c, m)
 *   sits at ((r * K/128 + c) * NM + m)
 *   * chunk_bytes, where NM = 2 for the fused gate/up weight (m = 0 gate w1, 1 up w3) and 1 for w2.
 *   Inside a chunk, lane t = 4g+q of the warp that owns the 16 rows loads 16 bytes at t*16 and
 *   512 + t*16: exactly its mma.m16n8k16 A fragments (rows g, g+8) for 8 k-steps, with the inputs
 *   permuted so that the matching activation fragments are one 16-byte shared-memory load
 *   (lane q covers inputs 8q..8q+7 of every 32). Inside each 32-bit word the 8 nibbles are placed
 *   so that a rotate (or a multiply) and a mask drop them into bf16 bit positions (moe_fp4_common.cuh).
 *   Scale codes are the block scales re-encoded as unsigned E5M3 relative to the tensor's smallest
 *   exponent (exact for every E4M3 and for E8M0 within 32 binades); the rest of the scale, with
 *   NVFP4's weight_scale_2, is one fp32 multiplier per tensor applied to the accumulator.
 * FP8 shared expert ("sluice fp8 v1"): chunks of 16 rows x 128 inputs, 2048 bytes, lane t loads
 *   t*16 + 512*j (j = 0..3), same input permutation; block scales stay fp32 [N/128][K/128].
 */
#ifndef SLUICE_MOE_KERNELS_H
#define SLUICE_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MOE_FP4_NVFP4 = 0, MOE_FP4_MXFP4 = 1 };
enum { MOE_SCORE_SQRTSOFTPLUS = 0, MOE_SCORE_SOFTMAX = 1, MOE_SCORE_SIGMOID = 2 };

#define MOE_CHUNK_K 128           /* inputs per chunk */
#define MOE_TILE_ROWS 16          /* rows per warp (mma M) */
#define MOE_TOK_CHUNK 8           /* tokens per work item (mma N) */
#define MOE_WARPS 4               /* warps per block: one block covers 64 rows */
#define MOE_ROWS_PER_ITEM (MOE_TILE_ROWS * MOE_WARPS)
#define MOE_FP8_CHUNK_BYTES 2048

#ifdef __CUDACC__
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif
/* n-tiles of 8 tokens per work item for the shared expert (T tokens): 2 (16 tokens sharing one
 * dequantised weight fragment) from T >= 256, else 1. Routed experts choose
 * on the GPU since > 8 tokens -> 2 tiles, else 1 (moe_gate_up / moe_down; > tok1_max). */
static inline MOE_HD int moe_tok_tiles(int T) { return T >= 256 ? 2 : 1; }
static inline MOE_HD size_t moe_fp4_chunk_bytes(int fmt) { return 1024 + (fmt == MOE_FP4_NVFP4 ? 128 : 64); }
/* bytes of one repacked matrix [n, k] (NM matrices interleaved: multiply by NM) */
static inline MOE_HD size_t moe_fp4_matrix_bytes(int fmt, int n, int k)
{
    return (size_t)(n / 16) * (size_t)(k / 128) * moe_fp4_chunk_bytes(fmt);
}

/* ---- load time (moe_repack.cu) */
/* Smallest unbiased exponent among the nonzero block scales -> *emin_dev (int, init by caller to
 * INT32_MAX). scales: E4M3 (NVFP4) or E8M0 (MXFP4) bytes, n_scales of them. */
cudaError_t moe_scale_emin(const uint8_t *scales, size_t n_scales, int fmt, int *emin_dev, cudaStream_t st);
/* Repack one FP4 matrix (checkpoint layout: q [n][k/2], scales [n][k/sb]) into slot m of NM at dst.
 * Counts scales that had to be clamped (more than 31 binades above emin) into *clamped_dev. */
/* The bf16 exponent bias F0 of the repacked scale codes: post = 2^(253 + emin - F0) * weight_scale_2. */
int moe_repack_f0(void);
cudaError_t moe_repack_fp4(const uint8_t *q, const uint8_t *scales, int fmt, int n, int k, int emin,
                           uint8_t *dst, int nm, int m, int *clamped_dev, cudaStream_t st);
/* Repack one FP8 E4M3 matrix [n][k] into slot m of NM at dst. */
cudaError_t moe_repack_fp8(const uint8_t *w, int n, int k, uint8_t *dst, int nm, int m, cudaStream_t st);
/* FP8 matrix w [n][k] (e4m3) -> bf16 rows of dst [n * nm][k]: row r to dst row r * nm + m (nm 2: the gate/up
 * GEMM's interleaved w1 / w3 rows); each weight its e4m3 value (exact), times its block scale (s [n/128][k/128] on the
 * device, rounded to bf16) where s is not NULL: moe_shared_gemms' fold, for power-of-two scales (exact then) */
cudaError_t moe_shared_to_bf16(const uint8_t *w, const float *s, int n, int k, uint16_t *dst, int nm, int m,
                               cudaStream_t st);
/* NVFP4 quantiser (ModelOpt rounding): w [n][k] fp32 -> q [n][k/2], scale E4M3 [n][k/16], scale2.
 * work: 1 float of device scratch. */
cudaError_t moe_quantize_nvfp4(const float *w, int n, int k, uint8_t *q, uint8_t *scale, float *scale2,
                               cudaStream_t st);

/* ---- router (moe_router.cu) */
/* logits[t][e] = sum_k x[t][k] * gate[e][k]; x bf16 [T][H], gate fp32 [E][H]; H % 256 == 0.
 * Token tiles of 16 (16 warps per block) from T >= tile16_min_t (H <= 4096), else of 8 (4 warps per
 * block up to 16 tokens, 8 above). ksplit > 1: K in that many parts (H % (256 * ksplit) == 0), part s
 * written to logits + s * T * E ([ksplit][T][E]: give moe_router_topk* the same ksplit). */
/* L2 prefetch: up to three byte ranges a kernel asks L2 to fetch when it starts, split over its
 * blocks (cp.async.bulk.prefetch.L2: a hint, no data moves to the SM, no completion to wait for). p[i]
 * NULL: unused; n[i] is rounded down to 16 bytes; last: with the evict_last policy, else evict_normal. */
typedef struct {
    const void *p[3];
    size_t n[3];
    int last;
} moe_l2_ranges;
/* pf: ranges the logits launch prefetches (the weights of later launches in the layer), or NULL. */
cudaError_t moe_router_logits(const uint16_t *x, const float *gate, int T, int H, int E, float *logits,
                              int tile16_min_t, int ksplit, const moe_l2_ranges *pf, cudaStream_t st);
/* The same on tensor cores: gate_tc is the fp32 gate split into three bf16 planes hi + mid + lo
 * (exact sum), in mma fragment order: uint4 index ((et * (H / 32) + kb) * 6 + 2 * p + s) * 32 + lane
 * for expert tile et (16 experts), 32-input block kb, plane p (0 hi, 1 mid, 2 lo), k-step s; the lane
 * (g = lane / 4, q = lane % 4) holds bf16 pairs a0 = experts 16 et + g, inputs c, c + 1; a1 = expert
 * + 8, same inputs; a2 / a3 = inputs c + 2, c + 3; c = 32 kb + 8 q + 4 s. E % 16 == 0, H % 256 == 0.
 * ksplit: as moe_router_logits (moe_router_logits_tc_parts(T, H, E) picks it, <= 4). */
cudaError_t moe_router_logits_tc(const uint16_t *x, const uint16_t *gate_tc, int T, int H, int E, float *logits,
                                 int ksplit, cudaStream_t st);
/* the same with the block's n-tiles of 8 tokens given (ntt 1, 2 or 4; 0: chosen by T) and any ksplit with
 * H % (256 ksplit) == 0 (the workspace holds MOE_LOGITS_KS_MAX parts). */
cudaError_t moe_router_logits_tc_shape(const uint16_t *x, const uint16_t *gate_tc, int T, int H, int E, float *logits,
                                       int ntt, int ksplit, cudaStream_t st);
int moe_router_logits_tc_parts(int T, int H, int E);
/* Scores, top-k (or hash), weights. part: ksplit partial logit arrays [ksplit][T][E] (1 = logits).
 * idx/w [T][topk]. excl: bytes of shared memory each block reserves beyond its own, so that no block
 * of the layer's other kernels fits beside it on its SM and its warps (one per token) have the SM's issue
 * slots to themselves (0: none; at most MOE_TOPK_EXCL_MAX). grp: up to grp tokens (and without excl) each
 * token's top-k is one block of 8 warps, under moe_router_topk_lists's conditions for its grouped form. */
#define MOE_TOPK_EXCL_MAX (200 * 1024)
cudaError_t moe_router_topk(const float *part, int ksplit, int T, int E, int topk, int score_func,
                            const float *bias, const int32_t *tid2eid, const int32_t *token_ids,
                            float route_scale, int32_t *idx, float *w, int excl, int grp, cudaStream_t st);
/* Per-expert lists. Expert E is the shared expert (all T tokens, weight 1) when has_shared.
 * tok_chunk = 8 * moe_tok_tiles(T): tokens per work item.
 * off [E+2]: pair offsets (routed pairs sorted by expert, then the shared expert's T pairs);
 * pair_tok/pair_w [T*topk + T]; inv [T*topk]: pair of (t, k), -1 for an out-of-range index;
 * items_gu/items_dn [E+2]: prefix sums of work items (token chunks x row groups) per expert.
 * runs: the pairs loaded once into registers and the scans by runs per lane (the same lists). */
cudaError_t moe_build_lists(const int32_t *idx, const float *w, int T, int E, int topk, int has_shared,
                            int rg_gu, int rg_dn, int tok_chunk, int32_t *off, int32_t *pair_tok, float *pair_w,
                            int32_t *inv, int32_t *items_gu, int32_t *items_dn, int runs, cudaStream_t st);

/* Top-k + lists in one launch (same results as moe_router_topk, then moe_build_lists)
 * for T <= MOE_FUSED_ROUTER_MAX_T: one block, a warp per token (16 warps: each takes every 16th token);
 * excl as in moe_router_topk. grp (moe_plan.topk_group): up to grp tokens each token's top-k
 * is spread over 8 warps (sqrtsoftplus / sigmoid scores, no hash routing, E <= 256, topk <= 8; same results), in a
 * block of 512 threads up to 2 tokens, of 1024 up to 4.
 * moe_plan.topk_lists picks where the layer uses it (v9: 32; 8; 4). */
#define MOE_FUSED_ROUTER_MAX_T 256
cudaError_t moe_router_topk_lists(const float *logits, int ksplit, int T, int E, int topk, int score_func, const float *bias,
                                  const int32_t *tid2eid, const int32_t *token_ids, float route_scale, int32_t *idx,
                                  float *w, int has_shared, int rg_gu, int rg_dn, int tok_chunk, int32_t *off,
                                  int32_t *pair_tok, float *pair_w, int32_t *inv, int32_t *items_gu,
                                  int32_t *items_dn, int excl, int grp, cudaStream_t st);

/* ---- experts (moe_expert.cu) */
typedef struct {
    int E, H, I, fmt, has_shared;
    const uint8_t *w13; size_t w13_stride;   /* repacked gate/up per expert */
    const uint8_t *w2;  size_t w2_stride;
    const float *post13;                      /* [E][2] */
    const float *post2;                       /* [E] */
    const uint8_t *sh_w13, *sh_w2;            /* FP8 repacked shared expert, or NULL */
    const float *sh_s13, *sh_s2;              /* fp32 block scales [2][I/128][H/128], [H/128][I/128] */
    float limit;                              /* swiglu clamp (<= 0: none) */
    int early;                                /* 1: down streams its first weights before its PDL wait
                                                 and gate/up releases it at once; 0: order */
    int down_rm;                              /* down: 16-row tiles per warp of a routed item, 1 (64-row
                                                 items) or 2 (128-row items; H % 128 == 0); */
    int overlap;                              /* with early: bit 0 gate/up, bit 1 down: the stage's 2-tile
                                                 launch starts its work without waiting for the 1-tile
                                                 launch and waits before it exits */
    unsigned *tickets;                        /* NULL: each block walks the item list with a static stride;
                                                 else MOE_TICKET_WORDS(E, max T * topk) zeroed words: the routed launches hand out
                                                 16-row tiles to warps from counters there, and the last
                                                 warp of a launch zeroes its pair again. Only with
                                                 has_shared 0 (the shared items need their block's 4 warps),
                                                 except in moe_experts_fused1 for T <= 8. */
    int dyn;                                  /* with tickets: bit NT-1 = the NT-tile launches use them */
    int nt2_first;                            /* 1: each stage launches its 2-tile kernel before its 1-tile
                                                 one (A/B; ignored with overlap) */
    int pf_dn;                                /* the 1-tile gate/up launch asks L2 for the down weights
                                                 of the first pf_dn experts (in expert order) that have
                                                 tokens, and (pf_sh_dn) the shared expert's, while it
                                                 streams its own: the down launch then reads them from L2 */
    int pf_sh_dn, pf_last;                    /* pf_last: evict_last policy (else evict_normal) */
    int sh_prio_on, sh_prio;                  /* moe_shared_experts: its launches at priority sh_prio */
    int sh_xl_min_t;                          /* , moe_shared_experts: from this many tokens (0: never) the gate/up
                                                 blocks take 8 * SH_GU_NTT_XL (64) tokens instead of 32 */
    int fuse_early;                           /* moe_experts_fused1: its fused launch releases the 2-tile down
                                                 at its start (the down's blocks then launch once every fused
                                                 block has started, and wait) instead of its end; T <= 8 (the
                                                 one launch): releases the combine right after its wait on the lists */
    int T;                                    /* tokens (set by moe_experts_fused1) */
    int ks_gu, ks_sh;                         /* , moe_experts_fused1 with T <= 8: K parts (1..MOE_PARTS_MAX,
                                                 dividing H/128) of a routed / the shared gate/up 16-row tile */
    float *part;                              /* with parts: fp32 partial sums, MOE_PARTS_MAX KB per tile of
                                                 MOE_PART_TILES(I, topk, E) tiles */
    unsigned *pcnt;                           /* their arrival counts, one word per tile, zeroed (every completed
                                                 launch leaves them zero) */
    int sh_row0;                              /* set by moe_experts_fused1: the shared expert's first row in
                                                 h and y, T * topk (its rows follow the routed pairs) */
    int early_sh;                             /* , moe_experts_fused1 with T <= 8: the warps whose first
                                                 item is a shared gate/up tile part run it before the wait
                                                 on the lists */
    int tok1_max;                             /* routed experts with up to this many tokens (8..MOE_TOK1_MAX;
                                                 below 8: 8) take the 1-tile launches, as ceil(n / 8) token
                                                 chunks that each stream and dequantise the expert's weights
                                                 (the chunks of one row group are adjacent items, so the
                                                 second read comes from L2); those with more take the 2-tile
                                                 launches. moe_tok1() reads it. Negative (T > 8
                                                 only): every routed expert with tokens takes the 2-tile
                                                 launches, and moe_gate_up / moe_down launch only those. */
    int wide_min;                             /* (X4): routed experts with more than this many tokens (0: none;
                                                 else >= 2 * MOE_TOK_CHUNK and >= tok1_max) take the wide
                                                 launches (items of 8 * MOE_NTW tokens, 64: each dequantised fragment
                                                 feeds 8 n-tiles), launched after the 2-tile ones of each stage */
    int one_launch;                           /* , moe_experts_fused1 with T <= 8: 1, the whole expert work as one
                                                 launch (the shared expert's items in it; 2: its kernel for 5
                                                 blocks per SM, grid_fused from moe_experts1_occupancy small 2); 0,
                                                 the fused 1-tile stages as from 9 tokens (no shared items) */
    int wide_early;                           /* , moe_experts_fused1: its wide gate/up right after the 2-tile gate/up
                                                 (1: before the fused launch) or after the fused launch (2) instead of
                                                 after the 2-tile down (0) */
    int sh_tile_max_t;                        /* , moe_shared_experts: up to this many tokens the gate/up's blocks take
                                                 T rounded up to 16 or 32 tokens, or 64 tokens above 48 (33-48 keep
                                                 16-token blocks): at 1-32 and 49-64 tokens one block per 64-row
                                                 group, each weight tile dequantised once, on a quarter of the SMs */
} moe_expert_args;
#define MOE_TOK1_MAX 64
#define MOE_PARTS_MAX 4
/* moe_expert_args.part's (and pcnt's) gate/up tiles: the shared expert's I / 16, then those of at most 8 * topk routed
 * experts (the T <= 8 launch) */
#define MOE_PART_TILES(I, topk, E) ((size_t)((I) / MOE_TILE_ROWS) * (1 + (size_t)(8 * (topk) < (E) ? 8 * (topk) : (E))))
/* the ticket counters, and the fused launch's done counts, one 128-byte line per key: an expert (0..E, E the
 * shared expert) or a token chunk's first pair (0..P - 1, P = max tokens x topk;) */
#define MOE_TICKET_WORDS(E, P) (32 + 32 * (((size_t)(E) > (size_t)(P) ? (size_t)(E) : (size_t)(P)) + 1))

/* h[pair][I] bf16 = w_pair * silu(min(gate, L)) * clamp(up, -L, L) for every pair.
 * Two launches (one for T <= 8): the 1-tile kernel on grid[0] blocks takes the experts with <= 8 (tok1_max)
 * tokens, the 2-tile kernel on grid[1] those with more (decided on the GPU from off[]; the shared
 * expert by moe_tok_tiles(T)); with wide_min a third, the wide kernel (64-token items) on grid[2], takes the experts
 * with more than wide_min. grid: persistent grids from moe_expert_occupancy with nt 1, 2 and 4 (the wide kernels).
 * items is not read (the kernels derive their item lists from off[]); kept for the callers. */
cudaError_t moe_gate_up(const moe_expert_args *a, const uint16_t *x, const int32_t *off,
                        const int32_t *pair_tok, const float *pair_w, const int32_t *items,
                        int T, int topk, const int grid[3], uint16_t *h, cudaStream_t st);
/* y[pair][H] fp32 = w2 . h[pair] (same two launches and grids as moe_gate_up). Each block reads its
 * item list and starts streaming its first item's weights before it waits for the previous kernel
 * (PDL), so the down weights flow while gate/up finishes. */
cudaError_t moe_down(const moe_expert_args *a, const uint16_t *h, const int32_t *off,
                     const int32_t *items, int T, int topk, const int grid[3], float *y, cudaStream_t st);
/* moe_gate_up + moe_down for T > 8 as three launches: the 2-tile gate/up, then the 1-tile gate/up
 * and down as one launch in which a down item waits only for its own token chunk's gate/up (counts in
 * tickets), then the 2-tile down (128-row items), then (wide_min) the wide gate/up and down. Needs tickets (MOE_TICKET_WORDS(E, max T * topk) zeroed words; every
 * completed launch leaves them zero), has_shared 0. For T <= 8 the one launch alone, with the
 * shared expert's items in it (has_shared), routed / shared gate/up tiles
 * split into ks_gu / ks_sh K parts (part, pcnt) and down_rm (1 or 2) 16-row tiles per down item.
 * grid_fused: resident blocks (moe_experts1_occupancy x SMs). */
cudaError_t moe_experts_fused1(const moe_expert_args *a, const uint16_t *x, const int32_t *off, const int32_t *pair_tok,
                               const float *pair_w, int T, int topk, const int grid[3], int grid_fused, uint16_t *h,
                               float *y, cudaStream_t st);
/* Blocks per SM that fused kernel reaches for T > 8 (small 0) or T <= 8 (small 1, or 2 for its 5-block form; both
 * down_rm). */
cudaError_t moe_experts1_occupancy(int fmt, int E, int small, int *blocks_per_sm);
/* The FP8 shared expert for all T tokens as its own two launches, for larger batches: gate/up
 * x -> h[T*topk + t] (swiglu), then down h[T*topk + t] -> y[T*topk + t] (the rows moe_build_lists gives
 * the shared pairs), so the routed launches run with has_shared 0. Each dequantised weight fragment
 * serves 16 tokens (T <= 64) or 32 (gate/up) / 64 (down) tokens instead of 8 or 16 in the routed
 * kernels' shared items, and the block's activation rows are staged once in shared memory for its 4
 * warps. Needs a->has_shared; same numerics as the shared items (bf16 products, fp32 accumulation, the
 * fp32 block scale applied per 128x128 chunk); every output has one owner: deterministic. */
cudaError_t moe_shared_experts(const moe_expert_args *a, const uint16_t *x, int T, int topk, uint16_t *h, float *y,
                               cudaStream_t st);
/* The same shared expert as two bf16 GEMMs (moe_shared_gemm.cuh) on b13 ([2I][H], w1 / w3 rows interleaved) and b2
 * ([H][I]) from moe_shared_to_bf16 (a gives H, I, the swiglu limit, the block scales and the launch priority); fold: the
 * scales are in b13 / b2 (power-of-two scales, moe_cuda_layer.sh_pow2), else they multiply each 128-input block's fp32
 * partial sums. Needs 2I, H multiples of 128 (as the scale blocks). With fold, H a multiple of 256, a compute
 * capability 9 device and a driver that encodes tensor maps, the GEMMs run on wgmma with their tiles moved by TMA
 * (k_shared_gemm_tma, 128 x 256 tiles), else on mma.sync (k_shared_gemm). */
cudaError_t moe_shared_gemms(const moe_expert_args *a, const uint16_t *b13, const uint16_t *b2, int fold,
                             const uint16_t *x, int T, int topk, uint16_t *h, float *y, cudaStream_t st);
/* out[t][H] = sum_k y[inv[t][k]] + ysh[t] (fixed order: deterministic); ysh: the shared expert's
 * rows [T][H] or NULL. inv_ready: inv is complete whenever this launch starts (the launch before it releases
 * its dependents only after its own wait on the lists), so it is read before the wait on that launch. */
cudaError_t moe_combine(const float *y, const int32_t *inv, const float *ysh, int T, int H, int topk, int inv_ready,
                        float *out, cudaStream_t st);
/* Sets one shared-memory carveout on every kernel of the layer (MOE_CARVEOUT, moe_expert.cu: 100 % shared
 * memory). */
cudaError_t moe_kernels_carveout(void);
/* Blocks per SM the expert kernels of nt 1 or 2 tiles, or 4: the wide ones (MOE_NTW tiles), reach (for a persistent grid). */
cudaError_t moe_expert_occupancy(int fmt, int E, int nt, int *gu_blocks_per_sm, int *dn_blocks_per_sm);

/* ---- stage timeline (bench; kernels/common/moe_trace.cuh): with buf set (2 * MOE_TR_SLOTS words:
 * per slot the earliest block start, initialise to ~0, and the latest warp end, initialise to 0;
 * %globaltimer ns), every later launch of the layer's kernels records into it; NULL turns it off. */
enum { MOE_TR_LOGITS, MOE_TR_TOPK, MOE_TR_LISTS, MOE_TR_TOPK_LISTS, MOE_TR_GU1, MOE_TR_GU2, MOE_TR_FUSED1, MOE_TR_DN1,
       MOE_TR_DN2, MOE_TR_SH_GU, MOE_TR_SH_DN, MOE_TR_COMBINE, MOE_TR_TICKET, MOE_TR_TOPK_LD, MOE_TR_GUW, MOE_TR_DNW, MOE_TR_SLOTS };
/* Slots "ticket" and "topk-ld" are never recorded; they keep the later slots' numbers. */
cudaError_t moe_trace_set(unsigned long long *buf);

/* ---- sm_120 variant (kernels/sm120/moe_w4a4_sm120.cu): W4A4 with the block-scaled FP4 MMA, weights
 * in the checkpoint's ModelOpt layout (w1 rows then w3 rows: q [2I][H/2], E4M3 scales [2I][H/16]),
 * activations quantised with input_scale. Compiled for sm_120a, never run here (no such GPU); returns
 * cudaErrorNotSupported unless the device is compute capability 12.x. Routed experts only. */
typedef struct {
    int E, H, I;
    const uint8_t *w13_q; size_t w13_q_stride;   /* per expert */
    const uint8_t *w13_s; size_t w13_s_stride;
    const float *post13;                          /* [E][2] weight_scale_2 of w1, w3 */
    float input_scale, limit;
} moe_w4a4_args;
cudaError_t moe_gate_up_w4a4_sm120(const moe_w4a4_args *a, const uint16_t *x, const int32_t *off,
                                   const int32_t *pair_tok, const float *pair_w, const int32_t *items, int grid,
                                   uint16_t *h, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
