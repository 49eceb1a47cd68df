/* config.c — DeepSeek-V4 config.json, transformers' and DeepSeek hub's layouts (see config.h). */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

// ----------------------------------------------------------------------------
// error helper and typed field readers

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    int n = snprintf(err, errlen, "config.json: ");
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++) /* one line, whatever names a hostile file holds */
        if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
}

#define FAIL(...) do { seterr(err, errlen, __VA_ARGS__); return -1; } while (0)

/* An integer-valued JSON number (3 or 3.0) that fits in int. */
static int json_to_int(const json_t *v, long long lo, long long hi, int *out)
{
    double d;
    if (json_is_integer(v)) d = (double)json_integer_value(v);
    else if (json_is_real(v)) d = json_real_value(v);
    else return -1;
    if (!(d == floor(d)) || d < (double)lo || d > (double)hi) return -1;
    *out = (int)d;
    return 0;
}

static int json_to_num(const json_t *v, double *out)
{
    if (json_is_integer(v)) { *out = (double)json_integer_value(v); return 0; }
    if (json_is_real(v)) { *out = json_real_value(v); return 0; }
    return -1;
}

/* Required int field in [lo, hi]. */
static int get_int(const json_t *o, const char *key, long long lo, long long hi, int *out,
                   char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) FAIL("field '%s' missing", key);
    if (json_to_int(v, lo, hi, out)) FAIL("field '%s' must be an integer in [%lld, %lld]", key, lo, hi);
    return 0;
}

/* Optional int field: keeps *out when absent or null. */
static int opt_int(const json_t *o, const char *key, long long lo, long long hi, int *out,
                   char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_to_int(v, lo, hi, out)) FAIL("field '%s' must be an integer in [%lld, %lld]", key, lo, hi);
    return 0;
}

static int get_num(const json_t *o, const char *key, double *out, int required, char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) FAIL("field '%s' missing", key);
        return 0;
    }
    if (json_to_num(v, out) || !isfinite(*out)) FAIL("field '%s' must be a number", key);
    return 0;
}

static int get_float(const json_t *o, const char *key, float *out, int required, char *err, size_t errlen)
{
    double d = *out;
    if (get_num(o, key, &d, required, err, errlen)) return -1;
    *out = (float)d;
    return 0;
}

// ----------------------------------------------------------------------------
// rope

/* One rope description. `o` is either a transformers rope_parameters.{main,compress} object
 * (rope_theta, rope_type, factor, original_max_position_embeddings, beta_fast, beta_slow) or a
 * hub rope_scaling object (type|rope_type, factor, ...); `theta` is used when o has no rope_theta. */
static int parse_rope(const json_t *o, const char *what, double theta, v4_rope *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->theta = theta;
    r->yarn_factor = 1.0;
    r->yarn_beta_fast = 32.0;
    r->yarn_beta_slow = 1.0;
    if (!o || json_is_null(o)) return 0;
    if (!json_is_object(o)) FAIL("field '%s' must be an object", what);
    const json_t *th = json_object_get(o, "rope_theta");
    if (th && !json_is_null(th)) {
        if (json_to_num(th, &r->theta) || !(r->theta > 1.0)) FAIL("field '%s.rope_theta' must be a number > 1", what);
    }
    const json_t *ty = json_object_get(o, "rope_type");
    if (!ty || json_is_null(ty)) ty = json_object_get(o, "type");
    const char *type = "default";
    if (ty && !json_is_null(ty)) {
        if (!json_is_string(ty)) FAIL("field '%s.rope_type' must be a string", what);
        type = json_string_value(ty);
    }
    if (!strcmp(type, "default")) return 0;
    if (strcmp(type, "yarn")) FAIL("field '%s.rope_type' is '%s' (supported: default, yarn)", what, type);
    r->yarn = 1;
    char key[96];
    const json_t *f = json_object_get(o, "factor");
    snprintf(key, sizeof(key), "%s.factor", what);
    if (!f || json_is_null(f)) FAIL("field '%s' missing", key);
    if (json_to_num(f, &r->yarn_factor) || !(r->yarn_factor > 0)) FAIL("field '%s' must be a number > 0", key);
    snprintf(key, sizeof(key), "%s.original_max_position_embeddings", what);
    const json_t *ol = json_object_get(o, "original_max_position_embeddings");
    if (!ol || json_is_null(ol)) FAIL("field '%s' missing", key);
    if (json_to_int(ol, 0, 1LL << 30, &r->yarn_orig_len)) FAIL("field '%s' must be an integer >= 0", key);
    const json_t *bf = json_object_get(o, "beta_fast"), *bs = json_object_get(o, "beta_slow");
    if (bf && !json_is_null(bf) && (json_to_num(bf, &r->yarn_beta_fast) || !(r->yarn_beta_fast > 0)))
        FAIL("field '%s.beta_fast' must be a number > 0", what);
    if (bs && !json_is_null(bs) && (json_to_num(bs, &r->yarn_beta_slow) || !(r->yarn_beta_slow > 0)))
        FAIL("field '%s.beta_slow' must be a number > 0", what);
    return 0;
}

void v4_rope_inv_freq(const v4_rope *r, int rope_dim, double *out)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) out[i] = 1.0 / pow(r->theta, (double)(2 * i) / rope_dim);
    if (!r->yarn || r->yarn_orig_len <= 0) return;
    /* DeepSeek precompute_freqs_cis: corr_dim(n) = d*ln(L/(2*pi*n)) / (2*ln(base)) */
    double L = r->yarn_orig_len, lb = 2.0 * log(r->theta);
    double cf = rope_dim * log(L / (r->yarn_beta_fast * 2.0 * M_PI)) / lb;
    double cs = rope_dim * log(L / (r->yarn_beta_slow * 2.0 * M_PI)) / lb;
    double low = floor(cf), high = ceil(cs);
    if (low < 0) low = 0;
    if (high > rope_dim - 1) high = rope_dim - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < half; i++) {
        double ramp = (i - low) / (high - low);
        if (ramp < 0) ramp = 0;
        if (ramp > 1) ramp = 1;
        double smooth = 1.0 - ramp;
        out[i] = out[i] / r->yarn_factor * (1.0 - smooth) + out[i] * smooth;
    }
}

// ----------------------------------------------------------------------------
// per-layer layouts

/* transformers: layer_types + compress_rates + mlp_layer_types */
static int parse_layers_hf(const json_t *root, v4_config *c, char *err, size_t errlen)
{
    const json_t *lt = json_object_get(root, "layer_types");
    if (!json_is_array(lt)) FAIL("field 'layer_types' must be a list");
    if ((int)json_array_size(lt) != c->n_layers)
        FAIL("layer_types has %zu entries, num_hidden_layers is %d", json_array_size(lt), c->n_layers);
    const json_t *rates = json_object_get(root, "compress_rates");
    if (rates && !json_is_null(rates) && !json_is_object(rates)) FAIL("field 'compress_rates' must be an object");
    for (int i = 0; i < c->n_layers; i++) {
        const json_t *t = json_array_get(lt, (size_t)i);
        if (!json_is_string(t)) FAIL("layer_types[%d] must be a string", i);
        const char *s = json_string_value(t);
        if (!strcmp(s, "sliding_attention")) { c->compress_ratio[i] = 0; continue; }
        const json_t *r = rates ? json_object_get(rates, s) : NULL;
        if (!r) FAIL("layer_types[%d] is '%s', which field 'compress_rates' does not list", i, s);
        if (json_to_int(r, 1, 1 << 20, &c->compress_ratio[i]))
            FAIL("field 'compress_rates.%s' must be an integer >= 1", s);
    }
    const json_t *mt = json_object_get(root, "mlp_layer_types");
    if (!mt || json_is_null(mt)) {
        int nh = 0;
        if (opt_int(root, "num_hash_layers", 0, c->n_layers, &nh, err, errlen)) return -1;
        for (int i = 0; i < c->n_layers; i++) c->hash_layer[i] = i < nh;
        return 0;
    }
    if (!json_is_array(mt)) FAIL("field 'mlp_layer_types' must be a list");
    if ((int)json_array_size(mt) != c->n_layers)
        FAIL("mlp_layer_types has %zu entries, num_hidden_layers is %d", json_array_size(mt), c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        const json_t *t = json_array_get(mt, (size_t)i);
        const char *s = json_is_string(t) ? json_string_value(t) : "";
        if (!strcmp(s, "hash_moe")) c->hash_layer[i] = 1;
        else if (!strcmp(s, "moe")) c->hash_layer[i] = 0;
        else FAIL("mlp_layer_types[%d] must be 'moe' or 'hash_moe'", i);
    }
    return 0;
}

/* DeepSeek hub: compress_ratios (one per layer, then one per MTP layer) + num_hash_layers */
static int parse_layers_hub(const json_t *root, v4_config *c, char *err, size_t errlen)
{
    const json_t *cr = json_object_get(root, "compress_ratios");
    if (!json_is_array(cr)) FAIL("field 'compress_ratios' must be a list");
    int n = (int)json_array_size(cr);
    int extra_ok = c->n_mtp_layers > 0 ? c->n_mtp_layers : 1;
    if (n < c->n_layers || n > c->n_layers + extra_ok)
        FAIL("compress_ratios has %d entries, num_hidden_layers is %d (+%d MTP)", n, c->n_layers,
             c->n_mtp_layers);
    for (int i = 0; i < c->n_layers; i++)
        if (json_to_int(json_array_get(cr, (size_t)i), 0, 1 << 20, &c->compress_ratio[i]))
            FAIL("compress_ratios[%d] must be an integer >= 0", i);
    int nh = 0;
    if (opt_int(root, "num_hash_layers", 0, c->n_layers, &nh, err, errlen)) return -1;
    for (int i = 0; i < c->n_layers; i++) c->hash_layer[i] = i < nh;
    return 0;
}

// ----------------------------------------------------------------------------
// the whole config

static int parse_root(const json_t *root, v4_config *c, char *err, size_t errlen)
{
    const int BIG = 1 << 30;
    if (!json_is_object(root)) FAIL("top level must be a JSON object");
    if (get_int(root, "vocab_size", 1, BIG, &c->vocab_size, err, errlen)) return -1;
    if (get_int(root, "hidden_size", 1, 1 << 20, &c->dim, err, errlen)) return -1;
    if (get_int(root, "num_hidden_layers", 1, V4_MAX_LAYERS, &c->n_layers, err, errlen)) return -1;
    if (get_int(root, "num_attention_heads", 1, 1 << 16, &c->n_heads, err, errlen)) return -1;
    if (get_int(root, "head_dim", 1, 1 << 16, &c->head_dim, err, errlen)) return -1;
    if (get_int(root, "q_lora_rank", 1, 1 << 20, &c->q_lora_rank, err, errlen)) return -1;
    if (get_int(root, "o_groups", 1, 1 << 16, &c->o_groups, err, errlen)) return -1;
    if (get_int(root, "o_lora_rank", 1, 1 << 20, &c->o_lora_rank, err, errlen)) return -1;
    if (get_int(root, "sliding_window", 1, BIG, &c->window, err, errlen)) return -1;
    c->norm_eps = 1e-6f;
    if (get_float(root, "rms_norm_eps", &c->norm_eps, 1, err, errlen)) return -1;
    if (!(c->norm_eps > 0)) FAIL("field 'rms_norm_eps' must be > 0");
    int kvh = 1;
    if (opt_int(root, "num_key_value_heads", 1, 1 << 16, &kvh, err, errlen)) return -1;
    if (kvh != 1) FAIL("field 'num_key_value_heads' is %d, V4 has one shared KV head", kvh);
    if (c->n_heads % c->o_groups) FAIL("field 'o_groups' (%d) does not divide num_attention_heads (%d)",
                                       c->o_groups, c->n_heads);

    /* rope_dim: qk_rope_head_dim, or head_dim * partial_rotary_factor; both must agree */
    c->rope_dim = -1;
    if (opt_int(root, "qk_rope_head_dim", 0, c->head_dim, &c->rope_dim, err, errlen)) return -1;
    double prf = -1;
    if (get_num(root, "partial_rotary_factor", &prf, 0, err, errlen)) return -1;
    if (prf >= 0) {
        int rd = (int)lround(prf * c->head_dim);
        if (c->rope_dim >= 0 && rd != c->rope_dim)
            FAIL("partial_rotary_factor %g * head_dim %d = %d, qk_rope_head_dim is %d", prf, c->head_dim, rd,
                 c->rope_dim);
        c->rope_dim = rd;
    }
    if (c->rope_dim < 0) FAIL("field 'qk_rope_head_dim' missing");
    if (c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > c->head_dim)
        FAIL("field 'qk_rope_head_dim' is %d: must be even, >= 2 and <= head_dim %d", c->rope_dim, c->head_dim);

    if (get_int(root, "n_routed_experts", 1, 1 << 20, &c->n_routed_experts, err, errlen)) return -1;
    if (get_int(root, "n_shared_experts", 0, 64, &c->n_shared_experts, err, errlen)) return -1;
    if (get_int(root, "num_experts_per_tok", 1, c->n_routed_experts, &c->n_active, err, errlen)) return -1;
    if (get_int(root, "moe_intermediate_size", 1, 1 << 20, &c->moe_inter, err, errlen)) return -1;
    c->route_scale = 1.0f;
    if (get_float(root, "routed_scaling_factor", &c->route_scale, 1, err, errlen)) return -1;
    c->swiglu_limit = 0.0f;
    if (get_float(root, "swiglu_limit", &c->swiglu_limit, 0, err, errlen)) return -1;
    c->score_func = V4_SCORE_SQRTSOFTPLUS;
    const json_t *sf = json_object_get(root, "scoring_func");
    if (sf && !json_is_null(sf)) {
        const char *s = json_is_string(sf) ? json_string_value(sf) : "";
        if (!strcmp(s, "sqrtsoftplus")) c->score_func = V4_SCORE_SQRTSOFTPLUS;
        else if (!strcmp(s, "softmax")) c->score_func = V4_SCORE_SOFTMAX;
        else if (!strcmp(s, "sigmoid")) c->score_func = V4_SCORE_SIGMOID;
        else FAIL("field 'scoring_func' must be sqrtsoftplus, softmax or sigmoid");
    }

    if (get_int(root, "hc_mult", 1, 64, &c->hc_mult, err, errlen)) return -1;
    c->hc_sinkhorn_iters = 20;
    if (opt_int(root, "hc_sinkhorn_iters", 1, 10000, &c->hc_sinkhorn_iters, err, errlen)) return -1;
    c->hc_eps = 1e-6f;
    if (get_float(root, "hc_eps", &c->hc_eps, 0, err, errlen)) return -1;

    c->n_mtp_layers = 0;
    if (opt_int(root, "num_nextn_predict_layers", 0, 64, &c->n_mtp_layers, err, errlen)) return -1;
    if (get_int(root, "max_position_embeddings", 1, BIG, &c->max_position, err, errlen)) return -1;

    /* per-layer attention / MoE kinds */
    const json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        c->hub_format = 0;
        if (parse_layers_hf(root, c, err, errlen)) return -1;
    } else if (json_object_get(root, "compress_ratios")) {
        c->hub_format = 1;
        if (parse_layers_hub(root, c, err, errlen)) return -1;
    } else {
        FAIL("field 'layer_types' missing (nor 'compress_ratios')");
    }
    int any_csa = 0;
    for (int i = 0; i < c->n_layers; i++) any_csa |= c->compress_ratio[i] == 4;
    if (any_csa) {
        if (get_int(root, "index_n_heads", 1, 1 << 16, &c->index_n_heads, err, errlen)) return -1;
        if (get_int(root, "index_head_dim", 1, 1 << 16, &c->index_head_dim, err, errlen)) return -1;
        if (get_int(root, "index_topk", 1, BIG, &c->index_topk, err, errlen)) return -1;
        if (c->index_head_dim < c->rope_dim)
            FAIL("field 'index_head_dim' (%d) is smaller than qk_rope_head_dim (%d)", c->index_head_dim, c->rope_dim);
    }

    /* rope: transformers rope_parameters.{main,compress}; hub rope_theta/compress_rope_theta/rope_scaling */
    double theta = 10000.0, ctheta = 160000.0;
    if (get_num(root, "rope_theta", &theta, 0, err, errlen)) return -1;
    if (get_num(root, "compress_rope_theta", &ctheta, 0, err, errlen)) return -1;
    const json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) FAIL("field 'rope_parameters' must be an object");
        const json_t *m = json_object_get(rp, "main"), *cm = json_object_get(rp, "compress");
        if (!m && !cm) {
            /* flat form: one rope for every layer type */
            if (parse_rope(rp, "rope_parameters", theta, &c->rope_main, err, errlen)) return -1;
            if (parse_rope(rp, "rope_parameters", ctheta, &c->rope_compress, err, errlen)) return -1;
            c->rope_compress.theta = ctheta;
        } else {
            if (!m) FAIL("field 'rope_parameters.main' missing");
            if (!cm) FAIL("field 'rope_parameters.compress' missing");
            if (parse_rope(m, "rope_parameters.main", theta, &c->rope_main, err, errlen)) return -1;
            if (parse_rope(cm, "rope_parameters.compress", ctheta, &c->rope_compress, err, errlen)) return -1;
        }
    } else {
        /* hub: YaRN (rope_scaling) applies to the compress rope only (V4_SPEC §1) */
        if (parse_rope(NULL, "rope_theta", theta, &c->rope_main, err, errlen)) return -1;
        if (parse_rope(json_object_get(root, "rope_scaling"), "rope_scaling", ctheta, &c->rope_compress, err,
                       errlen))
            return -1;
        c->rope_compress.theta = ctheta;
    }
    if (!(c->rope_main.theta > 1.0)) FAIL("field 'rope_theta' must be > 1");
    if (!(c->rope_compress.theta > 1.0)) FAIL("field 'compress_rope_theta' must be > 1");

    /* special tokens */
    c->bos_id = -1;
    if (opt_int(root, "bos_token_id", 0, BIG, &c->bos_id, err, errlen)) return -1;
    c->n_eos = 0;
    const json_t *eos = json_object_get(root, "eos_token_id");
    if (json_is_array(eos)) {
        if (json_array_size(eos) > V4_MAX_EOS) FAIL("field 'eos_token_id' has more than %d ids", V4_MAX_EOS);
        for (size_t i = 0; i < json_array_size(eos); i++)
            if (json_to_int(json_array_get(eos, i), 0, c->vocab_size - 1, &c->eos_ids[c->n_eos++]))
                FAIL("field 'eos_token_id' must hold token ids < vocab_size");
    } else if (eos && !json_is_null(eos)) {
        if (json_to_int(eos, 0, c->vocab_size - 1, &c->eos_ids[0])) FAIL("field 'eos_token_id' must be a token id < vocab_size");
        c->n_eos = 1;
    }

    /* quantisation description (the loader detects formats from tensor dtypes; this only checks) */
    const json_t *qc = json_object_get(root, "quantization_config");
    if (qc && !json_is_null(qc)) {
        if (!json_is_object(qc)) FAIL("field 'quantization_config' must be an object");
        const json_t *qm = json_object_get(qc, "quant_method");
        if (qm && json_is_string(qm)) {
            snprintf(c->quant_method, sizeof(c->quant_method), "%s", json_string_value(qm));
        }
        const json_t *bs = json_object_get(qc, "weight_block_size");
        if (bs && !json_is_null(bs)) {
            int b0 = 0, b1 = 0;
            if (!json_is_array(bs) || json_array_size(bs) != 2 || json_to_int(json_array_get(bs, 0), 1, BIG, &b0) ||
                json_to_int(json_array_get(bs, 1), 1, BIG, &b1) || b0 != 128 || b1 != 128)
                FAIL("field 'quantization_config.weight_block_size' must be [128, 128]");
        }
    }
    const json_t *ed = json_object_get(root, "expert_dtype");
    if (ed && !json_is_null(ed)) {
        if (!json_is_string(ed)) FAIL("field 'expert_dtype' must be a string");
        snprintf(c->expert_dtype, sizeof(c->expert_dtype), "%s", json_string_value(ed));
    }

    /* products the loader and the forward pass compute in int must fit */
    const struct { const char *what; long long v; } prods[] = {
        {"num_attention_heads * head_dim", (long long)c->n_heads * c->head_dim},
        {"o_groups * o_lora_rank", (long long)c->o_groups * c->o_lora_rank},
        {"hc_mult * hidden_size", (long long)c->hc_mult * c->dim},
        {"(2 + hc_mult) * hc_mult * hc_mult * hidden_size", (long long)(2 + c->hc_mult) * c->hc_mult * c->hc_mult * c->dim},
        {"index_n_heads * index_head_dim", (long long)c->index_n_heads * c->index_head_dim},
        {"moe_intermediate_size * n_shared_experts", (long long)c->moe_inter * c->n_shared_experts},
        {"vocab_size * num_experts_per_tok", (long long)c->vocab_size * c->n_active},
    };
    for (size_t i = 0; i < sizeof(prods) / sizeof(prods[0]); i++)
        if (prods[i].v > (1LL << 31) - 1) FAIL("%s = %lld is too large", prods[i].what, prods[i].v);

    const json_t *nm = json_object_get(root, "_name_or_path");
    if (json_is_string(nm) && json_string_length(nm) > 0) {
        const char *s = json_string_value(nm), *sl = strrchr(s, '/');
        snprintf(c->model_id, sizeof(c->model_id), "%s", sl && sl[1] ? sl + 1 : s);
    }
    return 0;
}

int v4_config_parse(const char *json, size_t len, v4_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    if (err && errlen) err[0] = 0;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        seterr(err, errlen, "invalid JSON at line %d: %s", je.line, je.text);
        return -1;
    }
    int rc = parse_root(root, cfg, err, errlen);
    json_decref(root);
    if (rc == 0 && !cfg->model_id[0]) snprintf(cfg->model_id, sizeof(cfg->model_id), "model");
    return rc;
}

int v4_config_load(const char *dir, v4_config *cfg, char *err, size_t errlen)
{
    char path[4096];
    memset(cfg, 0, sizeof(*cfg));
    if (snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path)) {
        seterr(err, errlen, "path too long");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "%s: cannot open", path);
        return -1;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            if (cap > (64u << 20)) {
                free(buf);
                fclose(f);
                seterr(err, errlen, "file larger than 64 MiB");
                return -1;
            }
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(f);
                seterr(err, errlen, "out of memory");
                return -1;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        seterr(err, errlen, "read error");
        return -1;
    }
    int rc = v4_config_parse(buf, n, cfg, err, errlen);
    free(buf);
    if (rc == 0 && !strcmp(cfg->model_id, "model")) {
        /* directory basename, trailing slashes ignored */
        size_t L = strlen(dir);
        while (L > 1 && dir[L - 1] == '/') L--;
        size_t s = L;
        while (s > 0 && dir[s - 1] != '/') s--;
        if (L > s) {
            size_t m = L - s < sizeof(cfg->model_id) - 1 ? L - s : sizeof(cfg->model_id) - 1;
            memcpy(cfg->model_id, dir + s, m);
            cfg->model_id[m] = 0;
        }
    }
    return rc;
}
