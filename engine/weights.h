/* weights.h — a V4 checkpoint's tensors, bound by role and checked against the config.
 *
 * Accepts DeepSeek's hub naming (`embed.weight`, `layers.N.attn.kv_norm.weight`, `hc_head_fn`, ...)
 * and transformers' (`model.` prefix, `model.embed_tokens.weight`, `model.layers.N.attn.norm.weight`,
 * `model.hc_head.hc_fn`, `head.weight` unprefixed; routed experts either one tensor per expert or
 * fused `experts.gate_up_proj` [E, 2I, D] + `experts.down_proj` [E, D, I], viewed per expert;
 * `ffn.gate.e_score_correction_bias` = `ffn.gate.bias`). `mtp.*` tensors are skipped. Quantised tensors
 * (FP8 + `.scale`, MXFP4 + `.scale`, NVFP4 + `weight_scale`/`weight_scale_2`/`input_scale`) become
 * qtensors pointing into the mmap. Every shape is checked; an error names the tensor.
 *
 * Small parameters (norm weights, hc fn/base/scale, ape, sinks, gate bias, tid2eid) are converted to
 * owned float32 / int32 arrays at load time.
 */
#ifndef SLUICE_WEIGHTS_H
#define SLUICE_WEIGHTS_H

#include "config.h"
#include "quant.h"
#include "safetensors.h"

typedef struct {
    qtensor wkv, wgate;     /* [coff*d, dim] each (coff = 2 for CSA, 1 for HCA) */
    float *ape;             /* [ratio, coff*d] */
    float *norm;            /* [d] */
} v4_compressor_w;

typedef struct {
    qtensor w1, w2, w3;     /* w1,w3: [inter, dim]; w2: [dim, inter] */
} v4_expert_w;

typedef struct {
    /* mHC */
    float *hc_attn_fn, *hc_attn_base, *hc_attn_scale;   /* [(2+hc)*hc, hc*dim], [(2+hc)*hc], [3] */
    float *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    float *attn_norm, *ffn_norm;                          /* [dim] */
    /* attention */
    qtensor wq_a;           /* [q_lora, dim] */
    float *q_norm;          /* [q_lora] */
    qtensor wq_b;           /* [H*head_dim, q_lora] */
    qtensor wkv;            /* [head_dim, dim] */
    float *kv_norm;         /* [head_dim] */
    qtensor wo_a;           /* [o_groups*o_lora, H*head_dim/o_groups] */
    qtensor wo_b;           /* [dim, o_groups*o_lora] */
    float *attn_sink;       /* [H] */
    int ratio;              /* compress ratio of this layer */
    v4_compressor_w comp;   /* ratio > 0 */
    /* indexer (ratio == 4) */
    v4_compressor_w icomp;  /* d = index_head_dim */
    qtensor iwq_b;          /* [nI*dI, q_lora] */
    qtensor iweights;       /* weights_proj [nI, dim] */
    /* MoE */
    qtensor gate;           /* [n_routed, dim] */
    float *gate_bias;       /* [n_routed] or NULL (hash layers) */
    int32_t *tid2eid;       /* [vocab, n_active] for hash layers, else NULL */
    v4_expert_w *experts;   /* [n_routed] */
    v4_expert_w shared;     /* n_shared_experts == 1 (inter = moe_inter * n_shared) */
} v4_layer_w;

typedef struct {
    v4_config cfg;
    st_model *st;
    qtensor embed;          /* [vocab, dim] */
    float *hc_head_fn, *hc_head_base, *hc_head_scale;   /* [hc, hc*dim], [hc], [1] */
    float *norm;            /* [dim] */
    qtensor head;           /* [vocab, dim] */
    v4_layer_w *layers;     /* [n_layers] */
    int expert_format;      /* qt_format of routed experts as loaded */
} v4_weights;

/* Load config + tensors from a checkpoint directory. 0 or -1 with err. */
int v4_weights_load(const char *dir, v4_weights *w, char *err, size_t errlen);
/* Replace every routed expert with an owned NVFP4 copy (ModelOpt rounding); 0 or -1. */
int v4_weights_quantize_experts_nvfp4(v4_weights *w, char *err, size_t errlen);
void v4_weights_free(v4_weights *w);

#endif
