/* test_weights.c — load checkpoints by role and check values, shapes, naming and errors. */
#include "check.h"
#include "weights.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float at(const qtensor *q, int r, int c)
{
    float *row = malloc((size_t)q->cols * sizeof(float));
    qt_dequant_row(q, r, row);
    float v = row[c];
    free(row);
    return v;
}

/* tests/data/tiny-v4-public: transformers naming, float32; values read with stio.py */
static void test_public(void)
{
    v4_weights w;
    char err[512];
    int rc = v4_weights_load(SLUICE_TEST_DATA "/tiny-v4-public", &w, err, sizeof(err));
    if (rc) fprintf(stderr, "load: %s\n", err);
    CHECK(rc == 0);
    if (rc) return;
    const v4_config *c = &w.cfg;
    CHECK(c->n_layers == 4 && c->dim == 64 && c->vocab_size == 256 && c->hc_mult == 4);
    CHECK(c->compress_ratio[0] == 0 && c->compress_ratio[1] == 4 && c->compress_ratio[2] == 8 &&
          c->compress_ratio[3] == 4);
    CHECK(c->hash_layer[0] == 1 && c->hash_layer[1] == 0);
    CHECK(c->rope_dim == 8 && c->n_eos == 1 && c->eos_ids[0] == 2 && c->bos_id == 1);
    CHECK(!strcmp(c->model_id, "tiny-v4-public"));
    CHECK(w.embed.fmt == QT_F32 && w.embed.rows == 256 && w.embed.cols == 64);
    CHECK_SAME(at(&w.embed, 3, 5), -0.11976691335439682f);
    CHECK_SAME(at(&w.head, 255, 63), -0.12410854548215866f);
    CHECK_SAME(w.hc_head_scale[0], -0.08661477267742157f);
    CHECK_SAME(w.layers[1].comp.ape[2 * 64 + 7], 0.10086148232221603f);
    CHECK_SAME(w.layers[2].comp.ape[7 * 32 + 31], 0.07406915724277496f);
    CHECK(w.layers[2].comp.wkv.rows == 32 && w.layers[1].comp.wkv.rows == 64);
    CHECK(w.layers[0].tid2eid && w.layers[0].tid2eid[10 * 2 + 1] == 6);
    CHECK(w.layers[0].gate_bias == NULL && w.layers[1].tid2eid == NULL);
    CHECK_SAME(w.layers[1].gate_bias[7], 0.020329978317022324f);
    CHECK_SAME(w.layers[3].kv_norm[31], 1.0571353435516357f);
    CHECK_SAME(at(&w.layers[3].experts[7].w2, 63, 31), 0.027386266738176346f);
    CHECK(w.layers[1].icomp.norm != NULL && w.layers[2].icomp.norm == NULL);
    CHECK(w.layers[0].comp.wkv.data == NULL);
    CHECK(w.expert_format == QT_F32);
    for (int L = 0; L < 4; L++)
        for (int i = 0; i < 256 * 2 && w.layers[L].tid2eid; i++)
            CHECK(w.layers[L].tid2eid[i] >= 0 && w.layers[L].tid2eid[i] < 8);
    v4_weights_free(&w);
}

// ----------------------------------------------------------------------------
// a quantised checkpoint against its dequantised float32 copy: every role, bit for bit

static long q_mismatch(const qtensor *a, const qtensor *b)
{
    if (a->rows != b->rows || a->cols != b->cols) return -1;
    float *ra = malloc((size_t)a->cols * sizeof(float)), *rb = malloc((size_t)a->cols * sizeof(float));
    long bad = 0;
    for (int r = 0; r < a->rows; r++) {
        qt_dequant_row(a, r, ra);
        qt_dequant_row(b, r, rb);
        for (int c = 0; c < a->cols; c++) bad += memcmp(&ra[c], &rb[c], 4) != 0 && ra[c] != rb[c];
    }
    free(ra);
    free(rb);
    return bad;
}

static long v_mismatch(const float *a, const float *b, size_t n)
{
    if (!a || !b) return a != b ? 1 : 0;
    long bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != b[i];
    return bad;
}

#define CMPQ(x, y) do { long m_ = q_mismatch(&(x), &(y)); if (m_) { fprintf(stderr, "L%d %s: %ld mismatches\n", L, #x, m_); check_failures++; } } while (0)
#define CMPV(x, y, n) do { long m_ = v_mismatch((x), (y), (n)); if (m_) { fprintf(stderr, "L%d %s: %ld mismatches\n", L, #x, m_); check_failures++; } } while (0)

static void cmp_comp(int L, const v4_compressor_w *a, const v4_compressor_w *b, int ratio)
{
    if (!a->norm && !b->norm) return;
    CMPQ(a->wkv, b->wkv);
    CMPQ(a->wgate, b->wgate);
    CMPV(a->ape, b->ape, (size_t)ratio * a->wkv.rows);
    CMPV(a->norm, b->norm, (size_t)a->wkv.rows / (ratio == 4 ? 2 : 1));
}

static void test_quantised(const char *qdir, const char *fdir, int want_expert_fmt)
{
    v4_weights q, f;
    char err[512];
    int rc = v4_weights_load(qdir, &q, err, sizeof(err));
    if (rc) fprintf(stderr, "load %s: %s\n", qdir, err);
    CHECK(rc == 0);
    if (rc) return;
    rc = v4_weights_load(fdir, &f, err, sizeof(err));
    if (rc) fprintf(stderr, "load %s: %s\n", fdir, err);
    CHECK(rc == 0);
    if (rc) {
        v4_weights_free(&q);
        return;
    }
    const v4_config *c = &f.cfg;
    CHECK(q.cfg.hub_format == 1 && f.cfg.hub_format == 0);
    CHECK(q.cfg.n_layers == c->n_layers && q.cfg.dim == c->dim && q.cfg.rope_dim == c->rope_dim);
    for (int i = 0; i < c->n_layers; i++)
        CHECK(q.cfg.compress_ratio[i] == c->compress_ratio[i] && q.cfg.hash_layer[i] == c->hash_layer[i]);
    CHECK(q.expert_format == want_expert_fmt);
    int L = -1;
    CMPQ(q.embed, f.embed);
    CMPQ(q.head, f.head);
    CMPV(q.norm, f.norm, (size_t)c->dim);
    CMPV(q.hc_head_fn, f.hc_head_fn, (size_t)c->hc_mult * c->hc_mult * c->dim);
    CMPV(q.hc_head_base, f.hc_head_base, (size_t)c->hc_mult);
    CMPV(q.hc_head_scale, f.hc_head_scale, 1);
    const size_t mix = (size_t)(2 + c->hc_mult) * c->hc_mult;
    for (L = 0; L < c->n_layers; L++) {
        const v4_layer_w *a = &q.layers[L], *b = &f.layers[L];
        CMPV(a->hc_attn_fn, b->hc_attn_fn, mix * c->hc_mult * c->dim);
        CMPV(a->hc_ffn_fn, b->hc_ffn_fn, mix * c->hc_mult * c->dim);
        CMPV(a->hc_attn_base, b->hc_attn_base, mix);
        CMPV(a->hc_ffn_scale, b->hc_ffn_scale, 3);
        CMPV(a->attn_norm, b->attn_norm, (size_t)c->dim);
        CMPV(a->ffn_norm, b->ffn_norm, (size_t)c->dim);
        CMPQ(a->wq_a, b->wq_a);
        CMPQ(a->wq_b, b->wq_b);
        CMPQ(a->wkv, b->wkv);
        CMPQ(a->wo_a, b->wo_a);
        CMPQ(a->wo_b, b->wo_b);
        CMPV(a->q_norm, b->q_norm, (size_t)c->q_lora_rank);
        CMPV(a->kv_norm, b->kv_norm, (size_t)c->head_dim);
        CMPV(a->attn_sink, b->attn_sink, (size_t)c->n_heads);
        CHECK(a->ratio == b->ratio);
        cmp_comp(L, &a->comp, &b->comp, a->ratio);
        cmp_comp(L, &a->icomp, &b->icomp, 4);
        if (a->ratio == 4) {
            CMPQ(a->iwq_b, b->iwq_b);
            CMPQ(a->iweights, b->iweights);
        }
        CMPQ(a->gate, b->gate);
        CMPV(a->gate_bias, b->gate_bias, (size_t)c->n_routed_experts);
        CHECK((a->tid2eid == NULL) == (b->tid2eid == NULL));
        if (a->tid2eid && b->tid2eid)
            CHECK(!memcmp(a->tid2eid, b->tid2eid, (size_t)c->vocab_size * c->n_active * sizeof(int32_t)));
        for (int e = 0; e < c->n_routed_experts; e++) {
            CMPQ(a->experts[e].w1, b->experts[e].w1);
            CMPQ(a->experts[e].w2, b->experts[e].w2);
            CMPQ(a->experts[e].w3, b->experts[e].w3);
            CHECK((int)a->experts[e].w1.fmt == want_expert_fmt);
        }
        CMPQ(a->shared.w1, b->shared.w1);
        CMPQ(a->shared.w2, b->shared.w2);
        CMPQ(a->shared.w3, b->shared.w3);
    }
    v4_weights_free(&q);
    v4_weights_free(&f);
}

/* v4_weights_quantize_experts_nvfp4 on a float checkpoint must give exactly the expert values
 * make_official.py's NVFP4 conversion (ModelOpt rounding, w1/w3 sharing weight_scale_2) implies. */
static void test_quantize_experts(const char *src, const char *deq)
{
    v4_weights q, f;
    char err[512];
    if (v4_weights_load(src, &q, err, sizeof(err))) {
        fprintf(stderr, "load %s: %s\n", src, err);
        check_failures++;
        return;
    }
    if (v4_weights_load(deq, &f, err, sizeof(err))) {
        fprintf(stderr, "load %s: %s\n", deq, err);
        check_failures++;
        v4_weights_free(&q);
        return;
    }
    CHECK(v4_weights_quantize_experts_nvfp4(&q, err, sizeof(err)) == 0);
    CHECK(q.expert_format == QT_NVFP4);
    for (int L = 0; L < q.cfg.n_layers; L++)
        for (int e = 0; e < q.cfg.n_routed_experts; e++) {
            const v4_expert_w *a = &q.layers[L].experts[e], *b = &f.layers[L].experts[e];
            CHECK(a->w1.fmt == QT_NVFP4 && a->w1.scale2 == a->w3.scale2);
            CMPQ(a->w1, b->w1);
            CMPQ(a->w2, b->w2);
            CMPQ(a->w3, b->w3);
        }
    v4_weights_free(&q);
    v4_weights_free(&f);
}

// ----------------------------------------------------------------------------
// mutated copies of the public checkpoint: naming, shapes, dtypes, missing and extra tensors

static char tmpdir[256];
static unsigned char *pub_data;  /* whole model.safetensors */
static size_t pub_size, pub_hlen;
static const char *cfg_src = SLUICE_TEST_DATA "/tiny-v4-public/config.json";

static int read_all(const char *path, unsigned char **buf, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    rewind(f);
    *buf = malloc((size_t)sz);
    *n = fread(*buf, 1, (size_t)sz, f);
    fclose(f);
    return *n == (size_t)sz ? 0 : -1;
}

static void write_file(const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* Write tmpdir/model.safetensors with the public data and a header edited by `edit`;
 * tmpdir/config.json = the public config with `cfg_from` replaced by `cfg_to` (if given). */
typedef void (*hdr_edit)(json_t *hdr);
static void make_ckpt(hdr_edit edit, const char *cfg_from, const char *cfg_to)
{
    json_error_t je;
    json_t *h = json_loadb((const char *)pub_data + 8, pub_hlen, 0, &je);
    if (edit) edit(h);
    char *txt = json_dumps(h, JSON_COMPACT);
    size_t tl = strlen(txt), pad = (8 - tl % 8) % 8, dn = pub_size - 8 - pub_hlen;
    size_t n = 8 + tl + pad + dn;
    unsigned char *out = malloc(n);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((tl + pad) >> (8 * i));
    memcpy(out + 8, txt, tl);
    memset(out + 8 + tl, ' ', pad);
    memcpy(out + 8 + tl + pad, pub_data + 8 + pub_hlen, dn);
    write_file("model.safetensors", out, n);
    free(out);
    free(txt);
    json_decref(h);
    unsigned char *cfg;
    size_t cn;
    if (read_all(cfg_src, &cfg, &cn)) exit(2);
    char *c = malloc(cn + 256);
    memcpy(c, cfg, cn);
    c[cn] = 0;
    free(cfg);
    if (cfg_from) {
        char *at = strstr(c, cfg_from);
        if (!at) {
            fprintf(stderr, "config has no '%s'\n", cfg_from);
            exit(2);
        }
        size_t fl = strlen(cfg_from), tl2 = strlen(cfg_to);
        memmove(at + tl2, at + fl, strlen(at + fl) + 1);
        memcpy(at, cfg_to, tl2);
    }
    write_file("config.json", c, strlen(c));
    free(c);
}

static void expect_load(hdr_edit edit, const char *cfg_from, const char *cfg_to, const char *needle)
{
    make_ckpt(edit, cfg_from, cfg_to);
    v4_weights w;
    char err[512] = "";
    int rc = v4_weights_load(tmpdir, &w, err, sizeof(err));
    if (needle ? (rc != -1 || !strstr(err, needle) || strchr(err, '\n')) : rc != 0) {
        fprintf(stderr, "expected %s \"%s\": rc %d err \"%s\"\n", needle ? "error" : "success", needle ? needle : "",
                rc, err);
        check_failures++;
    }
    if (rc == 0) {
        CHECK(w.embed.rows == 256 && w.layers[3].experts[7].w2.rows == 64);
        CHECK_SAME(at(&w.embed, 3, 5), -0.11976691335439682f);
        CHECK_SAME(w.layers[3].kv_norm[31], 1.0571353435516357f);
        CHECK(w.layers[0].tid2eid[21] == 6);
        v4_weights_free(&w);
    }
}

static void set_shape(json_t *h, const char *name, json_int_t a, json_int_t b)
{
    json_object_set_new(json_object_get(h, name), "shape", json_pack("[II]", a, b));
}
static void e_wq_a_shape(json_t *h) { set_shape(h, "model.layers.1.attn.wq_a.weight", 64, 32); }
static void e_drop_expert(json_t *h) { json_object_del(h, "model.layers.2.ffn.experts.3.w2.weight"); }
static void e_drop_bias(json_t *h) { json_object_del(h, "model.layers.3.ffn.gate.bias"); }
static void e_drop_tid2eid(json_t *h) { json_object_del(h, "model.layers.0.ffn.gate.tid2eid"); }
static void e_drop_icomp(json_t *h) { json_object_del(h, "model.layers.3.attn.indexer.compressor.ape"); }
static void e_i32(json_t *h)
{
    json_object_set_new(json_object_get(h, "model.layers.1.attn.wkv.weight"), "dtype", json_string("I32"));
}
static void e_fp8_noscale(json_t *h)
{
    /* the first quarter of the F32 bytes as [32, 64] F8_E4M3 codes, no .scale next to it */
    json_t *t = json_object_get(h, "model.layers.1.attn.wkv.weight");
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    json_object_set_new(t, "dtype", json_string("F8_E4M3"));
    json_object_set_new(t, "data_offsets", json_pack("[II]", b, b + 32 * 64));
}
static void e_norm_shape(json_t *h)
{
    json_object_set_new(json_object_get(h, "model.norm.weight"), "shape", json_pack("[II]", (json_int_t)8, (json_int_t)8));
}
/* every name to the hub spelling, plus mtp.* and unknown extras (empty tensors) */
static void e_hub_names(json_t *h)
{
    json_t *n = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        char nk[256];
        const char *r = k;
        if (!strncmp(k, "model.", 6)) r = k + 6;
        if (!strcmp(r, "embed_tokens.weight")) r = "embed.weight";
        else if (!strcmp(r, "hc_head.hc_fn")) r = "hc_head_fn";
        else if (!strcmp(r, "hc_head.hc_base")) r = "hc_head_base";
        else if (!strcmp(r, "hc_head.hc_scale")) r = "hc_head_scale";
        snprintf(nk, sizeof(nk), "%s", r);
        char *p = strstr(nk, ".attn.norm.weight");
        if (p) snprintf(p, sizeof(nk) - (size_t)(p - nk), ".attn.kv_norm.weight");
        p = strstr(nk, ".ffn.gate.bias");
        if (p && !strcmp(k + strlen(k) - 4, "bias") && strstr(k, "layers.3."))
            snprintf(p, sizeof(nk) - (size_t)(p - nk), ".ffn.gate.e_score_correction_bias");
        json_object_set(n, nk, v);
    }
    json_object_clear(h);
    json_object_update(h, n);
    json_decref(n);
    json_object_set_new(h, "mtp.0.attn.wq_a.weight",
                        json_pack("{s:s,s:[i,i],s:[i,i]}", "dtype", "F32", "shape", 0, 64, "data_offsets", 0, 0));
    json_object_set_new(h, "some.unknown.tensor",
                        json_pack("{s:s,s:[i],s:[i,i]}", "dtype", "BF16", "shape", 0, "data_offsets", 0, 0));
}

static void e_tid2eid_i32(json_t *h)
{
    /* the first half of the I64 bytes read as I32 [256, 2]: (low word, high word 0) pairs */
    json_t *t = json_object_get(h, "model.layers.0.ffn.gate.tid2eid");
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    json_object_set_new(t, "dtype", json_string("I32"));
    json_object_set_new(t, "data_offsets", json_pack("[II]", b, b + 256 * 2 * 4));
}

static void test_tid2eid_i32(void)
{
    v4_weights p, w;
    char err[512];
    make_ckpt(e_tid2eid_i32, NULL, NULL);
    int rc = v4_weights_load(tmpdir, &w, err, sizeof(err));
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    CHECK(v4_weights_load(SLUICE_TEST_DATA "/tiny-v4-public", &p, err, sizeof(err)) == 0);
    if (rc == 0) {
        long bad = 0;
        for (int i = 0; i < 512; i++) bad += w.layers[0].tid2eid[i] != (i % 2 ? 0 : p.layers[0].tid2eid[i / 2]);
        CHECK(bad == 0);
        v4_weights_free(&w);
    }
    v4_weights_free(&p);
}

/* random header edits (drop a tensor, change its dtype keeping the byte count, transpose it,
 * rename it): the loader answers 0 or one error line, never crashes or leaks */
static uint32_t fz = 0xC0FFEEu;
static uint32_t fz_next(void)
{
    fz ^= fz << 13;
    fz ^= fz >> 17;
    fz ^= fz << 5;
    return fz;
}

static void e_random(json_t *h)
{
    static const char *dts[] = {"F32", "BF16", "F16", "F8_E4M3", "F8_E8M0", "I8", "U8", "I64", "I32"};
    static const int dsz[] = {4, 2, 2, 1, 1, 1, 1, 8, 4};
    for (int k = 0; k < 1 + (int)(fz_next() % 3); k++) {
        size_t n = json_object_size(h), pick = fz_next() % n, i = 0;
        const char *key;
        json_t *v, *t = NULL;
        char name[256] = "";
        json_object_foreach(h, key, v) {
            if (i++ == pick) {
                snprintf(name, sizeof(name), "%s", key);
                t = v;
            }
        }
        if (!t || !json_is_object(t)) continue;
        json_t *off = json_object_get(t, "data_offsets");
        json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
        switch (fz_next() % 4) {
        case 0: json_object_del(h, name); break;
        case 1: {
            int d = (int)(fz_next() % 9);
            json_int_t cnt = (e - b) / dsz[d];
            json_object_set_new(t, "dtype", json_string(dts[d]));
            json_object_set_new(t, "data_offsets", json_pack("[II]", b, b + cnt * dsz[d]));
            json_t *sh = json_object_get(t, "shape");
            json_int_t r = json_array_size(sh) == 2 ? json_integer_value(json_array_get(sh, 0)) : 1;
            if (r > 0 && cnt % r == 0) json_object_set_new(t, "shape", json_pack("[II]", r, cnt / r));
            else json_object_set_new(t, "shape", json_pack("[I]", cnt));
            break;
        }
        case 2: {
            json_t *sh = json_object_get(t, "shape");
            if (json_array_size(sh) == 2)
                json_object_set_new(t, "shape", json_pack("[OO]", json_array_get(sh, 1), json_array_get(sh, 0)));
            break;
        }
        default: {
            char nn[300];
            snprintf(nn, sizeof(nn), "%s.x", name);
            json_object_set(h, nn, t);
            json_object_del(h, name);
        }
        }
    }
}

static void test_random_edits(int iters)
{
    int ok = 0;
    for (int it = 0; it < iters; it++) {
        make_ckpt(e_random, NULL, NULL);
        v4_weights w;
        char err[512] = "";
        if (v4_weights_load(tmpdir, &w, err, sizeof(err)) == 0) {
            ok++;
            v4_weights_free(&w);
        } else {
            CHECK(err[0] && !strchr(err, '\n'));
            if (getenv("SLUICE_TEST_VERBOSE")) fprintf(stderr, "edit %d: %s\n", it, err);
        }
    }
    CHECK(ok < iters); /* the edits do break things */
}

/* transformers' fused-expert layout: experts.gate_up_proj [E, 2I, D] + experts.down_proj [E, D, I]
 * (layer 0 spelled mlp.experts.*); every expert matrix must equal the per-expert checkpoint's */
static void test_fused_experts(void)
{
    json_error_t je;
    json_t *h = json_loadb((const char *)pub_data + 8, pub_hlen, 0, &je), *nh = json_object();
    const unsigned char *d0 = pub_data + 8 + pub_hlen;
    unsigned char *data = malloc(pub_size);
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        if (!strcmp(k, "__metadata__") || strstr(k, ".ffn.experts.")) continue;
        json_t *o = json_object_get(v, "data_offsets");
        size_t b = (size_t)json_integer_value(json_array_get(o, 0)), e = (size_t)json_integer_value(json_array_get(o, 1));
        memcpy(data + n, d0 + b, e - b);
        json_object_set_new(nh, k, json_pack("{s:O,s:O,s:[I,I]}", "dtype", json_object_get(v, "dtype"), "shape",
                                             json_object_get(v, "shape"), "data_offsets", (json_int_t)n,
                                             (json_int_t)(n + e - b)));
        n += e - b;
    }
    for (int L = 0; L < 4; L++)
        for (int which = 0; which < 2; which++) {
            size_t start = n;
            for (int e = 0; e < 8; e++)
                for (int w = 0; w < (which ? 1 : 2); w++) {
                    char key[128];
                    snprintf(key, sizeof(key), "model.layers.%d.ffn.experts.%d.%s.weight", L, e,
                             which ? "w2" : (w ? "w3" : "w1"));
                    json_t *o = json_object_get(json_object_get(h, key), "data_offsets");
                    size_t b = (size_t)json_integer_value(json_array_get(o, 0));
                    memcpy(data + n, d0 + b, 32 * 64 * 4);
                    n += 32 * 64 * 4;
                }
            char key[128];
            snprintf(key, sizeof(key), "model.layers.%d.%s.experts.%s", L, L ? "ffn" : "mlp",
                     which ? "down_proj" : "gate_up_proj");
            json_object_set_new(nh, key, json_pack("{s:s,s:[i,i,i],s:[I,I]}", "dtype", "F32", "shape", 8, 64,
                                                   which ? 32 : 64, "data_offsets",
                                                   (json_int_t)start, (json_int_t)n));
        }
    char *txt = json_dumps(nh, JSON_COMPACT);
    size_t tl = strlen(txt), pad = (8 - tl % 8) % 8, total = 8 + tl + pad + n;
    unsigned char *out = malloc(total);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((tl + pad) >> (8 * i));
    memcpy(out + 8, txt, tl);
    memset(out + 8 + tl, ' ', pad);
    memcpy(out + 8 + tl + pad, data, n);
    write_file("model.safetensors", out, total);
    free(out);
    free(txt);
    free(data);
    json_decref(h);
    json_decref(nh);

    v4_weights f, p;
    char err[512];
    int rc = v4_weights_load(tmpdir, &f, err, sizeof(err));
    if (rc) fprintf(stderr, "fused: %s\n", err);
    CHECK(rc == 0);
    CHECK(v4_weights_load(SLUICE_TEST_DATA "/tiny-v4-public", &p, err, sizeof(err)) == 0);
    if (rc == 0) {
        for (int L = 0; L < 4; L++)
            for (int e = 0; e < 8; e++) {
                CMPQ(f.layers[L].experts[e].w1, p.layers[L].experts[e].w1);
                CMPQ(f.layers[L].experts[e].w2, p.layers[L].experts[e].w2);
                CMPQ(f.layers[L].experts[e].w3, p.layers[L].experts[e].w3);
            }
        int L = 3;
        CMPQ(f.layers[3].shared.w2, p.layers[3].shared.w2);
        /* views into the fused tensors: expert e+1 starts 2*I*D floats after expert e */
        CHECK((const char *)f.layers[2].experts[5].w1.data + 2 * 32 * 64 * 4 == f.layers[2].experts[6].w1.data);
        CHECK((const char *)f.layers[2].experts[5].w1.data + 32 * 64 * 4 == f.layers[2].experts[5].w3.data);
        v4_weights_free(&f);
    }
    v4_weights_free(&p);
}

static void poke_tid2eid(int value)
{
    /* a copy whose tid2eid[0][0] is `value` */
    json_error_t je;
    json_t *h = json_loadb((const char *)pub_data + 8, pub_hlen, 0, &je);
    json_t *o = json_object_get(json_object_get(h, "model.layers.0.ffn.gate.tid2eid"), "data_offsets");
    size_t off = 8 + pub_hlen + (size_t)json_integer_value(json_array_get(o, 0));
    json_decref(h);
    int64_t v = value, old;
    memcpy(&old, pub_data + off, 8);
    memcpy(pub_data + off, &v, 8);
    make_ckpt(NULL, NULL, NULL);
    memcpy(pub_data + off, &old, 8);
}

static void test_mutations(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "%s", "wt_test_XXXXXX");
    if (!mkdtemp(tmpdir) || read_all(SLUICE_TEST_DATA "/tiny-v4-public/model.safetensors", &pub_data, &pub_size)) {
        check_failures++;
        return;
    }
    pub_hlen = 0;
    for (int i = 7; i >= 0; i--) pub_hlen = (pub_hlen << 8) | pub_data[i];

    expect_load(NULL, NULL, NULL, NULL);
    expect_load(e_hub_names, NULL, NULL, NULL);
    expect_load(e_wq_a_shape, NULL, NULL, "tensor 'model.layers.1.attn.wq_a.weight': shape [64, 32], expected [32, 64]");
    expect_load(e_drop_expert, NULL, NULL, "tensor 'model.layers.2.ffn.experts.3.w2.weight' missing");
    expect_load(e_drop_bias, NULL, NULL, "tensor 'model.layers.3.ffn.gate.bias' missing");
    expect_load(e_drop_tid2eid, NULL, NULL, "tensor 'model.layers.0.ffn.gate.tid2eid' missing");
    expect_load(e_drop_icomp, NULL, NULL, "tensor 'model.layers.3.attn.indexer.compressor.ape' missing");
    expect_load(e_i32, NULL, NULL, "tensor 'model.layers.1.attn.wkv.weight': dtype I32");
    expect_load(e_fp8_noscale, NULL, NULL, "no block scale 'model.layers.1.attn.wkv.scale'");
    expect_load(e_norm_shape, NULL, NULL, "tensor 'model.norm.weight': shape [8, 8], expected [64]");
    /* config disagreeing with the tensors */
    expect_load(NULL, "\"n_routed_experts\": 8", "\"n_routed_experts\": 9",
                "tensor 'model.layers.0.ffn.gate.weight': shape [8, 64], expected [9, 64]");
    expect_load(NULL, "\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": 16",
                "tensor 'model.layers.0.ffn.experts.0.w1.weight': shape [32, 64], expected [16, 64]");
    expect_load(NULL, "\"heavily_compressed_attention\": 8", "\"heavily_compressed_attention\": 16",
                "tensor 'model.layers.2.attn.compressor.ape': shape [8, 32], expected [16, 32]");
    expect_load(NULL, "\"hc_mult\": 4", "\"hc_mult\": 2", "tensor 'model.hc_head.hc_fn': shape [4, 256], expected [2, 128]");
    expect_load(NULL, "\"head_dim\": 32", "\"head_dim\": 33",
                "tensor 'model.layers.0.attn.wq_b.weight': shape [128, 32], expected [132, 32]");
    expect_load(NULL, "\"hidden_size\": 64", "\"hidden_sise\": 64", "config.json: field 'hidden_size' missing");
    /* a layer that is sliding-only in the config simply ignores its compressor tensors */
    expect_load(NULL, "\"heavily_compressed_attention\",", "\"sliding_attention\",", NULL);
    test_tid2eid_i32();
    test_fused_experts();
    test_random_edits(100);
    /* tid2eid must hold expert ids */
    poke_tid2eid(8);
    {
        v4_weights w;
        char err[512];
        CHECK(v4_weights_load(tmpdir, &w, err, sizeof(err)) == -1 && strstr(err, "tid2eid") && strstr(err, "is 8"));
    }
    poke_tid2eid(-1);
    {
        v4_weights w;
        char err[512];
        CHECK(v4_weights_load(tmpdir, &w, err, sizeof(err)) == -1 && strstr(err, "is -1"));
    }
    /* no checkpoint at all */
    {
        v4_weights w;
        char err[512];
        char p[512];
        snprintf(p, sizeof(p), "%s/model.safetensors", tmpdir);
        unlink(p);
        CHECK(v4_weights_load(tmpdir, &w, err, sizeof(err)) == -1 && strstr(err, "no model.safetensors"));
        snprintf(p, sizeof(p), "%s/config.json", tmpdir);
        unlink(p);
        CHECK(v4_weights_load(tmpdir, &w, err, sizeof(err)) == -1 && strstr(err, "config.json"));
    }
    rmdir(tmpdir);
    free(pub_data);
}

/* A committed quantised fixture (no dequantised copy): formats as expected, every row finite,
 * and re-quantising its experts to NVFP4 stays within FP4 error of the stored values. */
static void test_load_only(const char *dir, int want_expert_fmt)
{
    v4_weights w;
    char err[512];
    if (v4_weights_load(dir, &w, err, sizeof(err))) {
        fprintf(stderr, "load %s: %s\n", dir, err);
        check_failures++;
        return;
    }
    const v4_config *c = &w.cfg;
    CHECK(c->hub_format == 1 && w.expert_format == want_expert_fmt);
    CHECK(w.layers[0].wq_a.fmt == QT_FP8_B128 && w.layers[0].wo_b.fmt == QT_FP8_B128);
    CHECK(w.layers[0].shared.w1.fmt == QT_FP8_B128 && w.embed.fmt == QT_BF16);
    float *row = malloc((size_t)(c->dim > c->moe_inter ? c->dim : c->moe_inter) * 4 * sizeof(float));
    long nonfinite = 0;
    for (int L = 0; L < c->n_layers; L++)
        for (int e = 0; e < c->n_routed_experts; e++) {
            const qtensor *q = &w.layers[L].experts[e].w2;
            CHECK((int)q->fmt == want_expert_fmt);
            for (int r = 0; r < q->rows; r++) {
                qt_dequant_row(q, r, row);
                for (int i = 0; i < q->cols; i++) nonfinite += !isfinite(row[i]);
            }
        }
    CHECK(nonfinite == 0);
    free(row);
    v4_weights_free(&w);
}

/* random edits of another single-file checkpoint (e.g. hub FP8/MXFP4 or NVFP4 converted with one shard) */
static void test_fuzz_file(const char *st_path, const char *cfg_path, int iters)
{
    unsigned char *save = pub_data;
    size_t ss = pub_size, sh = pub_hlen;
    const char *sc = cfg_src;
    snprintf(tmpdir, sizeof(tmpdir), "%s", "wt_test_XXXXXX");
    if (!mkdtemp(tmpdir) || read_all(st_path, &pub_data, &pub_size)) {
        fprintf(stderr, "cannot read %s\n", st_path);
        check_failures++;
        return;
    }
    pub_hlen = 0;
    for (int i = 7; i >= 0; i--) pub_hlen = (pub_hlen << 8) | pub_data[i];
    cfg_src = cfg_path;
    make_ckpt(NULL, NULL, NULL);
    v4_weights w;
    char err[512];
    int rc = v4_weights_load(tmpdir, &w, err, sizeof(err));
    if (rc) fprintf(stderr, "unedited %s: %s\n", st_path, err);
    CHECK(rc == 0);
    if (rc == 0) v4_weights_free(&w);
    test_random_edits(iters);
    char p[512];
    snprintf(p, sizeof(p), "%s/model.safetensors", tmpdir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/config.json", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    free(pub_data);
    pub_data = save;
    pub_size = ss;
    pub_hlen = sh;
    cfg_src = sc;
}

/* Usage: test_engine_weights [COMMAND]...
 *   cmp QUANT_DIR DEQUANT_DIR mxfp4|nvfp4   every role of a quantised checkpoint, bit for bit
 *   quantize FLOAT_DIR NVFP4_DEQUANT_DIR     --quantize-experts nvfp4 == make_official's NVFP4
 *   load DIR mxfp4|nvfp4                     a quantised checkpoint loads with these formats
 *   fuzz FILE.safetensors CONFIG.json N      N random header edits of a single-file checkpoint */
int main(int argc, char **argv)
{
    test_public();
    test_mutations();
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "cmp") && i + 3 < argc) {
            test_quantised(argv[i + 1], argv[i + 2], !strcmp(argv[i + 3], "nvfp4") ? QT_NVFP4 : QT_MXFP4);
            i += 4;
        } else if (!strcmp(argv[i], "quantize") && i + 2 < argc) {
            test_quantize_experts(argv[i + 1], argv[i + 2]);
            i += 3;
        } else if (!strcmp(argv[i], "fuzz") && i + 3 < argc) {
            test_fuzz_file(argv[i + 1], argv[i + 2], atoi(argv[i + 3]));
            i += 4;
        } else if (!strcmp(argv[i], "load") && i + 2 < argc) {
            test_load_only(argv[i + 1], !strcmp(argv[i + 2], "nvfp4") ? QT_NVFP4 : QT_MXFP4);
            i += 3;
        } else {
            fprintf(stderr, "bad arguments at '%s'\n", argv[i]);
            return 2;
        }
    }
    CHECK_DONE();
}
