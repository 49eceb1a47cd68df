/* moe_cuda.h — one DeepSeek-V4 MoE layer on the GPU: router + routed FP4 experts + FP8 shared expert.
 *
 * Contract:
 *   - moe_cuda_layer_init allocates the layer's device weights for a shape; the set_* calls upload
 *     and repack them (load time: they may synchronise). All routed experts share one FP4 format
 *     (QT_NVFP4 ModelOpt or QT_MXFP4 DeepSeek), repacked at load into the kernels' layout
 *     (kernels/moe_kernels.h, "sluice fp4 v1"); the shared expert is QT_FP8_B128.
 *   - moe_cuda_ws_init allocates every buffer a forward of up to max_tokens needs.
 *   - moe_cuda_forward only enqueues kernels on the stream: no allocation, no host sync, so it can
 *     be captured in a CUDA graph. x: bf16 [T][hidden] (device), token_ids: int32 [T] (device;
 *     needed for hash routing, else may be NULL), out: fp32 [T][hidden] (device) =
 *     sum of the routed experts (weights from the router) + the shared expert.
 *   - Every function returns 0 or -1 after printing one line to stderr saying what failed.
 */
#ifndef SLUICE_MOE_CUDA_H
#define SLUICE_MOE_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "quant.h"

typedef struct {
    int n_experts, hidden, inter, topk;
    int score_func;          /* MOE_SCORE_* (kernels/moe_kernels.h) */
    float route_scale;       /* routed_scaling_factor */
    float swiglu_limit;      /* <= 0: no clamp */
    int hash;                /* 1: hash routing through tid2eid */
    int vocab;               /* rows of tid2eid (hash layers) */
    int has_shared;
    int fp4_fmt;             /* QT_NVFP4 or QT_MXFP4 */
    int shared_bf16;         /* v36: also keep the shared expert in bf16 (2x its 25 MB at V4-Flash) for its GEMMs
                                (moe_cuda_ws.shared_gemm_min_t); 0: they never run */
} moe_cuda_shape;

typedef struct {
    moe_cuda_shape s;
    int kfmt;                         /* MOE_FP4_* */
    uint8_t *w13, *w2;                /* repacked routed experts, expert e at + e * stride */
    size_t w13_stride, w2_stride;
    float *post13, *post2;            /* per-tensor multipliers [E][2], [E] */
    float *gate;                      /* router weight fp32 [E][hidden] */
    uint16_t *gate_tc;                /* the same as 3 bf16 planes for moe_router_logits_tc (E % 16 == 0), or NULL */
    float *bias;                      /* [E] or NULL */
    int32_t *tid2eid;                 /* [vocab][topk] or NULL */
    uint8_t *sh_w13, *sh_w2;          /* repacked FP8 shared expert */
    float *sh_s13, *sh_s2;            /* its block scales, fp32 */
    uint16_t *sh_b13, *sh_b2;         /* v36 (shape.shared_bf16): the same in bf16 for its GEMMs (moe_shared_to_bf16),
                                         or NULL; with sh_pow2 the block scales folded in (exact) */
    int sh_pow2;                      /* v25: every block scale a power of two in [2^-117, 2^7] (DeepSeek's ue8m0), so
                                         they fold into the dequantisation exactly (moe_expert_args.sh_wg_fold) */
    int clamped_scales;               /* scale codes clamped at repack (MXFP4 spanning > 32 binades) */
    size_t expert_bytes, shared_bytes;/* bytes one routed expert / the shared expert occupy */
} moe_cuda_layer;

typedef struct {
    int max_tokens, grid_gu[3], grid_dn[3];   /* persistent grids for 1, 2 and 8 (wide) token tiles per item */
    float *logits;                    /* [max][E] fp32 */
    int32_t *idx; float *w;           /* [max][topk] */
    int32_t *off, *items_gu, *items_dn;   /* [E+2] */
    int32_t *pair_tok, *inv; float *pair_w;
    uint16_t *h;                      /* [pairs][inter] bf16 (the shared expert's T rows at max*topk) */
    float *y;                         /* [pairs][hidden] (the same) */
    int early_pdl;                    /* moe_expert_args.early: 1 (default) or 0 (v10 launch order) */
    int down_rm_min_t;                /* down with 128-row items (moe_expert_args.down_rm 2) from this batch on */
    int logits16_min_t;               /* router logits in 16-token tiles from this batch on (moe_router_logits) */
    int logits_ks;                    /* router logits K parts (<= MOE_LOGITS_KS_MAX) for T <= logits_ks_max_t */
    int logits_ks_max_t;              /* v13: 16 (v11: 8) */
    int logits_tc_min_t;              /* v14: router logits on tensor cores from this batch on (needs gate_tc; v14: 32,
                                         v29: 8) */
    int nt2_overlap;                  /* moe_expert_args.overlap (v14) */
    int nt2_first;                    /* moe_expert_args.nt2_first (v15 A/B, default 0) */
    int shared_min_t;                 /* the shared expert by moe_shared_experts from this batch on (v14: 64,
                                         v15: 16, v29: 9) */
    int shared_fork;                  /* v15: those launches run on a second stream (they need only x), joined
                                         before the combine; 1: forked before the router, 2: after it (beside
                                         the routed launches only), 3: after the logits (v19), 4: before
                                         the router and joined before the routed launches (v21), 0: in
                                         the layer's stream */
    int dyn_items;                    /* v15: routed launches without shared items hand out their tiles to
                                         warps from counters (moe_expert_args.tickets, .dyn): bit 0 the
                                         1-tile launches, bit 1 the 2-tile ones */
    int dyn_max_t;                    /* ... up to this batch (v15: 256; at 512 they measured 3-5 % slower; v30: 320) */
    int fuse1;                        /* v16: with handed-out tiles and T > 8 (v31: T > fuse_small), the 1-tile
                                         gate/up and down as one launch whose down items wait per expert
                                         (moe_experts_fused1);
                                         bit 1: it releases the 2-tile down at its start, not its end */
    int fuse1_min_t;                  /* ... from this batch on (v16: 16, v29: 9; it needs the shared expert's own
                                         launches, shared_min_t <=, or the separate launches run) */
    int fuse_small;                   /* v17: T <= this (<= 8) runs gate/up and down of every expert, the
                                         shared expert's included (where its items can ride in the routed
                                         launches), as that one launch (moe_experts_fused1 with T <= 8) */
    int fs_ks_gu, fs_ks_max_t;        /* ... with routed gate/up tiles in fs_ks_gu K parts up to this batch */
    int fs_ks_sh;                     /* ... and the shared gate/up tiles in this many */
    int fs_rm;                        /* ... and down items of fs_rm 16-row tiles (1 or 2) */
    int fs_early_sh_max_t;            /* v18: ... and up to this batch the shared gate/up tiles that are warps'
                                         first items start before the wait on the lists */
    int fs_b5_min_t, fs_b5_max_t;     /* v31: ... at these batches with 5 blocks per SM (96 registers; fs_rm 2
                                         only), else 4 (v32: default 0-0, none) */
    int fs_cmb_early_max_t;           /* v33: ... up to this batch releasing the combine right after its wait on the
                                         lists (moe_expert_args.fuse_early), so the combine's blocks take the SMs
                                         its drain frees and read inv before their wait (moe_combine inv_ready) */
    int tok1_max, tok1_min_t, tok1_max_t;   /* v19: at batches tok1_min_t..tok1_max_t, routed experts with up to
                                         tok1_max tokens take the 1-tile launches in token chunks of 8
                                         (moe_expert_args.tok1_max); 8: only those with <= 8 (v10-v18) */
    int shared_xl_min_t;              /* v24: from this batch (0: never) the shared gate/up's blocks take 64 tokens
                                         (moe_expert_args.sh_xl_min_t) */
    int shared_wg_min_t;              /* v25: from this batch (0: never) the shared expert's GEMMs run on wgmma
                                         (moe_expert_args.sh_wg_min_t; where its own launches run, from shared_min_t) */
    int shared_wg_fold;               /* v25: ... with the block scales folded where the layer's allow it (sh_pow2) */
    int shared_wg_n128_min_t;         /* v25: ... folded, 128-token blocks from this batch (0: never) */
    int x4_min_t, x4_tok;             /* v26 (X4): from batch x4_min_t (0: never) routed experts with more than
                                         x4_tok tokens (>= 16, >= the batch's tok1_max) take the wide launches (64-token items)
                                         (moe_expert_args.wide_min) */
    int x4_early;                     /* v27: in the fused launches (moe_cuda_ws.fuse1) the wide gate/up right after the
                                         2-tile one (1) or after the fused launch (2) instead of after the 2-tile down (0)
                                         (moe_expert_args.wide_early) */
    int nt2_all_min_t;                /* v24: from this batch (0: never) every routed expert with tokens takes the
                                         2-tile launches (moe_expert_args.tok1_max -1), where the separate gate/up
                                         and down launches run (no handed-out tiles, above dyn_max_t) */
    int grid_f1, grid_f1s, grid_f1s5; /* resident blocks of the fused 1-tile launch, T > 8 and T <= 8 (4 and 5
                                         blocks per SM) */
    float *part;                      /* its K-part partial sums and their counts (moe_expert_args.part, .pcnt) */
    unsigned *pcnt;
    int shared_gemm_min_t;            /* v36: from this batch (0: never) the shared expert runs as two bf16 GEMMs
                                         (moe_shared_gemms; where its own launches run, from shared_min_t, and the layer
                                         has its bf16 copy: moe_cuda_shape.shared_bf16) */
    int shared_gemm_wg;               /* v37: those GEMMs on wgmma where the scales fold (moe_shared_gemms' wg; v38: 2,
                                         one wgmma group in flight across K steps; 3: and m64n256k16; 4: and TMA) */
    int shared_tile_max_t;            /* v35: up to this batch the shared gate/up's blocks take the batch rounded up to
                                         16, 32 or (above 48) 64 tokens (moe_expert_args.sh_tile_max_t; 0: 16 up to 64,
                                         v14-v34) */
    int side_prio;                    /* v16: 1: the shared expert's launches on the second stream at the
                                         highest priority, so their blocks take free SM slots before the
                                         routed launches' early-launched (waiting) blocks */
    int prio_hi;                      /* the device's highest priority */
    cudaStream_t side_hi;             /* the second stream at that priority */
    int topk_lists_max_t;             /* top-k and lists as one launch up to this batch (<= MOE_FUSED_ROUTER_MAX_T) */
    int topk_group_max_t;                   /* v22: up to this batch the top-k + lists launch spreads each token's
                                               top-k over 8 warps (moe_router_topk_lists grp; 0: one warp per token;
                                               v28: 3-4 tokens in a block of 1024 threads) */
    int topk_blocks_max_t;            /* v28: above topk_lists_max_t, up to this batch each token's top-k is one block of
                                         8 warps (moe_router_topk grp; 0: one warp per token) */
    int lists_runs_max_t;             /* v28: up to this batch the lists launch loads the pairs once into registers and
                                         scans by runs per lane (moe_build_lists runs) */
    int logits_tc_shape;              /* v29: 0, or the tensor-core logits launch's shape as 10 ntt + ksplit (ntt 1, 2, 4
                                         n-tiles of 8 tokens per block; ksplit 1, 2, 4, 8 K parts, shrunk to divide
                                         hidden / 256) instead of moe_router_logits_tc_parts' choice */
    int topk_excl_min_t, topk_excl_max_t;   /* v21: at batches topk_excl_min_t..topk_excl_max_t the top-k
                                         launch's blocks have their SMs to themselves (moe_router_topk's excl =
                                         MOE_TOPK_EXCL_MAX) */
    int pf;                           /* v16 L2 prefetch, bits: 1 the logits launch asks for the shared
                                         expert's gate/up weights, 2 for its down weights, 4 the gate/up
                                         launch asks for the shared down, 8 for the routed down of the first
                                         pf_dn_mb MB of experts with tokens, 16 with the evict_last policy;
                                         the shared bits only where its items ride in the routed launches */
    int pf_max_t;                     /* ... up to this batch */
    int pf_dn_mb;
    unsigned *tickets;                /* those counters, MOE_TICKET_WORDS(E, max_tokens * topk) words */
    cudaStream_t side;                /* that stream, and its fork / join events */
    cudaEvent_t ev_fork, ev_join;
    int fused_max_t;                  /* batches up to this (<= MOE_FUSED_MAX_T) run the one-launch layer
                                         (moe_fused_small); default 0: never (v13 measured it no faster
                                         than the launch sequence, bench/NOTES.md) */
    int fused_opt;                    /* moe_fused_args.opt (bench variants; 0) */
    int grid_fused;                   /* its grid (resident blocks) */
    unsigned *fused_sync;             /* its counters (MOE_FUSED_SYNC_WORDS) */
    unsigned long long *fused_trace;  /* NULL, or bench: per-block timestamps (moe_kernels.h) */
} moe_cuda_ws;
#define MOE_LOGITS_KS_MAX 8   /* v12: 4; v29: 8 (logits_tc_shape) */

int moe_cuda_layer_init(moe_cuda_layer *L, const moe_cuda_shape *s);
void moe_cuda_layer_free(moe_cuda_layer *L);
/* gate_w: host fp32 [E][hidden]; bias: host [E] or NULL; tid2eid: host [vocab][topk] or NULL */
int moe_cuda_set_router(moe_cuda_layer *L, const float *gate_w, const float *bias, const int32_t *tid2eid);
/* Routed expert e from host qtensors (w1 gate [inter][hidden], w3 up, w2 down [hidden][inter]). */
int moe_cuda_set_expert(moe_cuda_layer *L, int e, const qtensor *w1, const qtensor *w3, const qtensor *w2);
/* Same from device-resident checkpoint bytes: q[3] codes, sc[3] block scales, scale2[3]. */
int moe_cuda_set_expert_dev(moe_cuda_layer *L, int e, const uint8_t *const q[3], const uint8_t *const sc[3],
                            const float scale2[3]);
/* Shared expert from host QT_FP8_B128 qtensors (E8M0 or F32 block scales). */
int moe_cuda_set_shared(moe_cuda_layer *L, const qtensor *w1, const qtensor *w3, const qtensor *w2);
/* v41: allocate the layer's bf16 copy of the shared expert (what moe_cuda_shape.shared_bf16 allocates at init) after
 * the fact; the next moe_cuda_set_shared fills it. 0 = done (or already there); -1 = no GPU memory for it, one line on
 * stderr, the layer unchanged (its FP8 shared kernels stay in use). */
int moe_cuda_alloc_shared_bf16(moe_cuda_layer *L);
/* Same from device E4M3 bytes and host fp32 block scales [ceil(n/128)][ceil(k/128)]. */
int moe_cuda_set_shared_dev(moe_cuda_layer *L, const uint8_t *const w[3], const float *const s[3]);

int moe_cuda_ws_init(moe_cuda_ws *W, const moe_cuda_layer *L, int max_tokens);
/* The tuning fields' defaults alone (moe_cuda_ws_init sets them too); no CUDA call. */
void moe_cuda_ws_defaults(moe_cuda_ws *W);
void moe_cuda_ws_free(moe_cuda_ws *W);
int moe_cuda_forward(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids, int T,
                     float *out, cudaStream_t st);
/* Same, recording ev[0..6] around the stages (logits, top-k, lists, gate/up, down, combine); for
 * T <= moe_cuda_ws.topk_lists_max_t top-k and lists are one launch, timed as "lists" (top-k reads ~0). */
int moe_cuda_forward_timed(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids,
                           int T, float *out, cudaStream_t st, cudaEvent_t ev[7]);

/* NVFP4 quantisation on the GPU (load time): w [rows][cols] fp32 device -> q, scale, scale2 device. */
int moe_cuda_quantize_nvfp4(const float *w, int rows, int cols, uint8_t *q, uint8_t *scale, float *scale2,
                            cudaStream_t st);

#endif
