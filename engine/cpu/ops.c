/* ops.c — the CPU backend's numeric building blocks (float32). */
#include "cpu.h"

#include <string.h>

/* Eight partial sums: deterministic order, and the compiler can keep them in one vector. */
float cpu_dot(const float *a, const float *b, int n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    float t = 0.0f;
    for (; i < n; i++) t += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;
}

typedef struct {
    cpu_pool *p;
    const qtensor *W;
    int row0;
    const float *x;
    int ldx, n;
    float *y;
    int ldy;
    int round_w;          /* round each weight to bf16 (gpu numerics) */
} matmul_job;

static void matmul_rows(void *arg, int i0, int i1, int thread) {
    matmul_job *j = arg;
    const qtensor *W = j->W;
    int cols = W->cols;
    float *tmp = cpu_pool_scratch(j->p, thread);
    for (int k = i0; k < i1; k++) {
        int r = j->row0 + k;
        const float *row;
        if (W->fmt == QT_F32 && !j->round_w) {
            row = (const float *)W->data + (size_t)r * cols;
        } else {
            qt_dequant_row(W, r, tmp);
            if (j->round_w) cpu_round_bf16(tmp, (size_t)cols);
            row = tmp;
        }
        for (int i = 0; i < j->n; i++)
            j->y[(size_t)i * j->ldy + k] = cpu_dot(row, j->x + (size_t)i * j->ldx, cols);
    }
}

void cpu_matmul(cpu_pool *p, const qtensor *W, int row0, int nrows,
                const float *x, int ldx, int n, float *y, int ldy) {
    if (n <= 0 || nrows <= 0) return;
    /* scratch was reserved for the widest weight at backend creation */
    matmul_job j = {p, W, row0, x, ldx, n, y, ldy, 0};
    /* below ~64K multiply-adds waking the workers costs more than it saves */
    if ((double)nrows * W->cols * n < 65536.0) matmul_rows(&j, 0, nrows, 0);
    else cpu_pool_run(p, matmul_rows, &j, nrows);
}

void cpu_matmul_dense(const cpu_model *m, const qtensor *W, int row0, int nrows, const float *x, int ldx, int n,
                      float *y, int ldy) {
    if (n <= 0 || nrows <= 0) return;
    matmul_job j = {m->tp, W, row0, x, ldx, n, y, ldy, m->bf16 && W->fmt != QT_FP8_B128};
    if ((double)nrows * W->cols * n < 65536.0) matmul_rows(&j, 0, nrows, 0);
    else cpu_pool_run(m->tp, matmul_rows, &j, nrows);
}

void cpu_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = qt_bf16_to_f32(qt_f32_to_bf16(x[i]));
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r * (w ? w[i] : 1.0f);
}

qtensor cpu_f32_view(const float *data, int rows, int cols) {
    qtensor q;
    memset(&q, 0, sizeof q);
    q.fmt = QT_F32;
    q.rows = rows;
    q.cols = cols;
    q.data = data;
    q.scale2 = 1.0f;
    return q;
}

void cpu_rope_table(const double *inv_freq, int half, long pos, float *cs, float *sn) {
    for (int i = 0; i < half; i++) {
        double a = (double)pos * inv_freq[i];
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
}

void cpu_rope(float *x, int dim, const float *cs, const float *sn, int half, int inverse) {
    float *r = x + dim - 2 * half;
    for (int i = 0; i < half; i++) {
        float c = cs[i], s = inverse ? -sn[i] : sn[i];
        float re = r[2 * i], im = r[2 * i + 1];
        r[2 * i] = re * c - im * s;
        r[2 * i + 1] = re * s + im * c;
    }
}
