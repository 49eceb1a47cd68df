/* mhc.c — manifold-constrained hyper-connections (V4_SPEC §2.3).
 *
 * The residual is hc streams of `dim` floats (stream-major). Before each sublayer, hc_pre mixes the
 * streams into one input x = Σ_j pre[j]·X[j] and computes post weights and a doubly-stochastic
 * comb matrix (softmax, then Sinkhorn: 20 column and 19 row normalisations, ending with a column
 * one). After the sublayer, hc_post writes X'[k] = post[k]·f + Σ_j comb[j][k]·X[j].
 */
#include "cpu.h"

#include <string.h>

/* mixes[i] = (fn @ X_i) · rsqrt(mean(X_i²) + eps), for every token row i. */
static void hc_mixes(cpu_model *m, const float *X, int n, const float *fn, int n_mix, float *mix) {
    const v4_config *c = &m->w->cfg;
    int width = c->hc_mult * c->dim;
    qtensor q = cpu_f32_view(fn, n_mix, width);
    cpu_matmul(m->tp, &q, 0, n_mix, X, width, n, mix, n_mix);
    for (int i = 0; i < n; i++) {
        const float *f = X + (size_t)i * width;
        double ss = 0.0;
        for (int k = 0; k < width; k++) ss += (double)f[k] * f[k];
        float r = (float)(1.0 / sqrt(ss / width + c->norm_eps));
        for (int k = 0; k < n_mix; k++) mix[(size_t)i * n_mix + k] *= r;
    }
}

void cpu_hc_pre(cpu_model *m, const float *X, int n, const float *fn, const float *scale,
                const float *base, float *x, float *post, float *comb, float *mix_buf) {
    const v4_config *c = &m->w->cfg;
    int hc = c->hc_mult, dim = c->dim, n_mix = (2 + hc) * hc;
    float eps = c->hc_eps;
    hc_mixes(m, X, n, fn, n_mix, mix_buf);
    for (int i = 0; i < n; i++) {
        const float *mx = mix_buf + (size_t)i * n_mix;
        const float *Xi = X + (size_t)i * hc * dim;
        float pre[64];
        float *po = post + (size_t)i * hc, *C = comb + (size_t)i * hc * hc;
        for (int j = 0; j < hc; j++) {
            pre[j] = cpu_sigmoid(mx[j] * scale[0] + base[j]) + eps;
            po[j] = 2.0f * cpu_sigmoid(mx[hc + j] * scale[1] + base[hc + j]);
        }
        for (int j = 0; j < hc; j++) {           /* row softmax + eps */
            float *row = C + j * hc, mxv = -INFINITY, z = 0.0f;
            for (int k = 0; k < hc; k++) {
                row[k] = mx[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
                if (row[k] > mxv) mxv = row[k];
            }
            for (int k = 0; k < hc; k++) { row[k] = expf(row[k] - mxv); z += row[k]; }
            for (int k = 0; k < hc; k++) row[k] = row[k] / z + eps;
        }
        for (int it = 0; it < c->hc_sinkhorn_iters; it++) {
            if (it > 0)
                for (int j = 0; j < hc; j++) {   /* row normalisation */
                    float s = 0.0f;
                    for (int k = 0; k < hc; k++) s += C[j * hc + k];
                    for (int k = 0; k < hc; k++) C[j * hc + k] /= s + eps;
                }
            for (int k = 0; k < hc; k++) {       /* column normalisation */
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s += C[j * hc + k];
                for (int j = 0; j < hc; j++) C[j * hc + k] /= s + eps;
            }
        }
        float *xi = x + (size_t)i * dim;
        for (int d = 0; d < dim; d++) {
            float s = 0.0f;
            for (int j = 0; j < hc; j++) s += pre[j] * Xi[(size_t)j * dim + d];
            xi[d] = s;
        }
    }
}

void cpu_hc_post(const cpu_model *m, float *X, const float *f, int n, const float *post, const float *comb) {
    const v4_config *c = &m->w->cfg;
    int hc = c->hc_mult, dim = c->dim;
    float old[64];
    for (int i = 0; i < n; i++) {
        float *Xi = X + (size_t)i * hc * dim;
        const float *fi = f + (size_t)i * dim, *po = post + (size_t)i * hc, *C = comb + (size_t)i * hc * hc;
        for (int d = 0; d < dim; d++) {
            for (int j = 0; j < hc; j++) old[j] = Xi[(size_t)j * dim + d];
            for (int k = 0; k < hc; k++) {
                float s = po[k] * fi[d];
                for (int j = 0; j < hc; j++) s += C[j * hc + k] * old[j];
                Xi[(size_t)k * dim + d] = s;
            }
        }
    }
}

void cpu_hc_head(cpu_model *m, const float *X, int n, float *y, float *mix_buf) {
    const v4_weights *w = m->w;
    const v4_config *c = &w->cfg;
    int hc = c->hc_mult, dim = c->dim;
    hc_mixes(m, X, n, w->hc_head_fn, hc, mix_buf);
    for (int i = 0; i < n; i++) {
        const float *Xi = X + (size_t)i * hc * dim;
        float pre[64];
        for (int j = 0; j < hc; j++)
            pre[j] = cpu_sigmoid(mix_buf[(size_t)i * hc + j] * w->hc_head_scale[0] + w->hc_head_base[j]) + c->hc_eps;
        float *yi = y + (size_t)i * dim;
        for (int d = 0; d < dim; d++) {
            float s = 0.0f;
            for (int j = 0; j < hc; j++) s += pre[j] * Xi[(size_t)j * dim + d];
            yi[d] = s;
        }
    }
}
