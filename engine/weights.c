/* weights.c — bind a V4 checkpoint's tensors by role, in either naming (see weights.h). */
#include "weights.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 256

typedef struct {
    const st_model *st;
    const v4_config *c;
    int hf;                 /* 1: transformers naming (model. prefix) is primary */
    char *err;
    size_t errlen;
} ctx;

static void seterr(ctx *x, const char *fmt, ...)
{
    if (!x->err || !x->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, x->errlen, fmt, ap);
    va_end(ap);
    for (char *p = x->err; *p; p++) /* one line, whatever names a hostile file holds */
        if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
}

// ----------------------------------------------------------------------------
// names

/* Find a tensor by trying candidate names in order; `name` gets the one found, or the first
 * candidate (for the error message) when none exists. NULL candidates are skipped. */
static const st_tensor *find_first(ctx *x, char *name, const char *const *cands, int n)
{
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        const st_tensor *t = st_find(x->st, cands[i]);
        if (t) {
            snprintf(name, NAME_MAX_LEN, "%s", cands[i]);
            return t;
        }
    }
    for (int i = 0; i < n; i++)
        if (cands[i]) {
            snprintf(name, NAME_MAX_LEN, "%s", cands[i]);
            break;
        }
    return NULL;
}

/* A top-level tensor: hub name and transformers name (plus an optional extra alias). */
static const st_tensor *find_top(ctx *x, char *name, const char *hub, const char *hf, const char *alt)
{
    const char *c[3] = {x->hf ? hf : hub, x->hf ? hub : hf, alt};
    return find_first(x, name, c, 3);
}

/* A per-layer tensor `layers.L.<sfx>` (hub) / `model.layers.L.<hf_sfx or sfx>` (transformers);
 * alt_sfx is one more accepted spelling (both prefixes). */
static const st_tensor *find_layer(ctx *x, char *name, int L, const char *sfx, const char *hf_sfx,
                                   const char *alt_sfx)
{
    char hub[NAME_MAX_LEN], hf[NAME_MAX_LEN], hf2[NAME_MAX_LEN], a1[NAME_MAX_LEN], a2[NAME_MAX_LEN];
    snprintf(hub, sizeof(hub), "layers.%d.%s", L, sfx);
    snprintf(hf, sizeof(hf), "model.layers.%d.%s", L, hf_sfx ? hf_sfx : sfx);
    snprintf(hf2, sizeof(hf2), "model.layers.%d.%s", L, sfx);
    snprintf(a1, sizeof(a1), "model.layers.%d.%s", L, alt_sfx ? alt_sfx : "");
    snprintf(a2, sizeof(a2), "layers.%d.%s", L, alt_sfx ? alt_sfx : "");
    const char *c[5] = {x->hf ? hf : hub, x->hf ? hub : hf, hf_sfx ? hf2 : NULL, alt_sfx ? a1 : NULL,
                        alt_sfx ? a2 : NULL};
    return find_first(x, name, c, 5);
}

// ----------------------------------------------------------------------------
// shapes and conversions

static void shape_str(char *buf, size_t n, const int64_t *s, int nd)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)s[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Exact shape check; nd = number of expected dims. A scalar expectation (nd 0) also accepts [1]. */
static int check_shape(ctx *x, const char *name, const st_tensor *t, int nd, const int64_t *want)
{
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok && nd == 0 && t->ndim == 1 && t->shape[0] == 1) ok = 1;
    if (ok) return 0;
    char have[96], exp[96];
    shape_str(have, sizeof(have), t->shape, t->ndim);
    shape_str(exp, sizeof(exp), want, nd);
    seterr(x, "tensor '%s': shape %s, expected %s", name, have, exp);
    return -1;
}

static int check2(ctx *x, const char *name, const st_tensor *t, int64_t r, int64_t c)
{
    int64_t s[2] = {r, c};
    return check_shape(x, name, t, 2, s);
}

static int missing(ctx *x, const char *name)
{
    seterr(x, "tensor '%s' missing", name);
    return -1;
}

/* Copy a float-typed tensor into an owned float array (after the caller's shape check). */
static float *to_f32(ctx *x, const char *name, const st_tensor *t)
{
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    float *o = malloc((n ? n : 1) * sizeof(float));
    if (!o) {
        seterr(x, "tensor '%s': out of memory", name);
        return NULL;
    }
    const unsigned char *d = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case ST_F32: memcpy(&o[i], d + 4 * i, 4); break;
        case ST_BF16: memcpy(&h, d + 2 * i, 2); o[i] = qt_bf16_to_f32(h); break;
        case ST_F16: memcpy(&h, d + 2 * i, 2); o[i] = qt_f16_to_f32(h); break;
        default:
            free(o);
            seterr(x, "tensor '%s': dtype %s, expected F32, BF16 or F16", name, st_dtype_name(t->dtype));
            return NULL;
        }
    }
    return o;
}

/* A small float parameter of the given shape -> owned float array. */
static int load_vec(ctx *x, const st_tensor *t, const char *name, int nd, int64_t d0, int64_t d1, float **out)
{
    if (!t) return missing(x, name);
    int64_t s[2] = {d0, d1};
    if (check_shape(x, name, t, nd, s)) return -1;
    *out = to_f32(x, name, t);
    return *out ? 0 : -1;
}

static int scalar_f32(ctx *x, const char *name, float *out)
{
    const st_tensor *t = st_find(x->st, name);
    if (!t) return missing(x, name);
    if (check_shape(x, name, t, 0, NULL)) return -1;
    if (t->dtype != ST_F32) {
        seterr(x, "tensor '%s': dtype %s, expected F32", name, st_dtype_name(t->dtype));
        return -1;
    }
    memcpy(out, t->data, 4);
    if (!isfinite(*out)) {
        seterr(x, "tensor '%s': not a finite number", name);
        return -1;
    }
    return 0;
}

/* A 2-D weight [rows, cols] in any supported format; companions are named after `name`
 * with the trailing ".weight" replaced. */
static int bind_q(ctx *x, const st_tensor *t, const char *name, int rows, int cols, qtensor *q)
{
    memset(q, 0, sizeof(*q));
    if (!t) return missing(x, name);
    q->rows = rows;
    q->cols = cols;
    q->scale2 = 1.0f;
    q->data = t->data;
    char base[NAME_MAX_LEN], cn[NAME_MAX_LEN + 32];
    snprintf(base, sizeof(base), "%s", name);
    size_t bl = strlen(base);
    if (bl > 7 && !strcmp(base + bl - 7, ".weight")) base[bl - 7] = 0;
    switch (t->dtype) {
    case ST_F32: q->fmt = QT_F32; return check2(x, name, t, rows, cols);
    case ST_BF16: q->fmt = QT_BF16; return check2(x, name, t, rows, cols);
    case ST_F16: q->fmt = QT_F16; return check2(x, name, t, rows, cols);
    case ST_F8_E4M3: {
        if (check2(x, name, t, rows, cols)) return -1;
        snprintf(cn, sizeof(cn), "%s.scale", base);
        const st_tensor *s = st_find(x->st, cn);
        if (!s) {
            snprintf(cn, sizeof(cn), "%s.weight_scale_inv", base);
            s = st_find(x->st, cn);
        }
        if (!s) {
            snprintf(cn, sizeof(cn), "%s.scale", base);
            seterr(x, "tensor '%s' (F8_E4M3) has no block scale '%s'", name, cn);
            return -1;
        }
        if (s->dtype != ST_F8_E8M0 && s->dtype != ST_F32) {
            seterr(x, "tensor '%s': dtype %s, expected F8_E8M0 or F32", cn, st_dtype_name(s->dtype));
            return -1;
        }
        if (check2(x, cn, s, (rows + 127) / 128, (cols + 127) / 128)) return -1;
        q->fmt = QT_FP8_B128;
        q->scale = s->data;
        q->scale_is_f32 = s->dtype == ST_F32;
        return 0;
    }
    case ST_I8:
    case ST_U8: {
        if (check2(x, name, t, rows, (cols + 1) / 2)) return -1;
        snprintf(cn, sizeof(cn), "%s.scale", base);
        const st_tensor *s = st_find(x->st, cn);
        if (s) { /* MXFP4: E8M0 per 32 inputs */
            if (s->dtype != ST_F8_E8M0) {
                seterr(x, "tensor '%s': dtype %s, expected F8_E8M0", cn, st_dtype_name(s->dtype));
                return -1;
            }
            if (check2(x, cn, s, rows, (cols + 31) / 32)) return -1;
            q->fmt = QT_MXFP4;
            q->scale = s->data;
            return 0;
        }
        snprintf(cn, sizeof(cn), "%s.weight_scale", base);
        s = st_find(x->st, cn);
        if (!s) {
            seterr(x, "tensor '%s' (%s, packed FP4) has neither '%s.scale' (MXFP4) nor '%s' (NVFP4)", name,
                   st_dtype_name(t->dtype), base, cn);
            return -1;
        }
        if (s->dtype != ST_F8_E4M3) {
            seterr(x, "tensor '%s': dtype %s, expected F8_E4M3", cn, st_dtype_name(s->dtype));
            return -1;
        }
        if (check2(x, cn, s, rows, (cols + 15) / 16)) return -1;
        q->fmt = QT_NVFP4;
        q->scale = s->data;
        snprintf(cn, sizeof(cn), "%s.weight_scale_2", base);
        if (scalar_f32(x, cn, &q->scale2)) return -1;
        snprintf(cn, sizeof(cn), "%s.input_scale", base);
        if (st_find(x->st, cn) && scalar_f32(x, cn, &q->input_scale)) return -1;
        return 0;
    }
    default:
        seterr(x, "tensor '%s': dtype %s is not a weight format", name, st_dtype_name(t->dtype));
        return -1;
    }
}

static int layer_q(ctx *x, int L, const char *sfx, int rows, int cols, qtensor *q)
{
    char name[NAME_MAX_LEN];
    const st_tensor *t = find_layer(x, name, L, sfx, NULL, NULL);
    return bind_q(x, t, name, rows, cols, q);
}

static int layer_vec(ctx *x, int L, const char *sfx, const char *hf_sfx, int nd, int64_t d0, int64_t d1,
                     float **out)
{
    char name[NAME_MAX_LEN];
    const st_tensor *t = find_layer(x, name, L, sfx, hf_sfx, NULL);
    return load_vec(x, t, name, nd, d0, d1, out);
}

// ----------------------------------------------------------------------------
// one layer

static int load_compressor(ctx *x, int L, const char *pfx, int ratio, int d, v4_compressor_w *cw)
{
    const v4_config *c = x->c;
    int coff = ratio == 4 ? 2 : 1;
    char s[128];
    snprintf(s, sizeof(s), "%s.wkv.weight", pfx);
    if (layer_q(x, L, s, coff * d, c->dim, &cw->wkv)) return -1;
    snprintf(s, sizeof(s), "%s.wgate.weight", pfx);
    if (layer_q(x, L, s, coff * d, c->dim, &cw->wgate)) return -1;
    snprintf(s, sizeof(s), "%s.ape", pfx);
    if (layer_vec(x, L, s, NULL, 2, ratio, (int64_t)coff * d, &cw->ape)) return -1;
    snprintf(s, sizeof(s), "%s.norm.weight", pfx);
    return layer_vec(x, L, s, NULL, 1, d, 0, &cw->norm);
}

static int load_tid2eid(ctx *x, int L, int32_t **out)
{
    const v4_config *c = x->c;
    char name[NAME_MAX_LEN];
    const st_tensor *t = find_layer(x, name, L, "ffn.gate.tid2eid", NULL, NULL);
    if (!t) return missing(x, name);
    if (t->dtype != ST_I64 && t->dtype != ST_I32) {
        seterr(x, "tensor '%s': dtype %s, expected I64 or I32", name, st_dtype_name(t->dtype));
        return -1;
    }
    if (check2(x, name, t, c->vocab_size, c->n_active)) return -1;
    size_t n = (size_t)c->vocab_size * c->n_active;
    int32_t *o = malloc(n * sizeof(int32_t));
    if (!o) {
        seterr(x, "tensor '%s': out of memory", name);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (t->dtype == ST_I64) memcpy(&v, (const unsigned char *)t->data + 8 * i, 8);
        else {
            int32_t i32;
            memcpy(&i32, (const unsigned char *)t->data + 4 * i, 4);
            v = i32;
        }
        if (v < 0 || v >= c->n_routed_experts) {
            free(o);
            seterr(x, "tensor '%s': entry %zu is %lld, not an expert id < %d", name, i, (long long)v,
                   c->n_routed_experts);
            return -1;
        }
        o[i] = (int32_t)v;
    }
    *out = o;
    return 0;
}

/* Routed experts stored fused, as transformers' fused-MoE modules save them:
 * experts.gate_up_proj [E, 2I, D] (w1 rows, then w3 rows) and experts.down_proj [E, D, I], float
 * dtypes only; each expert's matrices become views into them. */
static int load_fused_experts(ctx *x, int L, v4_layer_w *l)
{
    const v4_config *c = x->c;
    const int E = c->n_routed_experts, I = c->moe_inter, D = c->dim;
    char gn[NAME_MAX_LEN], dn[NAME_MAX_LEN];
    const st_tensor *gu = find_layer(x, gn, L, "ffn.experts.gate_up_proj", NULL, "mlp.experts.gate_up_proj");
    const st_tensor *dp = find_layer(x, dn, L, "ffn.experts.down_proj", NULL, "mlp.experts.down_proj");
    if (!gu) return missing(x, gn);
    if (!dp) return missing(x, dn);
    int64_t sg[3] = {E, 2 * (int64_t)I, D}, sd[3] = {E, D, I};
    if (check_shape(x, gn, gu, 3, sg) || check_shape(x, dn, dp, 3, sd)) return -1;
    const st_tensor *ts[2] = {gu, dp};
    const char *ns[2] = {gn, dn};
    qt_format f[2];
    for (int k = 0; k < 2; k++) {
        switch (ts[k]->dtype) {
        case ST_F32: f[k] = QT_F32; break;
        case ST_BF16: f[k] = QT_BF16; break;
        case ST_F16: f[k] = QT_F16; break;
        default:
            seterr(x, "tensor '%s': dtype %s, fused experts must be F32, BF16 or F16", ns[k],
                   st_dtype_name(ts[k]->dtype));
            return -1;
        }
    }
    const size_t eg = st_dtype_size(gu->dtype), ed = st_dtype_size(dp->dtype), mat = (size_t)I * D;
    for (int e = 0; e < E; e++) {
        v4_expert_w *ex = &l->experts[e];
        const unsigned char *g = (const unsigned char *)gu->data + (size_t)e * 2 * mat * eg;
        ex->w1 = (qtensor){.fmt = f[0], .rows = I, .cols = D, .data = g, .scale2 = 1.0f};
        ex->w3 = (qtensor){.fmt = f[0], .rows = I, .cols = D, .data = g + mat * eg, .scale2 = 1.0f};
        ex->w2 = (qtensor){.fmt = f[1], .rows = D, .cols = I,
                           .data = (const unsigned char *)dp->data + (size_t)e * mat * ed, .scale2 = 1.0f};
    }
    return 0;
}

static int load_layer(ctx *x, int L, v4_layer_w *l)
{
    const v4_config *c = x->c;
    const int D = c->dim, H = c->n_heads, hd = c->head_dim, hc = c->hc_mult, mix = (2 + hc) * hc;
    const int E = c->n_routed_experts, I = c->moe_inter;
    char name[NAME_MAX_LEN];

    if (layer_vec(x, L, "hc_attn_fn", NULL, 2, mix, (int64_t)hc * D, &l->hc_attn_fn) ||
        layer_vec(x, L, "hc_attn_base", NULL, 1, mix, 0, &l->hc_attn_base) ||
        layer_vec(x, L, "hc_attn_scale", NULL, 1, 3, 0, &l->hc_attn_scale) ||
        layer_vec(x, L, "hc_ffn_fn", NULL, 2, mix, (int64_t)hc * D, &l->hc_ffn_fn) ||
        layer_vec(x, L, "hc_ffn_base", NULL, 1, mix, 0, &l->hc_ffn_base) ||
        layer_vec(x, L, "hc_ffn_scale", NULL, 1, 3, 0, &l->hc_ffn_scale) ||
        layer_vec(x, L, "attn_norm.weight", NULL, 1, D, 0, &l->attn_norm) ||
        layer_vec(x, L, "ffn_norm.weight", NULL, 1, D, 0, &l->ffn_norm))
        return -1;

    /* attention */
    if (layer_q(x, L, "attn.wq_a.weight", c->q_lora_rank, D, &l->wq_a) ||
        layer_vec(x, L, "attn.q_norm.weight", NULL, 1, c->q_lora_rank, 0, &l->q_norm) ||
        layer_q(x, L, "attn.wq_b.weight", H * hd, c->q_lora_rank, &l->wq_b) ||
        layer_q(x, L, "attn.wkv.weight", hd, D, &l->wkv) ||
        layer_vec(x, L, "attn.kv_norm.weight", "attn.norm.weight", 1, hd, 0, &l->kv_norm) ||
        layer_q(x, L, "attn.wo_a.weight", c->o_groups * c->o_lora_rank, H * hd / c->o_groups, &l->wo_a) ||
        layer_q(x, L, "attn.wo_b.weight", D, c->o_groups * c->o_lora_rank, &l->wo_b) ||
        layer_vec(x, L, "attn.attn_sink", NULL, 1, H, 0, &l->attn_sink))
        return -1;
    l->ratio = c->compress_ratio[L];
    if (l->ratio > 0 && load_compressor(x, L, "attn.compressor", l->ratio, hd, &l->comp)) return -1;
    if (l->ratio == 4) {
        if (load_compressor(x, L, "attn.indexer.compressor", 4, c->index_head_dim, &l->icomp) ||
            layer_q(x, L, "attn.indexer.wq_b.weight", c->index_n_heads * c->index_head_dim, c->q_lora_rank,
                    &l->iwq_b) ||
            layer_q(x, L, "attn.indexer.weights_proj.weight", c->index_n_heads, D, &l->iweights))
            return -1;
    }

    /* MoE router */
    if (layer_q(x, L, "ffn.gate.weight", E, D, &l->gate)) return -1;
    const st_tensor *bt = find_layer(x, name, L, "ffn.gate.bias", NULL, "ffn.gate.e_score_correction_bias");
    if (c->hash_layer[L]) {
        if (load_tid2eid(x, L, &l->tid2eid)) return -1;
        if (bt && load_vec(x, bt, name, 1, E, 0, &l->gate_bias)) return -1; /* present but unused */
    } else {
        if (load_vec(x, bt, name, 1, E, 0, &l->gate_bias)) return -1;
    }

    /* experts */
    l->experts = calloc((size_t)E, sizeof(v4_expert_w));
    if (!l->experts) {
        seterr(x, "out of memory");
        return -1;
    }
    if (!find_layer(x, name, L, "ffn.experts.0.w1.weight", NULL, NULL) &&
        find_layer(x, name, L, "ffn.experts.gate_up_proj", NULL, "mlp.experts.gate_up_proj")) {
        if (load_fused_experts(x, L, l)) return -1;
    } else {
        for (int e = 0; e < E; e++) {
            char s[96];
            snprintf(s, sizeof(s), "ffn.experts.%d.w1.weight", e);
            if (layer_q(x, L, s, I, D, &l->experts[e].w1)) return -1;
            snprintf(s, sizeof(s), "ffn.experts.%d.w2.weight", e);
            if (layer_q(x, L, s, D, I, &l->experts[e].w2)) return -1;
            snprintf(s, sizeof(s), "ffn.experts.%d.w3.weight", e);
            if (layer_q(x, L, s, I, D, &l->experts[e].w3)) return -1;
        }
    }
    if (c->n_shared_experts > 0) {
        int Is = I * c->n_shared_experts;
        if (layer_q(x, L, "ffn.shared_experts.w1.weight", Is, D, &l->shared.w1) ||
            layer_q(x, L, "ffn.shared_experts.w2.weight", D, Is, &l->shared.w2) ||
            layer_q(x, L, "ffn.shared_experts.w3.weight", Is, D, &l->shared.w3))
            return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// ModelOpt hf_quant_config.json (optional; checked when present)

static int check_hf_quant(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/hf_quant_config.json", dir) >= (int)sizeof(path)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root) {
        snprintf(err, errlen, "hf_quant_config.json: invalid JSON (%s, line %d)", je.text, je.line);
        return -1;
    }
    int rc = 0;
    const json_t *q = json_object_get(root, "quantization");
    const json_t *gs = q ? json_object_get(q, "group_size") : NULL;
    if (gs && (!json_is_integer(gs) || json_integer_value(gs) != 16)) {
        snprintf(err, errlen, "hf_quant_config.json: field 'quantization.group_size' must be 16 (NVFP4)");
        rc = -1;
    }
    json_decref(root);
    return rc;
}

// ----------------------------------------------------------------------------
// public

int v4_weights_load(const char *dir, v4_weights *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    if (err && errlen) err[0] = 0;
    if (v4_config_load(dir, &w->cfg, err, errlen)) return -1;
    if (check_hf_quant(dir, err, errlen)) return -1;
    if (st_open_dir(dir, &w->st, err, errlen)) return -1;
    const v4_config *c = &w->cfg;
    ctx x = {w->st, c, 0, err, errlen};
    x.hf = st_find(w->st, "model.embed_tokens.weight") || st_find(w->st, "model.norm.weight");
    char name[NAME_MAX_LEN];
    const int D = c->dim, hc = c->hc_mult;
    const st_tensor *t;

    t = find_top(&x, name, "embed.weight", "model.embed_tokens.weight", "model.embed.weight");
    if (bind_q(&x, t, name, c->vocab_size, D, &w->embed)) goto fail;
    t = find_top(&x, name, "head.weight", "head.weight", "lm_head.weight");
    if (bind_q(&x, t, name, c->vocab_size, D, &w->head)) goto fail;
    t = find_top(&x, name, "norm.weight", "model.norm.weight", NULL);
    if (load_vec(&x, t, name, 1, D, 0, &w->norm)) goto fail;
    t = find_top(&x, name, "hc_head_fn", "model.hc_head.hc_fn", "model.hc_head_fn");
    if (load_vec(&x, t, name, 2, hc, (int64_t)hc * D, &w->hc_head_fn)) goto fail;
    t = find_top(&x, name, "hc_head_base", "model.hc_head.hc_base", "model.hc_head_base");
    if (load_vec(&x, t, name, 1, hc, 0, &w->hc_head_base)) goto fail;
    t = find_top(&x, name, "hc_head_scale", "model.hc_head.hc_scale", "model.hc_head_scale");
    if (load_vec(&x, t, name, 1, 1, 0, &w->hc_head_scale)) goto fail;

    w->layers = calloc((size_t)c->n_layers, sizeof(v4_layer_w));
    if (!w->layers) {
        seterr(&x, "out of memory");
        goto fail;
    }
    for (int L = 0; L < c->n_layers; L++)
        if (load_layer(&x, L, &w->layers[L])) goto fail;
    w->expert_format = w->layers[0].experts[0].w1.fmt;
    return 0;
fail:
    v4_weights_free(w);
    return -1;
}

static float amax_of(const float *v, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        if (a > m) m = a;
    }
    return m;
}

static int dequant_all(const qtensor *q, float *out)
{
    for (int r = 0; r < q->rows; r++) qt_dequant_row(q, r, out + (size_t)r * q->cols);
    return 0;
}

int v4_weights_quantize_experts_nvfp4(v4_weights *w, char *err, size_t errlen)
{
    const v4_config *c = &w->cfg;
    const size_t n13 = (size_t)c->moe_inter * c->dim;
    float *b1 = malloc(n13 * sizeof(float)), *b2 = malloc(n13 * sizeof(float)), *b3 = malloc(n13 * sizeof(float));
    int rc = -1;
    if (!b1 || !b2 || !b3) {
        snprintf(err, errlen, "quantize experts: out of memory");
        goto out;
    }
    for (int L = 0; L < c->n_layers; L++) {
        for (int e = 0; e < c->n_routed_experts; e++) {
            v4_expert_w *ex = &w->layers[L].experts[e];
            if (ex->w1.fmt == QT_NVFP4 && ex->w2.fmt == QT_NVFP4 && ex->w3.fmt == QT_NVFP4) continue;
            dequant_all(&ex->w1, b1);
            dequant_all(&ex->w2, b2);
            dequant_all(&ex->w3, b3);
            /* w1 and w3 share weight_scale_2 (fused gate/up GEMM), w2 has its own */
            float a13 = fmaxf(amax_of(b1, n13), amax_of(b3, n13));
            float s13 = qt_nvfp4_scale2(a13), s2 = qt_nvfp4_scale2(amax_of(b2, n13));
            qtensor q1, q2, q3;
            if (qt_quantize_nvfp4_s2(b1, c->moe_inter, c->dim, s13, &q1)) goto oom;
            if (qt_quantize_nvfp4_s2(b2, c->dim, c->moe_inter, s2, &q2)) {
                qt_free(&q1);
                goto oom;
            }
            if (qt_quantize_nvfp4_s2(b3, c->moe_inter, c->dim, s13, &q3)) {
                qt_free(&q1);
                qt_free(&q2);
                goto oom;
            }
            qt_free(&ex->w1);
            qt_free(&ex->w2);
            qt_free(&ex->w3);
            ex->w1 = q1;
            ex->w2 = q2;
            ex->w3 = q3;
        }
    }
    w->expert_format = QT_NVFP4;
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "quantize experts: out of memory");
out:
    free(b1);
    free(b2);
    free(b3);
    return rc;
}

static void free_comp(v4_compressor_w *cw)
{
    qt_free(&cw->wkv);
    qt_free(&cw->wgate);
    free(cw->ape);
    free(cw->norm);
}

void v4_weights_free(v4_weights *w)
{
    if (!w) return;
    if (w->layers) {
        for (int L = 0; L < w->cfg.n_layers; L++) {
            v4_layer_w *l = &w->layers[L];
            free(l->hc_attn_fn);
            free(l->hc_attn_base);
            free(l->hc_attn_scale);
            free(l->hc_ffn_fn);
            free(l->hc_ffn_base);
            free(l->hc_ffn_scale);
            free(l->attn_norm);
            free(l->ffn_norm);
            qt_free(&l->wq_a);
            free(l->q_norm);
            qt_free(&l->wq_b);
            qt_free(&l->wkv);
            free(l->kv_norm);
            qt_free(&l->wo_a);
            qt_free(&l->wo_b);
            free(l->attn_sink);
            free_comp(&l->comp);
            free_comp(&l->icomp);
            qt_free(&l->iwq_b);
            qt_free(&l->iweights);
            qt_free(&l->gate);
            free(l->gate_bias);
            free(l->tid2eid);
            if (l->experts)
                for (int e = 0; e < w->cfg.n_routed_experts; e++) {
                    qt_free(&l->experts[e].w1);
                    qt_free(&l->experts[e].w2);
                    qt_free(&l->experts[e].w3);
                }
            free(l->experts);
            qt_free(&l->shared.w1);
            qt_free(&l->shared.w2);
            qt_free(&l->shared.w3);
        }
        free(w->layers);
    }
    qt_free(&w->embed);
    qt_free(&w->head);
    free(w->hc_head_fn);
    free(w->hc_head_base);
    free(w->hc_head_scale);
    free(w->norm);
    st_close(w->st);
    memset(w, 0, sizeof(*w));
}
