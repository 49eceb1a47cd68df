/* config.h — DeepSeek-V4 model configuration.
 *
 * Reads config.json as transformers writes it (`layer_types`, `mlp_layer_types`, `compress_rates`,
 * `rope_parameters.{main,compress}`, `partial_rotary_factor`, ...) or as DeepSeek's hub config writes
 * it (`compress_ratios` per layer, `num_hash_layers`, `qk_rope_head_dim`, `rope_scaling` yarn,
 * `quantization_config`, `expert_dtype`). Compress ratio per layer: 0 = sliding window only,
 * 4 = CSA (overlapping windows + lightning indexer), any other r > 0 = HCA-style pooling over r tokens.
 * Missing or inconsistent fields give one error naming the field.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>

#define V4_MAX_LAYERS 128
#define V4_MAX_EOS 8

typedef enum { V4_SCORE_SQRTSOFTPLUS = 0, V4_SCORE_SOFTMAX, V4_SCORE_SIGMOID } v4_score_func;

typedef struct {
    double theta;          /* rope base */
    int yarn;              /* 1: apply YaRN frequency interpolation */
    double yarn_factor;    /* rope_factor */
    int yarn_orig_len;     /* original_max_position_embeddings / original_seq_len */
    double yarn_beta_fast; /* default 32 */
    double yarn_beta_slow; /* default 1 */
} v4_rope;

typedef struct {
    int vocab_size;
    int dim;               /* hidden_size */
    int n_layers;          /* num_hidden_layers (MTP layers not counted) */
    int n_heads;           /* num_attention_heads */
    int head_dim;          /* 512 on V4-Flash; single shared KV head, K == V */
    int rope_dim;          /* qk_rope_head_dim: the LAST rope_dim dims of each head vector */
    int q_lora_rank;
    int o_groups;
    int o_lora_rank;
    int window;            /* sliding_window, includes the current token */
    float norm_eps;

    int compress_ratio[V4_MAX_LAYERS]; /* 0 | 4 (CSA) | r (HCA) */
    int hash_layer[V4_MAX_LAYERS];     /* 1: routing by tid2eid[token] */

    int n_routed_experts;
    int n_shared_experts;
    int n_active;          /* num_experts_per_tok */
    int moe_inter;         /* moe_intermediate_size */
    float route_scale;     /* routed_scaling_factor */
    float swiglu_limit;    /* <= 0: no clamp */
    v4_score_func score_func;

    int index_n_heads;
    int index_head_dim;
    int index_topk;

    int hc_mult;
    int hc_sinkhorn_iters;
    float hc_eps;

    v4_rope rope_main;     /* sliding-only layers */
    v4_rope rope_compress; /* every CSA/HCA layer, for all its RoPE */

    int bos_id;            /* -1 if absent */
    int eos_ids[V4_MAX_EOS];
    int n_eos;
    int max_position;      /* max_position_embeddings: the context limit */
    int n_mtp_layers;      /* num_nextn_predict_layers (weights skipped for now) */

    char model_id[128];    /* a stable name: directory basename unless config says otherwise */

    /* added by the loader (H1): informational */
    int hub_format;        /* 1: DeepSeek hub config (compress_ratios), 0: transformers (layer_types) */
    char quant_method[32]; /* quantization_config.quant_method ("fp8") or "" */
    char expert_dtype[16]; /* expert_dtype ("fp4") or "" */
} v4_config;

/* Parse `dir`/config.json. Returns 0, or -1 with one line in err naming the field. */
int v4_config_load(const char *dir, v4_config *cfg, char *err, size_t errlen);
/* Same, from a JSON text (for tests). */
int v4_config_parse(const char *json, size_t len, v4_config *cfg, char *err, size_t errlen);

/* Inverse frequencies for the rope slice (rope_dim/2 values), YaRN applied as DeepSeek's code does. */
void v4_rope_inv_freq(const v4_rope *r, int rope_dim, double *out);

#endif
