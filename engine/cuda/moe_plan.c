/* moe_plan.c — every launch-shape choice of the GPU MoE layer in one place: moe_choose_plan(shape, T) says how a
 * forward of T tokens runs (which router kernels, where the shared expert runs, which expert launches), as DeepGEMM
 * keeps its configs in one heuristics file. The thresholds below are batch sizes in tokens, tuned on the H200 with
 * `sluice-bench moe` (V4-Flash layer, random and skewed routing); each says why it sits where it does. Benchmarks and
 * tests force single fields by name (moe_plan_set: `sluice-bench moe --set experts=2`).
 */
#include "moe_cuda.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "moe_kernels.h"

/* Router. Tensor-core logits from 8 tokens: at 4 they tie with the CUDA-core kernel, from 8 they win (skewed 8 by
 * ~2.5 %). The CUDA-core kernel splits K in 4 parts up to 16 tokens (1.5-3 % at 16) and takes 16-token tiles from 33. */
#define PLAN_LOGITS_TC_MIN_T 8
#define PLAN_LOGITS_KS 4
#define PLAN_LOGITS_KS_MAX_T 16
#define PLAN_LOGITS16_MIN_T 33
/* Top-k and lists as one launch up to 4 tokens, each token's top-k over 8 warps; above, the grouped top-k blocks and
 * the lists launch are faster (8 tokens: ~1 %, skewed 6-8: ~3 %). */
#define PLAN_TOPK_LISTS_MAX_T 4
/* The shared expert's own launches from 9 tokens, on a second stream beside the router (which leaves most SMs idle):
 * below, its items ride in the one expert launch; from 9 the routed work takes the fused 1-tile stages, which carry
 * no shared items (9-15: 4-7.5 %, skewed 25 %). */
#define PLAN_SHARED_MIN_T 9
/* ... as two bf16 GEMMs from 256 tokens (512: 2-3 %, skewed 7-8 %; at 64 half of their 128-token tiles would be
 * padding); its gate/up blocks sized to the batch (16, 32, 64 tokens) up to 64; 64-token blocks from 512 where the
 * GEMMs do not run (no bf16 copy; 512: 2.4 %, 128-256 lose). */
#define PLAN_SHARED_GEMM_MIN_T 256
#define PLAN_SHARED_TILE_MAX_T 64
#define PLAN_SHARED_XL_MIN_T 512
/* Routed experts. Up to 8 tokens the whole expert work, the shared expert's included, is one launch (moe_experts_fused1
 * with T <= 8), with the routed gate/up tiles in 2 K parts at batch 1 and the shared ones in 4, the shared tiles that are
 * warps' first items starting before the lists up to 4 tokens. From 9 tokens up to 320 the 1-tile stages are one launch
 * whose down items wait per expert, with tiles handed out from counters (320: 3.5-5.5 %; at 512 they lose 1-2.5 %):
 * above it separate gate/up and down launches, with a static item walk. */
#define PLAN_ONE_LAUNCH_MAX_T 8
#define PLAN_ONE_KS_GU_MAX_T 1
#define PLAN_ONE_KS_GU 2
#define PLAN_ONE_KS_SH 4
#define PLAN_ONE_EARLY_SH_MAX_T 4
#define PLAN_DYN_MAX_T 320
/* 128-row down items from 16 tokens. At 64-128 tokens, where an expert with 9-16 tokens is rare, it takes two 8-token
 * chunks of the 1-tile launches instead of leaving a 2-tile tail (128: 1 %); where such experts carry much of the work
 * (256-512, or skewed) reading their weights twice costs 6-40 %. */
#define PLAN_DOWN_RM_MIN_T 16
#define PLAN_TOK1 16
#define PLAN_TOK1_MIN_T 64
#define PLAN_TOK1_MAX_T 128
/* From 224 tokens experts with more than 32 tokens take the wide launches (64-token items; skewed 224-512: 11-20 %);
 * from 512 every expert with tokens takes the 2-tile launches (skewed 512: 4 %). */
#define PLAN_WIDE_MIN_T 224
#define PLAN_WIDE_TOK 32
#define PLAN_NT2_ALL_MIN_T 512

moe_plan moe_choose_plan(const moe_cuda_shape *s, int T)
{
    moe_plan p;
    memset(&p, 0, sizeof p);
    const int sh = s->has_shared != 0;
    p.logits_tc = s->n_experts % 16 == 0 && T >= PLAN_LOGITS_TC_MIN_T;
    p.logits_ks = T <= PLAN_LOGITS_KS_MAX_T ? PLAN_LOGITS_KS : 1;
    p.logits16 = T >= PLAN_LOGITS16_MIN_T;
    p.topk_lists = T <= PLAN_TOPK_LISTS_MAX_T;
    p.topk_group = T <= PLAN_TOPK_LISTS_MAX_T;
    p.own_shared = sh && T >= PLAN_SHARED_MIN_T;
    p.shared_fork = p.own_shared;
    p.shared_gemm = p.own_shared && s->shared_bf16 && T >= PLAN_SHARED_GEMM_MIN_T;
    p.shared_tile = T <= PLAN_SHARED_TILE_MAX_T;
    p.shared_xl = T >= PLAN_SHARED_XL_MIN_T;
    p.experts = T <= PLAN_ONE_LAUNCH_MAX_T ? MOE_EXPERTS_ONE_LAUNCH
                : T <= PLAN_DYN_MAX_T     ? MOE_EXPERTS_FUSED1
                                          : MOE_EXPERTS_SEPARATE;
    p.dyn = T <= PLAN_DYN_MAX_T ? 1 : 0;
    p.ks_gu = T <= PLAN_ONE_KS_GU_MAX_T ? PLAN_ONE_KS_GU : 1;
    p.ks_sh = PLAN_ONE_KS_SH;
    p.early_sh = T <= PLAN_ONE_EARLY_SH_MAX_T;
    p.down_rm = T >= PLAN_DOWN_RM_MIN_T && s->hidden % 128 == 0 ? 2 : 1;
    p.tok1 = T >= PLAN_TOK1_MIN_T && T <= PLAN_TOK1_MAX_T ? PLAN_TOK1 : MOE_TOK_CHUNK;
    p.wide = T >= PLAN_WIDE_MIN_T ? PLAN_WIDE_TOK : 0;
    p.nt2_all = T >= PLAN_NT2_ALL_MIN_T;
    return p;
}

/* ---- fields by name (moe_plan_set, moe_plan_format) */
static const struct {
    const char *name;
    size_t off;
    int lo, hi;
} plan_fields[] = {
#define F(f, lo, hi) {#f, offsetof(moe_plan, f), lo, hi}
    F(logits_tc, 0, 1), F(logits_ks, 1, MOE_LOGITS_KS_MAX), F(logits16, 0, 1), F(topk_lists, 0, 1),
    F(topk_group, 0, 1), F(own_shared, 0, 1), F(shared_fork, 0, 1), F(shared_gemm, 0, 1), F(shared_tile, 0, 1),
    F(shared_xl, 0, 1), F(experts, 0, 2), F(dyn, 0, 3), F(ks_gu, 1, MOE_PARTS_MAX), F(ks_sh, 1, MOE_PARTS_MAX),
    F(early_sh, 0, 1), F(down_rm, 1, 2), F(tok1, 1, MOE_TOK1_MAX), F(wide, 0, 1 << 20), F(nt2_all, 0, 1),
#undef F
};
enum { N_PLAN_FIELDS = sizeof plan_fields / sizeof plan_fields[0] };

static int *plan_field(moe_plan *p, int i) { return (int *)((char *)p + plan_fields[i].off); }

int moe_plan_set(moe_cuda_ws *W, const char *nv)
{
    const char *eq = strchr(nv, '=');
    char *end;
    for (int i = 0; eq && i < N_PLAN_FIELDS; i++) {
        if (strlen(plan_fields[i].name) != (size_t)(eq - nv) || strncmp(nv, plan_fields[i].name, (size_t)(eq - nv)))
            continue;
        const long v = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || *end || v < plan_fields[i].lo || v > plan_fields[i].hi) {
            fprintf(stderr, "moe_cuda: plan field %s takes %d..%d, not '%s'\n", plan_fields[i].name, plan_fields[i].lo,
                    plan_fields[i].hi, eq + 1);
            return -1;
        }
        int k = 0;
        while (k < W->n_set && W->set_field[k] != i) k++;
        if (k == MOE_PLAN_SET_MAX) {
            fprintf(stderr, "moe_cuda: more than %d plan fields forced\n", MOE_PLAN_SET_MAX);
            return -1;
        }
        if (k == W->n_set) W->n_set++;
        W->set_field[k] = i;
        W->set_value[k] = (int)v;
        return 0;
    }
    fprintf(stderr, "moe_cuda: '%s' is not name=value with a moe_plan field's name (", nv);
    for (int i = 0; i < N_PLAN_FIELDS; i++) fprintf(stderr, "%s%s", i ? ", " : "", plan_fields[i].name);
    fprintf(stderr, ")\n");
    return -1;
}

moe_plan moe_cuda_plan(const moe_cuda_layer *L, const moe_cuda_ws *W, int T)
{
    moe_plan p = moe_choose_plan(&L->s, T);
    for (int k = 0; k < W->n_set; k++) *plan_field(&p, W->set_field[k]) = W->set_value[k];
    return p;
}

void moe_plan_format(const moe_plan *p, char *buf, size_t n)
{
    size_t l = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_PLAN_FIELDS && l < n; i++)
        l += (size_t)snprintf(buf + l, n - l, "%s%s=%d", i ? " " : "", plan_fields[i].name,
                              *plan_field((moe_plan *)p, i));
}
