/* test_weights.c — load checkpoints by role and check values, shapes, naming and errors. */
#include "check.h"
#include "weights.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Usage: test_engine_weights [QUANT_DIR DEQUANT_DIR EXPERT_FORMAT]... (format: mxfp4 | nvfp4)
 *        or FLOAT_DIR NVFP4_DEQUANT_DIR quantize */
int main(int argc, char **argv)
{
    test_public();
    for (int i = 1; i + 2 < argc; i += 3)
        if (!strcmp(argv[i + 2], "quantize")) test_quantize_experts(argv[i], argv[i + 1]);
        else test_quantised(argv[i], argv[i + 1], !strcmp(argv[i + 2], "nvfp4") ? QT_NVFP4 : QT_MXFP4);
    CHECK_DONE();
}
