/* synthetic.c — V4-Flash-shaped models with seeded random weights (synthetic.h).
 *
 * The config is V4-Flash's published one (shared/reference/v4_flash_config.json) written as a hub
 * config.json and read by the normal parser, so a synthetic model is checked like a checkpoint.
 * Weights come in the dtypes DeepSeek ships: FP8 E4M3 with power-of-two 128x128 block scales for
 * wq_a, wq_b, wkv, wo_a, wo_b, the indexer's wq_b and the shared expert; bf16 for the compressors,
 * the indexer's weights_proj, the embedding and the head; fp32 for the router, mHC and norms; MXFP4
 * (E8M0 per 32) or NVFP4 (E4M3 per 16 + fp32 scale_2) routed experts.
 *
 * Scales keep activations O(1) through the layers: every projection ~ N(0, 1/fan_in) in effect; mHC
 * fn ~ 1e-3 with bases giving pre ~ 1/4, post ~ 1 and comb close to the identity; sinks and ape 0;
 * the router ~ N(0, 1/dim) with no bias; hash layers' tid2eid uniform. Routing (routing=): "uniform" (the default)
 * routes every layer through a uniform random tid2eid table (V4's hash routing), so each token's top-6 is a uniform
 * random draw and a batch of distinct tokens reads the experts the byte model counts; random gate weights would not
 * do that: the rows of a batch share much of their hidden state, so a gate picks overlapping experts for them.
 * "gate" is V4-Flash's own scheme: hash routing in layers 0..2, the learned gate (random here) after.
 * Values are drawn from small per-tensor tables of quantised normal samples indexed by a xorshift
 * stream seeded from (layer, tensor): fast enough to build 43 layers in seconds, and the same model
 * for the same spec on every machine.
 */
#include "synthetic.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FP4_RMS 2.926f   /* rms of an E2M1 value with uniform random code */

typedef struct { uint64_t s; } rng_t;
static uint64_t rng_next(rng_t *r)
{
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return r->s = x;
}
static rng_t rng_for(uint64_t seed, int layer, int tensor)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(layer + 2) + 0xBF58476D1CE4E5B9ull * (uint64_t)(tensor + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (rng_t){z ? z : 1};
}
/* 256 normal samples (Box-Muller over a fixed stream), times std */
static void normal_table(float std, float *t)
{
    rng_t r = {0x2545F4914F6CDD1Dull};
    for (int i = 0; i < 256; i += 2) {
        const double u1 = ((rng_next(&r) >> 11) + 1.0) / 9007199254740993.0, u2 = (rng_next(&r) >> 11) / 9007199254740992.0;
        const double m = sqrt(-2.0 * log(u1));
        t[i] = (float)(m * cos(6.283185307179586 * u2)) * std;
        t[i + 1] = (float)(m * sin(6.283185307179586 * u2)) * std;
    }
}

static float *vec_const(size_t n, float v)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}
static float *vec_normal(size_t n, float std, rng_t r)
{
    float t[256], *p = malloc((n ? n : 1) * sizeof(float));
    normal_table(std, t);
    if (p)
        for (size_t i = 0; i < n; i += 8) {
            uint64_t b = rng_next(&r);
            for (size_t k = i; k < i + 8 && k < n; k++, b >>= 8) p[k] = t[b & 255];
        }
    return p;
}

static int q_bf16(qtensor *q, int rows, int cols, float std, rng_t r)
{
    float t[256];
    uint16_t tb[256];
    normal_table(std, t);
    for (int i = 0; i < 256; i++) tb[i] = qt_f32_to_bf16(t[i]);
    const size_t n = (size_t)rows * cols;
    uint16_t *d = malloc(n * 2);
    if (!d) return -1;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t b = rng_next(&r);
        for (size_t k = i; k < i + 8 && k < n; k++, b >>= 8) d[k] = tb[b & 255];
    }
    *q = (qtensor){.fmt = QT_BF16, .rows = rows, .cols = cols, .data = d, .scale2 = 1.0f, .owned = d};
    return 0;
}

static int q_f32(qtensor *q, int rows, int cols, float std, rng_t r)
{
    float *d = vec_normal((size_t)rows * cols, std, r);
    if (!d) return -1;
    *q = (qtensor){.fmt = QT_F32, .rows = rows, .cols = cols, .data = d, .scale2 = 1.0f, .owned = d};
    return 0;
}

/* power-of-two E8M0 code nearest to v */
static uint8_t e8m0_of(float v) { return (uint8_t)(127 + (int)lrintf(log2f(v))); }

static int q_fp8(qtensor *q, int rows, int cols, rng_t r)
{
    float t[256];
    uint8_t tc[256];
    normal_table(1.0f, t);
    for (int i = 0; i < 256; i++) tc[i] = qt_f32_to_e4m3(t[i]);
    const size_t n = (size_t)rows * cols;
    const int br = (rows + 127) / 128, bc = (cols + 127) / 128;
    uint8_t *d = malloc(n), *s = malloc((size_t)br * bc);
    if (!d || !s) { free(d); free(s); return -1; }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t b = rng_next(&r);
        for (size_t k = i; k < i + 8 && k < n; k++, b >>= 8) d[k] = tc[b & 255];
    }
    memset(s, e8m0_of(1.0f / sqrtf((float)cols)), (size_t)br * bc);
    *q = (qtensor){.fmt = QT_FP8_B128, .rows = rows, .cols = cols, .data = d, .scale = s, .scale2 = 1.0f,
                   .owned = d, .owned_scale = s};
    return 0;
}

/* Routed expert matrix: host bytes (host != 0) or a description the GPU loader fills (synth_seed). */
static int q_fp4(qtensor *q, int fmt, int rows, int cols, uint64_t seed, int host)
{
    const float target = 1.0f / (FP4_RMS * sqrtf((float)cols));
    *q = (qtensor){.fmt = fmt == SYNTH_NVFP4 ? QT_NVFP4 : QT_MXFP4, .rows = rows, .cols = cols, .scale2 = 1.0f};
    q->synth_seed = seed | 1;
    if (fmt == SYNTH_NVFP4) q->scale2 = target / 1.4375f;   /* E4M3 block scales 1 .. 1.875 */
    q->synth_scale = fmt == SYNTH_NVFP4 ? 0x38 : e8m0_of(target) - 1;   /* + 0..7 / + 0..1 */
    if (!host) return 0;
    const size_t nb = (size_t)rows * (cols / 2), ns = (size_t)rows * (cols / (fmt == SYNTH_NVFP4 ? 16 : 32));
    uint8_t *d = malloc(nb), *s = malloc(ns);
    if (!d || !s) { free(d); free(s); return -1; }
    rng_t r = {q->synth_seed};
    for (size_t i = 0; i < nb; i += 8) {
        const uint64_t b = rng_next(&r);
        memcpy(d + i, &b, nb - i < 8 ? nb - i : 8);
    }
    for (size_t i = 0; i < ns; i++) s[i] = (uint8_t)(q->synth_scale + (rng_next(&r) >> 40) % (fmt == SYNTH_NVFP4 ? 8 : 2));
    q->data = d;
    q->scale = s;
    q->owned = d;
    q->owned_scale = s;
    q->synth_seed = 0;   /* materialised */
    return 0;
}

/* ------------------------------------------------------------------------------ spec */
static int parse_spec(const char *spec, synth_spec *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->layers = 43;
    o->experts = SYNTH_MXFP4;
    o->seed = 1;
    o->routing = SYNTH_ROUTE_UNIFORM;
    if (strncmp(spec, "v4-flash", 8) || (spec[8] && spec[8] != ':')) {
        snprintf(err, errlen, "synthetic model '%s': expected v4-flash[:layers=N,experts=mxfp4|nvfp4,routing=uniform|gate,ratios=a,b,...,seed=S]",
                 spec);
        return -1;
    }
    const char *p = spec[8] ? spec + 9 : spec + 8;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq) { snprintf(err, errlen, "synthetic model '%s': '%s' is not key=value", spec, p); return -1; }
        const size_t kl = (size_t)(eq - p);
        const char *v = eq + 1;
        char *end;
        if (kl == 6 && !strncmp(p, "layers", 6)) {
            long n = strtol(v, &end, 10);
            if (end == v || n < 1 || n > 43) { snprintf(err, errlen, "synthetic model: layers must be 1..43"); return -1; }
            o->layers = (int)n;
        } else if (kl == 7 && !strncmp(p, "experts", 7)) {
            if (!strncmp(v, "mxfp4", 5)) o->experts = SYNTH_MXFP4, end = (char *)v + 5;
            else if (!strncmp(v, "nvfp4", 5)) o->experts = SYNTH_NVFP4, end = (char *)v + 5;
            else { snprintf(err, errlen, "synthetic model: experts must be mxfp4 or nvfp4"); return -1; }
        } else if (kl == 7 && !strncmp(p, "routing", 7)) {
            if (!strncmp(v, "uniform", 7)) o->routing = SYNTH_ROUTE_UNIFORM, end = (char *)v + 7;
            else if (!strncmp(v, "gate", 4)) o->routing = SYNTH_ROUTE_GATE, end = (char *)v + 4;
            else { snprintf(err, errlen, "synthetic model: routing must be uniform or gate"); return -1; }
        } else if (kl == 4 && !strncmp(p, "seed", 4)) {
            o->seed = strtoull(v, &end, 10);
            if (end == v) { snprintf(err, errlen, "synthetic model: seed must be a number"); return -1; }
        } else if (kl == 6 && !strncmp(p, "ratios", 6)) {
            end = (char *)v;
            o->n_ratios = 0;
            for (;;) {
                char *e2;
                long r = strtol(end, &e2, 10);
                if (e2 == end || r < 0 || r > 65536 || o->n_ratios >= 43) {
                    snprintf(err, errlen, "synthetic model: ratios must be a list of integers 0, 4 or r > 0 (HCA)");
                    return -1;
                }
                o->ratios[o->n_ratios++] = (int)r;
                end = e2;
                if (*end != ',' || !(end[1] >= '0' && end[1] <= '9')) break;
                end++;
            }
        } else {
            snprintf(err, errlen, "synthetic model: unknown key '%.*s' (layers, experts, routing, ratios, seed)", (int)kl, p);
            return -1;
        }
        if (*end && *end != ',') { snprintf(err, errlen, "synthetic model: bad value in '%s'", p); return -1; }
        p = *end ? end + 1 : end;
    }
    if (o->n_ratios && o->n_ratios != o->layers && !strstr(spec, "layers=")) o->layers = o->n_ratios;
    if (o->n_ratios && o->n_ratios != o->layers) {
        snprintf(err, errlen, "synthetic model: %d ratios for %d layers", o->n_ratios, o->layers);
        return -1;
    }
    return 0;
}

static int make_config(const synth_spec *s, v4_config *c, char *err, size_t errlen)
{
    char ratios[1024] = "";
    size_t at = 0;
    for (int l = 0; l < s->layers; l++) {
        const int r = s->n_ratios ? s->ratios[l] : l < 2 ? 0 : (l % 2 ? 128 : 4);
        at += (size_t)snprintf(ratios + at, sizeof ratios - at, "%s%d", l ? "," : "", r);
    }
    char json[4096];
    snprintf(json, sizeof json,
             "{\"vocab_size\":129280,\"hidden_size\":4096,\"num_hidden_layers\":%d,\"num_attention_heads\":64,"
             "\"head_dim\":512,\"qk_rope_head_dim\":64,\"q_lora_rank\":1024,\"o_groups\":8,\"o_lora_rank\":1024,"
             "\"sliding_window\":128,\"rms_norm_eps\":1e-6,\"num_key_value_heads\":1,\"n_routed_experts\":256,"
             "\"n_shared_experts\":1,\"num_experts_per_tok\":6,\"moe_intermediate_size\":2048,"
             "\"routed_scaling_factor\":1.5,\"swiglu_limit\":10.0,\"scoring_func\":\"sqrtsoftplus\","
             "\"num_hash_layers\":%d,\"index_n_heads\":64,\"index_head_dim\":128,\"index_topk\":512,\"hc_mult\":4,"
             "\"hc_sinkhorn_iters\":20,\"hc_eps\":1e-6,\"max_position_embeddings\":1048576,"
             "\"num_nextn_predict_layers\":0,\"bos_token_id\":0,\"eos_token_id\":1,\"rope_theta\":10000,"
             "\"compress_rope_theta\":160000,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":16,"
             "\"original_max_position_embeddings\":65536,\"beta_fast\":32,\"beta_slow\":1},"
             "\"expert_dtype\":\"fp4\",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
             "\"scale_fmt\":\"ue8m0\",\"weight_block_size\":[128,128]},\"compress_ratios\":[%s]}",
             s->layers, s->routing == SYNTH_ROUTE_UNIFORM || s->layers < 3 ? s->layers : 3, ratios);
    if (v4_config_parse(json, strlen(json), c, err, errlen)) return -1;
    snprintf(c->model_id, sizeof c->model_id, "synthetic-v4-flash-%dl-%s%s", s->layers,
             s->experts == SYNTH_NVFP4 ? "nvfp4" : "mxfp4", s->routing == SYNTH_ROUTE_GATE ? "-gate" : "");
    return 0;
}

/* --------------------------------------------------------------------------- weights */
enum { T_WQA = 0, T_WQB, T_WKV, T_WOA, T_WOB, T_CKV, T_CG, T_IKV, T_IG, T_IWQB, T_IW, T_GATE, T_S1, T_S2, T_S3,
       T_HCA, T_HCF, T_T2E, T_EXP };

typedef struct {
    v4_weights *w;
    const synth_spec *s;
    int host_experts, next, failed;
    pthread_mutex_t mu;
} expert_job;

static void *expert_worker(void *arg)
{
    expert_job *j = arg;
    const v4_config *c = &j->w->cfg;
    const int E = c->n_routed_experts, total = c->n_layers * E;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int k = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k >= total || j->failed) break;
        const int l = k / E, e = k % E;
        v4_expert_w *x = &j->w->layers[l].experts[e];
        const uint64_t base = rng_for(j->s->seed, l, T_EXP + 3 * e).s;
        if (q_fp4(&x->w1, j->s->experts, c->moe_inter, c->dim, base, j->host_experts) ||
            q_fp4(&x->w3, j->s->experts, c->moe_inter, c->dim, base * 3 + 1, j->host_experts) ||
            q_fp4(&x->w2, j->s->experts, c->dim, c->moe_inter, base * 5 + 2, j->host_experts))
            j->failed = 1;
    }
    return NULL;
}

static int make_layer(v4_weights *w, const synth_spec *s, int l)
{
    const v4_config *c = &w->cfg;
    v4_layer_w *L = &w->layers[l];
    const int D = c->dim, hc = c->hc_mult, nmix = (2 + hc) * hc, hd = c->head_dim, H = c->n_heads;
    const int dI = c->index_head_dim, nI = c->index_n_heads, ol = c->o_lora_rank, G = c->o_groups;
    const uint64_t sd = s->seed;
    L->ratio = c->compress_ratio[l];
    /* mHC: small fn; pre = sigmoid(-1.0986) = 1/4, post = 2 sigmoid(0) = 1, comb rows favour the diagonal */
    L->hc_attn_fn = vec_normal((size_t)nmix * hc * D, 1e-3f, rng_for(sd, l, T_HCA));
    L->hc_ffn_fn = vec_normal((size_t)nmix * hc * D, 1e-3f, rng_for(sd, l, T_HCF));
    L->hc_attn_base = vec_const((size_t)nmix, 0.0f);
    L->hc_ffn_base = vec_const((size_t)nmix, 0.0f);
    L->hc_attn_scale = vec_const(3, 1.0f);
    L->hc_ffn_scale = vec_const(3, 1.0f);
    if (!L->hc_attn_fn || !L->hc_ffn_fn || !L->hc_attn_base || !L->hc_ffn_base || !L->hc_attn_scale || !L->hc_ffn_scale)
        return -1;
    for (int j = 0; j < hc; j++) {
        L->hc_attn_base[j] = L->hc_ffn_base[j] = -1.0986f;
        L->hc_attn_base[2 * hc + j * hc + j] = L->hc_ffn_base[2 * hc + j * hc + j] = 4.0f;
    }
    L->attn_norm = vec_const((size_t)D, 1.0f);
    L->ffn_norm = vec_const((size_t)D, 1.0f);
    L->q_norm = vec_const((size_t)c->q_lora_rank, 1.0f);
    L->kv_norm = vec_const((size_t)hd, 1.0f);
    L->attn_sink = vec_const((size_t)H, 0.0f);
    if (!L->attn_norm || !L->ffn_norm || !L->q_norm || !L->kv_norm || !L->attn_sink) return -1;
    if (q_fp8(&L->wq_a, c->q_lora_rank, D, rng_for(sd, l, T_WQA)) ||
        q_fp8(&L->wq_b, H * hd, c->q_lora_rank, rng_for(sd, l, T_WQB)) || q_fp8(&L->wkv, hd, D, rng_for(sd, l, T_WKV)) ||
        q_fp8(&L->wo_a, G * ol, H * hd / G, rng_for(sd, l, T_WOA)) || q_fp8(&L->wo_b, D, G * ol, rng_for(sd, l, T_WOB)))
        return -1;
    if (L->ratio > 0) {
        const int coff = L->ratio == 4 ? 2 : 1;
        const float st = 1.0f / sqrtf((float)D);
        if (q_bf16(&L->comp.wkv, coff * hd, D, st, rng_for(sd, l, T_CKV)) ||
            q_bf16(&L->comp.wgate, coff * hd, D, st, rng_for(sd, l, T_CG)))
            return -1;
        L->comp.ape = vec_const((size_t)L->ratio * coff * hd, 0.0f);
        L->comp.norm = vec_const((size_t)hd, 1.0f);
        if (!L->comp.ape || !L->comp.norm) return -1;
    }
    if (L->ratio == 4) {
        const float st = 1.0f / sqrtf((float)D);
        if (q_bf16(&L->icomp.wkv, 2 * dI, D, st, rng_for(sd, l, T_IKV)) ||
            q_bf16(&L->icomp.wgate, 2 * dI, D, st, rng_for(sd, l, T_IG)) ||
            q_fp8(&L->iwq_b, nI * dI, c->q_lora_rank, rng_for(sd, l, T_IWQB)) ||
            q_bf16(&L->iweights, nI, D, st, rng_for(sd, l, T_IW)))
            return -1;
        L->icomp.ape = vec_const((size_t)4 * 2 * dI, 0.0f);
        L->icomp.norm = vec_const((size_t)dI, 1.0f);
        if (!L->icomp.ape || !L->icomp.norm) return -1;
    }
    if (q_f32(&L->gate, c->n_routed_experts, D, 1.0f / sqrtf((float)D), rng_for(sd, l, T_GATE))) return -1;
    if (c->hash_layer[l]) {
        const size_t n = (size_t)c->vocab_size * c->n_active;
        L->tid2eid = malloc(n * sizeof(int32_t));
        if (!L->tid2eid) return -1;
        rng_t r = rng_for(sd, l, T_T2E);
        for (size_t t = 0; t < (size_t)c->vocab_size; t++)
            for (int k = 0; k < c->n_active; k++) {
                int32_t e;
                int dup;
                do {   /* distinct experts per token */
                    e = (int32_t)(rng_next(&r) % (uint64_t)c->n_routed_experts);
                    dup = 0;
                    for (int q = 0; q < k; q++) dup |= L->tid2eid[t * c->n_active + q] == e;
                } while (dup);
                L->tid2eid[t * c->n_active + k] = e;
            }
    } else {
        L->gate_bias = vec_const((size_t)c->n_routed_experts, 0.0f);
        if (!L->gate_bias) return -1;
    }
    L->experts = calloc((size_t)c->n_routed_experts, sizeof *L->experts);
    if (!L->experts) return -1;
    const int si = c->moe_inter * c->n_shared_experts;
    if (q_fp8(&L->shared.w1, si, D, rng_for(sd, l, T_S1)) || q_fp8(&L->shared.w3, si, D, rng_for(sd, l, T_S3)) ||
        q_fp8(&L->shared.w2, D, si, rng_for(sd, l, T_S2)))
        return -1;
    return 0;
}

int v4_synthetic_config(const char *spec, v4_config *c, char *err, size_t errlen)
{
    synth_spec s;
    memset(c, 0, sizeof *c);
    return parse_spec(spec, &s, err, errlen) || make_config(&s, c, err, errlen) ? -1 : 0;
}

int v4_weights_synthetic(const char *spec, int host_experts, v4_weights *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    synth_spec s;
    if (parse_spec(spec, &s, err, errlen) || make_config(&s, &w->cfg, err, errlen)) return -1;
    const v4_config *c = &w->cfg;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) goto oom;
    if (q_bf16(&w->embed, c->vocab_size, c->dim, 1.0f, rng_for(s.seed, -1, 0)) ||
        q_bf16(&w->head, c->vocab_size, c->dim, 1.0f / sqrtf((float)c->dim), rng_for(s.seed, -1, 1)))
        goto oom;
    w->norm = vec_const((size_t)c->dim, 1.0f);
    w->hc_head_fn = vec_normal((size_t)c->hc_mult * c->hc_mult * c->dim, 1e-3f, rng_for(s.seed, -1, 2));
    w->hc_head_base = vec_const((size_t)c->hc_mult, -1.0986f);
    w->hc_head_scale = vec_const(1, 1.0f);
    if (!w->norm || !w->hc_head_fn || !w->hc_head_base || !w->hc_head_scale) goto oom;
    for (int l = 0; l < c->n_layers; l++)
        if (make_layer(w, &s, l)) goto oom;
    w->expert_format = s.experts == SYNTH_NVFP4 ? QT_NVFP4 : QT_MXFP4;
    /* routed experts on several threads (host bytes are ~3.4 GB a layer) */
    expert_job j = {w, &s, host_experts, 0, 0, PTHREAD_MUTEX_INITIALIZER};
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nc > 1 ? (int)(nc > 32 ? 32 : nc) : 1;
    pthread_t th[32];
    int started = 0;
    for (int t = 0; t < nt; t++) started += !pthread_create(&th[started], NULL, expert_worker, &j);
    if (!started) expert_worker(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    if (j.failed) goto oom;
    return 0;
oom:
    snprintf(err, errlen, "synthetic model '%s': out of host memory", spec);
    v4_weights_free(w);
    return -1;
}
