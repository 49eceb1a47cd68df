/* moe_cuda.h — one DeepSeek-V4 MoE layer on the GPU: router + routed FP4 experts + FP8 shared expert.
 *
 * Contract:
 *   - moe_cuda_layer_init allocates the layer's device weights for a shape; the set_* calls upload
 *     and repack them (load time: they may synchronise). All routed experts share one FP4 format
 *     (QT_NVFP4 ModelOpt or QT_MXFP4 DeepSeek), repacked at load into the kernels' layout
 *     (kernels/moe_kernels.h); the shared expert is QT_FP8_B128.
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
    int shared_bf16;         /* also keep the shared expert in bf16 (2x its 25 MB at V4-Flash) for its GEMMs at large
                                batches (moe_plan.shared_gemm); 0: they never run */
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
    uint16_t *sh_b13, *sh_b2;         /* (shape.shared_bf16) the same in bf16 for its GEMMs (moe_shared_to_bf16),
                                         or NULL; with sh_pow2 the block scales folded in (exact) */
    int sh_pow2;                      /* every block scale a power of two in [2^-117, 2^7] (DeepSeek's ue8m0), so
                                         they fold into the dequantisation exactly (moe_shared_gemms fold) */
    int clamped_scales;               /* scale codes clamped at repack (MXFP4 spanning > 32 binades) */
    size_t expert_bytes, shared_bytes;/* bytes one routed expert / the shared expert occupy */
} moe_cuda_layer;

/* ---- the launch plan: how one forward of T tokens runs (engine/cuda/moe_plan.c holds every choice and why) */
enum { MOE_EXPERTS_ONE_LAUNCH, MOE_EXPERTS_FUSED1, MOE_EXPERTS_SEPARATE };
typedef struct {
    int logits_tc;     /* router logits on tensor cores (needs E % 16 == 0), else on CUDA cores ... */
    int logits_ks;     /* ... in this many K parts (1..MOE_LOGITS_KS_MAX, dividing hidden / 256) ... */
    int logits16;      /* ... with 16-token tiles */
    int topk_lists;    /* top-k and the expert lists as one launch (moe_router_topk_lists) */
    int topk_group;    /* ... each token's top-k spread over 8 warps */
    int own_shared;    /* the shared expert as its own launches (else its items ride in the routed launches) ... */
    int shared_fork;   /* ... on a second stream, forked before the router and joined before the combine */
    int shared_gemm;   /* ... as two bf16 GEMMs (needs the layer's bf16 copy, moe_cuda_shape.shared_bf16) */
    int shared_tile;   /* ... its gate/up blocks take T rounded up to 16, 32 or 64 tokens (moe_expert_args.sh_tile_max_t) */
    int shared_xl;     /* ... its gate/up blocks take 64 tokens above 64 (moe_expert_args.sh_xl_min_t) */
    int experts;       /* MOE_EXPERTS_*: the routed (and inline shared) work as one launch (T <= 8), as the fused
                          1-tile stages (needs dyn), or as separate gate/up and down launches */
    int dyn;           /* routed launches without shared items hand out tiles from counters: bit 0 the 1-tile
                          launches, bit 1 the 2-tile ones (moe_expert_args.dyn) */
    int ks_gu, ks_sh;  /* one launch: routed / shared gate/up tiles in this many K parts */
    int early_sh;      /* one launch: the shared gate/up tiles that are warps' first items start before the lists */
    int down_rm;       /* 16-row tiles per routed down item (1 or 2; moe_expert_args.down_rm) */
    int tok1;          /* routed experts with up to this many tokens take the 1-tile launches (moe_expert_args.tok1_max) */
    int wide;          /* routed experts with more than this many tokens take the wide launches (0: none) */
    int nt2_all;       /* separate launches: every routed expert with tokens takes the 2-tile launches */
} moe_plan;

/* The plan for T tokens on layer shape s (moe_plan.c). */
moe_plan moe_choose_plan(const moe_cuda_shape *s, int T);

enum { MOE_PLAN_SET_MAX = 16 };
typedef struct {
    int max_tokens, grid_gu[3], grid_dn[3];   /* persistent grids for 1, 2 and 8 (wide) token tiles per item */
    int grid_f1, grid_f1s;            /* resident blocks of moe_experts_fused1, T > 8 and T <= 8 */
    float *logits;                    /* [MOE_LOGITS_KS_MAX][max][E] fp32 */
    int32_t *idx; float *w;           /* [max][topk] */
    int32_t *off, *items_gu, *items_dn;   /* [E+2] */
    int32_t *pair_tok, *inv; float *pair_w;
    uint16_t *h;                      /* [pairs][inter] bf16 (the shared expert's T rows at max*topk) */
    float *y;                         /* [pairs][hidden] (the same) */
    float *part;                      /* the one launch's K-part partial sums and their counts (moe_expert_args.part, .pcnt) */
    unsigned *pcnt;
    unsigned *tickets;                /* the tile counters, MOE_TICKET_WORDS(E, max_tokens * topk) words */
    cudaStream_t side;                /* the shared expert's stream, and its fork / join events */
    cudaEvent_t ev_fork, ev_join;
    int n_set, set_field[MOE_PLAN_SET_MAX], set_value[MOE_PLAN_SET_MAX];   /* moe_plan_set's overrides */
} moe_cuda_ws;
#define MOE_LOGITS_KS_MAX 8

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
/* Allocate the layer's bf16 copy of the shared expert (what moe_cuda_shape.shared_bf16 allocates at init) after
 * the fact; the next moe_cuda_set_shared fills it. 0 = done (or already there); -1 = no GPU memory for it, one line on
 * stderr, the layer unchanged (its FP8 shared kernels stay in use). */
int moe_cuda_alloc_shared_bf16(moe_cuda_layer *L);
/* Same from device E4M3 bytes and host fp32 block scales [ceil(n/128)][ceil(k/128)]. */
int moe_cuda_set_shared_dev(moe_cuda_layer *L, const uint8_t *const w[3], const float *const s[3]);

int moe_cuda_ws_init(moe_cuda_ws *W, const moe_cuda_layer *L, int max_tokens);
/* Force a plan field for every later forward on W: "name=value" with a moe_plan field's name (sluice-bench moe
 * --set, tests). 0, or -1 with one line on stderr for an unknown name or a value out of its range. */
int moe_plan_set(moe_cuda_ws *W, const char *name_eq_value);
/* The plan moe_cuda_forward takes for T tokens on W: moe_choose_plan's, then the forced fields. */
moe_plan moe_cuda_plan(const moe_cuda_layer *L, const moe_cuda_ws *W, int T);
/* The plan's fields as "name=value ..." into buf (sluice-bench prints the plan it measured). */
void moe_plan_format(const moe_plan *p, char *buf, size_t n);
void moe_cuda_ws_free(moe_cuda_ws *W);
int moe_cuda_forward(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids, int T,
                     float *out, cudaStream_t st);
/* Same, recording ev[0..6] around the stages (logits, top-k, lists, gate/up, down, combine); where the plan has
 * top-k and lists as one launch it is timed as "lists" (top-k reads ~0). */
int moe_cuda_forward_timed(const moe_cuda_layer *L, moe_cuda_ws *W, const uint16_t *x, const int32_t *token_ids,
                           int T, float *out, cudaStream_t st, cudaEvent_t ev[7]);

/* NVFP4 quantisation on the GPU (load time): w [rows][cols] fp32 device -> q, scale, scale2 device. */
int moe_cuda_quantize_nvfp4(const float *w, int rows, int cols, uint8_t *q, uint8_t *scale, float *scale2,
                            cudaStream_t st);

#endif
