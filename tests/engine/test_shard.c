/* test_shard.c — the multi-GPU split on the CPU: the plan for V4-Flash and what it refuses, engine.devices, qt_slice
 * and qt_dequant_window against dequantise-then-cut for every format (partial blocks included), and that the split
 * composes: the ranks' partial outputs of the grouped output projection and of an expert, summed as the all-reduce
 * sums them, equal the whole model's. */
#include "check.h"
#include "quant.h"
#include "shard.h"
#include "synthetic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* A random [rows x cols] tensor in fmt (finite values, scales near 1). Free with qt_free. */
static void make(qtensor *q, qt_format fmt, int rows, int cols, int f32_scales)
{
    memset(q, 0, sizeof *q);
    q->fmt = fmt;
    q->rows = rows;
    q->cols = cols;
    q->scale2 = 1.0f;
    size_t nd = 0, ns = 0;
    switch (fmt) {
    case QT_F32: nd = (size_t)rows * cols * 4; break;
    case QT_BF16:
    case QT_F16: nd = (size_t)rows * cols * 2; break;
    case QT_FP8_B128:
        nd = (size_t)rows * cols;
        ns = (size_t)((rows + 127) / 128) * ((cols + 127) / 128) * (f32_scales ? 4 : 1);
        q->scale_is_f32 = f32_scales;
        break;
    case QT_MXFP4: nd = (size_t)rows * ((cols + 1) / 2); ns = (size_t)rows * ((cols + 31) / 32); break;
    case QT_NVFP4: nd = (size_t)rows * ((cols + 1) / 2); ns = (size_t)rows * ((cols + 15) / 16); q->scale2 = 0.37f; break;
    }
    uint8_t *d = malloc(nd), *s = ns ? malloc(ns) : NULL;
    for (size_t i = 0; i < nd; i++) d[i] = (uint8_t)rnd();
    if (fmt == QT_F32)
        for (size_t i = 0; i < nd / 4; i++) ((float *)d)[i] = rndf();
    if (fmt == QT_BF16 || fmt == QT_F16)
        for (size_t i = 0; i < nd / 2; i++) ((uint16_t *)d)[i] = fmt == QT_BF16 ? qt_f32_to_bf16(rndf()) : 0x3C00 ^ (rnd() & 0x83FF);
    if (fmt == QT_FP8_B128)
        for (size_t i = 0; i < nd; i++) d[i] = qt_f32_to_e4m3(rndf() * 4);
    if (fmt == QT_FP8_B128 && f32_scales)
        for (size_t i = 0; i < ns / 4; i++) ((float *)s)[i] = 0.5f + (float)(rnd() % 100) / 100;
    else if (fmt == QT_FP8_B128 || fmt == QT_MXFP4)
        for (size_t i = 0; i < ns; i++) s[i] = (uint8_t)(124 + rnd() % 6);   /* 2^-3 .. 2^2 */
    else if (fmt == QT_NVFP4)
        for (size_t i = 0; i < ns; i++) s[i] = qt_f32_to_e4m3(0.25f + (float)(rnd() % 64) / 16);
    q->data = q->owned = d;
    q->scale = q->owned_scale = s;
}

static void dense(const qtensor *q, float *out)
{
    for (int r = 0; r < q->rows; r++) qt_dequant_row(q, r, out + (size_t)r * q->cols);
}

/* qt_slice(q, window) dequantises to exactly the window of q's dequantisation. */
static void check_window(const qtensor *q, int r0, int nr, int c0, int nc)
{
    qtensor s;
    if (qt_slice(q, r0, nr, c0, nc, &s)) {
        fprintf(stderr, "qt_slice fmt %d [%d+%d, %d+%d] of [%d x %d] refused\n", q->fmt, r0, nr, c0, nc, q->rows, q->cols);
        CHECK(0);
        return;
    }
    float *all = malloc((size_t)q->rows * q->cols * sizeof(float)), *w = malloc((size_t)nr * nc * sizeof(float));
    float *v = malloc((size_t)nr * nc * sizeof(float));
    dense(q, all);
    dense(&s, w);
    CHECK(qt_dequant_window(q, r0, nr, c0, nc, v) == 0);   /* the same window dequantised directly */
    int bad = 0;
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            const float a = w[(size_t)r * nc + c], b = all[(size_t)(r0 + r) * q->cols + c0 + c];
            const float d = v[(size_t)r * nc + c];
            bad += !(a == b || (a != a && b != b)) + !(d == b || (d != d && b != b));
        }
    CHECK(bad == 0);
    CHECK(s.rows == nr && s.cols == nc && s.fmt == q->fmt && s.scale2 == q->scale2);
    free(all);
    free(w);
    free(v);
    qt_free(&s);
}

static void test_slice(void)
{
    qtensor q, s;
    make(&q, QT_F32, 7, 9, 0);
    check_window(&q, 2, 3, 4, 5);
    qt_free(&q);
    make(&q, QT_BF16, 6, 10, 0);
    check_window(&q, 0, 6, 3, 7);
    qt_free(&q);
    make(&q, QT_F16, 5, 8, 0);
    check_window(&q, 1, 4, 0, 8);
    qt_free(&q);
    for (int f32 = 0; f32 < 2; f32++) {
        make(&q, QT_FP8_B128, 384, 300, f32);   /* a partial last column block */
        check_window(&q, 128, 256, 0, 300);
        check_window(&q, 0, 128, 128, 172);
        check_window(&q, 256, 128, 256, 44);
        CHECK(qt_slice(&q, 64, 128, 0, 128, &s) == -1);   /* off the 128-row blocks */
        CHECK(qt_slice(&q, 0, 128, 0, 100, &s) == -1);    /* ends inside a block, not at the tensor's end */
        CHECK(qt_slice(&q, 0, 512, 0, 128, &s) == -1);    /* past the tensor */
        qt_free(&q);
    }
    make(&q, QT_MXFP4, 5, 136, 0);
    check_window(&q, 1, 3, 32, 64);
    check_window(&q, 0, 5, 128, 8);
    CHECK(qt_slice(&q, 0, 5, 16, 32, &s) == -1);
    qt_free(&q);
    make(&q, QT_NVFP4, 4, 72, 0);
    check_window(&q, 0, 4, 16, 32);
    check_window(&q, 2, 2, 64, 8);
    CHECK(qt_slice(&q, 0, 4, 8, 16, &s) == -1);
    qt_free(&q);
    qtensor synth = {.fmt = QT_MXFP4, .rows = 4, .cols = 64, .synth_seed = 7};
    CHECK(qt_slice(&synth, 0, 2, 0, 64, &s) == -1);   /* no host bytes to cut */
}

static void test_plan(void)
{
    v4_config c;
    char err[256];
    CHECK(v4_synthetic_config("v4-flash", &c, err, sizeof err) == 0);
    v4_shard s;
    int heads = 0, groups = 0, inter = 0;
    for (int r = 0; r < 4; r++) {
        CHECK(v4_shard_plan(&c, c.moe_inter, 4, r, &s, err, sizeof err) == 0);
        CHECK(s.h0 == heads && s.g0 == groups && s.i0 == inter && s.si0 == inter);
        CHECK(s.nh * c.head_dim == s.ng * (c.n_heads * c.head_dim / c.o_groups));   /* a rank's heads are its groups' */
        CHECK(s.nh * c.head_dim % 128 == 0 && s.ng * c.o_lora_rank % 128 == 0 && s.ni % 128 == 0);   /* FP8 blocks */
        heads += s.nh;
        groups += s.ng;
        inter += s.ni;
    }
    CHECK(heads == c.n_heads && groups == c.o_groups && inter == c.moe_inter);
    CHECK(v4_shard_plan(&c, c.moe_inter, 1, 0, &s, err, sizeof err) == 0 && s.nh == c.n_heads && s.ni == c.moe_inter);
    CHECK(v4_shard_plan(&c, c.moe_inter, 3, 0, &s, err, sizeof err) == -1 && strstr(err, "num_attention_heads"));
    c.o_groups = 6;
    CHECK(v4_shard_plan(&c, c.moe_inter, 4, 0, &s, err, sizeof err) == -1 && strstr(err, "o_groups"));
    CHECK(v4_shard_plan(&c, c.moe_inter, 9, 0, &s, err, sizeof err) == -1);
    CHECK(v4_shard_plan(&c, c.moe_inter, 2, 2, &s, err, sizeof err) == -1);
}

static void test_devices(void)
{
    int d[SL_MAX_RANKS];
    char err[256];
    CHECK(sl_parse_devices("", d, err, sizeof err) == 0);
    CHECK(sl_parse_devices("all", d, err, sizeof err) == 0);
    CHECK(sl_parse_devices("0,1", d, err, sizeof err) == 2 && d[0] == 0 && d[1] == 1);
    CHECK(sl_parse_devices("3", d, err, sizeof err) == 1 && d[0] == 3);
    CHECK(sl_parse_devices("0,0", d, err, sizeof err) == 2 && d[1] == 0);
    CHECK(sl_parse_devices("0,1,0", d, err, sizeof err) == -1 && strstr(err, "twice"));
    CHECK(sl_parse_devices("0,,1", d, err, sizeof err) == -1);
    CHECK(sl_parse_devices("gpu0", d, err, sizeof err) == -1 && strstr(err, "engine.devices"));
    CHECK(sl_parse_devices("-1", d, err, sizeof err) == -1);
    CHECK(sl_parse_devices("0,1,2,3,4,5,6,7,8", d, err, sizeof err) == -1 && strstr(err, "at most"));
}

static double rel_l2(const double *a, const double *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void matvec(const qtensor *q, const float *x, double *y)
{
    float *row = malloc((size_t)q->cols * sizeof(float));
    for (int r = 0; r < q->rows; r++) {
        qt_dequant_row(q, r, row);
        double a = 0;
        for (int c = 0; c < q->cols; c++) a += (double)row[c] * x[c];
        y[r] = a;
    }
    free(row);
}

/* u [ng x ol] = the grouped projection: group g's ol rows of wo_a on o's g-th slice of gk */
static void grouped(const qtensor *wo_a, int ng, int ol, int gk, const float *o, float *u)
{
    double ug[128];
    for (int g = 0; g < ng; g++) {
        qtensor a;
        CHECK(qt_slice(wo_a, g * ol, ol, 0, gk, &a) == 0);
        matvec(&a, o + g * gk, ug);
        for (int i = 0; i < ol; i++) u[g * ol + i] = (float)ug[i];
        qt_free(&a);
    }
}

/* The attention output projection: o [H*hd] -> u_g = wo_a_g o_g (group g's rows of wo_a on its heads' slice of o),
 * y = wo_b u. Each rank holds its groups' wo_a rows and wo_b columns; the ranks' y sum to the whole. */
static void test_output_projection(int n)
{
    const int H = 8, hd = 64, G = 4, ol = 128, dim = 256, gk = H * hd / G;
    qtensor wo_a, wo_b;
    make(&wo_a, QT_FP8_B128, G * ol, gk, 0);
    make(&wo_b, QT_FP8_B128, dim, G * ol, 1);
    float *o = malloc(H * hd * sizeof(float)), *u = malloc(G * ol * sizeof(float));
    for (int i = 0; i < H * hd; i++) o[i] = rndf();
    double *y = calloc(dim, sizeof(double)), *ysum = calloc(dim, sizeof(double)), *yr = malloc(dim * sizeof(double));
    grouped(&wo_a, G, ol, gk, o, u);   /* the whole model */
    matvec(&wo_b, u, y);
    v4_config c = {.n_heads = H, .head_dim = hd, .o_groups = G, .o_lora_rank = ol, .moe_inter = 256};
    char err[256];
    for (int r = 0; r < n; r++) {
        v4_shard s;
        CHECK(v4_shard_plan(&c, 0, n, r, &s, err, sizeof err) == 0);
        qtensor a, b;
        CHECK(qt_slice(&wo_a, s.g0 * ol, s.ng * ol, 0, gk, &a) == 0);
        CHECK(qt_slice(&wo_b, 0, dim, s.g0 * ol, s.ng * ol, &b) == 0);
        const float *orank = o + s.h0 * hd;   /* the rank's heads */
        float *ur = malloc((size_t)s.ng * ol * sizeof(float));
        grouped(&a, s.ng, ol, gk, orank, ur);
        matvec(&b, ur, yr);
        for (int i = 0; i < dim; i++) ysum[i] += yr[i];
        free(ur);
        qt_free(&a);
        qt_free(&b);
    }
    CHECK(rel_l2(ysum, y, dim) < 1e-6);
    free(o);
    free(u);
    free(y);
    free(ysum);
    free(yr);
    qt_free(&wo_a);
    qt_free(&wo_b);
}

/* One SwiGLU expert, y = w2 (silu(w1 x) * w3 x) with the clamp, split along its intermediate units. */
static void expert(const qtensor *w1, const qtensor *w3, const qtensor *w2, const float *x, float limit, double *y)
{
    const int I = w1->rows;
    double *a = malloc(I * sizeof(double)), *b = malloc(I * sizeof(double));
    float *h = malloc(I * sizeof(float));
    matvec(w1, x, a);
    matvec(w3, x, b);
    for (int i = 0; i < I; i++) {
        double g = a[i] < limit ? a[i] : limit, v = b[i] < -limit ? -limit : b[i] > limit ? limit : b[i];
        h[i] = (float)(g / (1 + exp(-g)) * v);
    }
    matvec(w2, h, y);
    free(a);
    free(b);
    free(h);
}

static void test_expert(qt_format fmt, int n)
{
    const int dim = 256, I = 512;
    qtensor w1, w3, w2;
    make(&w1, fmt, I, dim, 0);
    make(&w3, fmt, I, dim, 0);
    make(&w2, fmt, dim, I, 0);
    float x[256];
    for (int i = 0; i < dim; i++) x[i] = rndf();
    double y[256], ysum[256] = {0}, yr[256];
    expert(&w1, &w3, &w2, x, 10.0f, y);
    v4_config c = {.n_heads = 8, .o_groups = 8, .moe_inter = I};
    char err[256];
    for (int r = 0; r < n; r++) {
        v4_shard s;
        CHECK(v4_shard_plan(&c, I, n, r, &s, err, sizeof err) == 0);
        qtensor a, b, d;
        CHECK(qt_slice(&w1, s.i0, s.ni, 0, dim, &a) == 0);
        CHECK(qt_slice(&w3, s.i0, s.ni, 0, dim, &b) == 0);
        CHECK(qt_slice(&w2, 0, dim, s.i0, s.ni, &d) == 0);
        expert(&a, &b, &d, x, 10.0f, yr);
        for (int i = 0; i < dim; i++) ysum[i] += yr[i];
        qt_free(&a);
        qt_free(&b);
        qt_free(&d);
    }
    CHECK(rel_l2(ysum, y, dim) < 1e-6);
    qt_free(&w1);
    qt_free(&w3);
    qt_free(&w2);
}

int main(void)
{
    test_slice();
    test_plan();
    test_devices();
    test_output_projection(2);
    test_output_projection(4);
    test_expert(QT_MXFP4, 2);
    test_expert(QT_NVFP4, 4);
    test_expert(QT_FP8_B128, 2);
    test_expert(QT_BF16, 8);
    CHECK_DONE();
}
