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

int main(void)
{
    test_public();
    CHECK_DONE();
}
