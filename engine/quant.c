/* quant.c — scalar codecs, row dequantisation and the NVFP4 quantiser (see quant.h).
 *
 * Every load from weight data goes through memcpy: tensors inside a safetensors mmap need not be
 * aligned to their element size.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// scalar codecs

static float bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

float qt_bf16_to_f32(uint16_t v) { return bits_f32((uint32_t)v << 16); }

uint16_t qt_f32_to_bf16(float f)
{
    uint32_t b = f32_bits(f);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu)) return (uint16_t)((b >> 16) | 0x40); /* quiet NaN */
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

float qt_f16_to_f32(uint16_t v)
{
    uint32_t sign = (uint32_t)(v & 0x8000u) << 16;
    uint32_t e = (v >> 10) & 0x1Fu, m = v & 0x3FFu;
    if (e == 0x1F) return bits_f32(sign | 0x7F800000u | (m << 13)); /* inf / nan */
    if (e == 0) {
        /* zero or subnormal: m * 2^-24 (exact in float) */
        float f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* E4M3FN: 0x7F / 0xFF NaN, no infinities; e == 0 subnormal m * 2^-9 (written out: a load, no branches) */
static const float E4M3[256] = {
    0.0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f,
    0x1p-6f, 0x1.2p-6f, 0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f,
    0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f, 0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f,
    0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f, 0x1.cp-4f, 0x1.ep-4f,
    0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
    0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f,
    0x1p-1f, 0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f,
    0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f, 0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f,
    0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f, 0x1.cp+1f, 0x1.ep+1f,
    0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f,
    0x1p+4f, 0x1.2p+4f, 0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f,
    0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f, 0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f,
    0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f, 0x1.cp+6f, 0x1.ep+6f,
    0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
    0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f, NAN,
    -0.0f, -0x1p-9f, -0x1p-8f, -0x1.8p-8f, -0x1p-7f, -0x1.4p-7f, -0x1.8p-7f, -0x1.cp-7f,
    -0x1p-6f, -0x1.2p-6f, -0x1.4p-6f, -0x1.6p-6f, -0x1.8p-6f, -0x1.ap-6f, -0x1.cp-6f, -0x1.ep-6f,
    -0x1p-5f, -0x1.2p-5f, -0x1.4p-5f, -0x1.6p-5f, -0x1.8p-5f, -0x1.ap-5f, -0x1.cp-5f, -0x1.ep-5f,
    -0x1p-4f, -0x1.2p-4f, -0x1.4p-4f, -0x1.6p-4f, -0x1.8p-4f, -0x1.ap-4f, -0x1.cp-4f, -0x1.ep-4f,
    -0x1p-3f, -0x1.2p-3f, -0x1.4p-3f, -0x1.6p-3f, -0x1.8p-3f, -0x1.ap-3f, -0x1.cp-3f, -0x1.ep-3f,
    -0x1p-2f, -0x1.2p-2f, -0x1.4p-2f, -0x1.6p-2f, -0x1.8p-2f, -0x1.ap-2f, -0x1.cp-2f, -0x1.ep-2f,
    -0x1p-1f, -0x1.2p-1f, -0x1.4p-1f, -0x1.6p-1f, -0x1.8p-1f, -0x1.ap-1f, -0x1.cp-1f, -0x1.ep-1f,
    -0x1p+0f, -0x1.2p+0f, -0x1.4p+0f, -0x1.6p+0f, -0x1.8p+0f, -0x1.ap+0f, -0x1.cp+0f, -0x1.ep+0f,
    -0x1p+1f, -0x1.2p+1f, -0x1.4p+1f, -0x1.6p+1f, -0x1.8p+1f, -0x1.ap+1f, -0x1.cp+1f, -0x1.ep+1f,
    -0x1p+2f, -0x1.2p+2f, -0x1.4p+2f, -0x1.6p+2f, -0x1.8p+2f, -0x1.ap+2f, -0x1.cp+2f, -0x1.ep+2f,
    -0x1p+3f, -0x1.2p+3f, -0x1.4p+3f, -0x1.6p+3f, -0x1.8p+3f, -0x1.ap+3f, -0x1.cp+3f, -0x1.ep+3f,
    -0x1p+4f, -0x1.2p+4f, -0x1.4p+4f, -0x1.6p+4f, -0x1.8p+4f, -0x1.ap+4f, -0x1.cp+4f, -0x1.ep+4f,
    -0x1p+5f, -0x1.2p+5f, -0x1.4p+5f, -0x1.6p+5f, -0x1.8p+5f, -0x1.ap+5f, -0x1.cp+5f, -0x1.ep+5f,
    -0x1p+6f, -0x1.2p+6f, -0x1.4p+6f, -0x1.6p+6f, -0x1.8p+6f, -0x1.ap+6f, -0x1.cp+6f, -0x1.ep+6f,
    -0x1p+7f, -0x1.2p+7f, -0x1.4p+7f, -0x1.6p+7f, -0x1.8p+7f, -0x1.ap+7f, -0x1.cp+7f, -0x1.ep+7f,
    -0x1p+8f, -0x1.2p+8f, -0x1.4p+8f, -0x1.6p+8f, -0x1.8p+8f, -0x1.ap+8f, -0x1.cp+8f, -NAN,
};

float qt_e4m3_to_f32(uint8_t v) { return E4M3[v]; }

float qt_e8m0_to_f32(uint8_t v)
{
    if (v == 0xFF) return NAN;
    if (v == 0) return 0x1p-127f; /* the one subnormal */
    return bits_f32((uint32_t)v << 23);
}

static const float E2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float qt_e2m1_to_f32(uint8_t nibble) { return E2M1[nibble & 0xF]; }

uint8_t qt_f32_to_e4m3(float f)
{
    if (f != f) return 0x7F;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    double a = fabs((double)f);
    if (a == 0) return sign;
    if (a >= 448.0) return sign | 0x7E; /* saturate (also inf) */
    int e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (e < -6) e = -6; /* subnormal quantum 2^-9 */
    double q = ldexp(1.0, e - 3);
    double n = a / q; /* exact */
    double r = floor(n), frac = n - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) == 1.0)) r += 1.0;
    double v = r * q;
    if (v > 448.0) v = 448.0;
    if (v < 0x1p-6) return sign | (uint8_t)(int)(v / 0x1p-9);
    int e2;
    frexp(v, &e2);
    e2 -= 1;
    int m = (int)(v / ldexp(1.0, e2) * 8.0) - 8;
    return sign | (uint8_t)(((e2 + 7) << 3) | m);
}

uint8_t qt_fp8_block_exp(float amax)
{
    const float x = (amax > 1e-4f ? amax : 1e-4f) / 448.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t e = ((u >> 23) & 0xFF) + ((u & 0x7FFFFF) != 0);
    return (uint8_t)(e < 254 ? e : 254);   /* a non-finite amax */
}

void qt_fp8_round_blocks(float *x, int n, int block)
{
    for (int b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int i = b; i < b + block; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const int e = qt_fp8_block_exp(amax) - 127;
        const float inv = ldexpf(1.0f, -e), s = ldexpf(1.0f, e);
        for (int i = b; i < b + block; i++) x[i] = qt_e4m3_to_f32(qt_f32_to_e4m3(x[i] * inv)) * s;
    }
}

uint8_t qt_f32_to_e2m1(float f)
{
    /* ModelOpt _cast_fp4: sign = (x < 0); ord = searchsorted(bounds, |x|); ties at 0.75, 1.75, 3.5 go up
     * (round to nearest, ties to the even code); saturate at 6. NaN -> 0. */
    static const float bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const int up_at_bound[7] = {0, 1, 0, 1, 0, 1, 0};
    uint8_t sign = f < 0 ? 8 : 0;
    float a = fabsf(f);
    int o = 0;
    while (o < 7 && a > bounds[o]) o++;
    if (o < 7 && a == bounds[o]) o += up_at_bound[o];
    return sign | (uint8_t)o;
}

// ----------------------------------------------------------------------------
// rows

static size_t fp4_row_bytes(int cols) { return ((size_t)cols + 1) / 2; }

void qt_dequant_row(const qtensor *q, int r, float *out)
{
    const int C = q->cols;
    const unsigned char *d = q->data;
    switch (q->fmt) {
    case QT_F32:
        memcpy(out, d + (size_t)r * C * 4, (size_t)C * 4);
        break;
    case QT_BF16:
        for (int c = 0; c < C; c++) {
            uint16_t v;
            memcpy(&v, d + ((size_t)r * C + c) * 2, 2);
            out[c] = qt_bf16_to_f32(v);
        }
        break;
    case QT_F16:
        for (int c = 0; c < C; c++) {
            uint16_t v;
            memcpy(&v, d + ((size_t)r * C + c) * 2, 2);
            out[c] = qt_f16_to_f32(v);
        }
        break;
    case QT_FP8_B128: {
        const int bc = (C + 127) / 128;
        const unsigned char *row = d + (size_t)r * C;
        const size_t srow = (size_t)(r / 128) * bc;
        for (int b = 0; b < bc; b++) {
            float s;
            if (q->scale_is_f32) memcpy(&s, (const unsigned char *)q->scale + (srow + b) * 4, 4);
            else s = qt_e8m0_to_f32(((const uint8_t *)q->scale)[srow + b]);
            int c1 = (b + 1) * 128 < C ? (b + 1) * 128 : C;
            for (int c = b * 128; c < c1; c++) out[c] = qt_e4m3_to_f32(row[c]) * s;
        }
        break;
    }
    case QT_MXFP4:
    case QT_NVFP4: {
        const int blk = q->fmt == QT_MXFP4 ? 32 : 16;
        const int nb = (C + blk - 1) / blk;
        const unsigned char *row = d + (size_t)r * fp4_row_bytes(C);
        const uint8_t *sc = (const uint8_t *)q->scale + (size_t)r * nb;
        for (int b = 0; b < nb; b++) {
            int c1 = (b + 1) * blk < C ? (b + 1) * blk : C;
            if (q->fmt == QT_MXFP4) {
                float s = qt_e8m0_to_f32(sc[b]);
                for (int c = b * blk; c < c1; c++) out[c] = E2M1[(row[c >> 1] >> ((c & 1) * 4)) & 0xF] * s;
            } else {
                /* e2m1 * e4m3 is exact in float; one rounding for the product with scale_2 */
                float s = qt_e4m3_to_f32(sc[b]);
                for (int c = b * blk; c < c1; c++)
                    out[c] = (E2M1[(row[c >> 1] >> ((c & 1) * 4)) & 0xF] * s) * q->scale2;
            }
        }
        break;
    }
    }
}

void qt_matvec_rows(const qtensor *q, const float *x, float *y, int r0, int r1, float *tmp)
{
    const int C = q->cols;
    for (int r = r0; r < r1; r++) {
        const float *w;
        if (q->fmt == QT_F32 && ((uintptr_t)q->data % sizeof(float)) == 0) {
            w = (const float *)q->data + (size_t)r * C;
        } else {
            qt_dequant_row(q, r, tmp);
            w = tmp;
        }
        double acc = 0.0;
        for (int c = 0; c < C; c++) acc += (double)w[c] * x[c];
        y[r] = (float)acc;
    }
}

size_t qt_nbytes(const qtensor *q)
{
    size_t R = (size_t)q->rows, C = (size_t)q->cols;
    switch (q->fmt) {
    case QT_F32: return R * C * 4;
    case QT_BF16:
    case QT_F16: return R * C * 2;
    case QT_FP8_B128: return R * C + ((R + 127) / 128) * ((C + 127) / 128) * (q->scale_is_f32 ? 4 : 1);
    case QT_MXFP4: return R * fp4_row_bytes(q->cols) + R * ((C + 31) / 32);
    case QT_NVFP4: return R * fp4_row_bytes(q->cols) + R * ((C + 15) / 16) + 4;
    }
    return 0;
}

void qt_free(qtensor *q)
{
    if (!q) return;
    free(q->owned);
    free(q->owned_scale);
    memset(q, 0, sizeof(*q));
}

/* Copy a [nr x nc] window of a qtensor; the window's edges must fall on the format's block edges (or the tensor's). */
static int slice_fits(int off, int n, int total, int blk)
{
    return off >= 0 && n > 0 && off + n <= total && off % blk == 0 && (n % blk == 0 || off + n == total);
}

int qt_dequant_window(const qtensor *q, int r0, int nr, int c0, int nc, float *out)
{
    float *row = malloc((size_t)q->cols * sizeof(float));
    if (!row) return -1;
    for (int r = 0; r < nr; r++) {
        qt_dequant_row(q, r0 + r, row);
        memcpy(out + (size_t)r * nc, row + c0, (size_t)nc * sizeof(float));
    }
    free(row);
    return 0;
}

int qt_slice(const qtensor *q, int r0, int nr, int c0, int nc, qtensor *out)
{
    memset(out, 0, sizeof(*out));
    if (!q->data) return -1;
    int rblk = 1, cblk = 1;
    if (q->fmt == QT_FP8_B128) rblk = cblk = 128;
    else if (q->fmt == QT_MXFP4) cblk = 32;
    else if (q->fmt == QT_NVFP4) cblk = 16;
    if (!slice_fits(r0, nr, q->rows, rblk) || !slice_fits(c0, nc, q->cols, cblk)) return -1;
    *out = *q;
    out->rows = nr;
    out->cols = nc;
    out->owned = out->owned_scale = NULL;
    out->data = out->scale = NULL;
    const unsigned char *d = q->data, *sc = q->scale;
    size_t row_b, off_b, n_b;   /* a data row's bytes in q, the window's offset and width in it */
    switch (q->fmt) {
    case QT_F32: row_b = (size_t)q->cols * 4; off_b = (size_t)c0 * 4; n_b = (size_t)nc * 4; break;
    case QT_BF16:
    case QT_F16: row_b = (size_t)q->cols * 2; off_b = (size_t)c0 * 2; n_b = (size_t)nc * 2; break;
    case QT_FP8_B128: row_b = (size_t)q->cols; off_b = (size_t)c0; n_b = (size_t)nc; break;
    default: row_b = fp4_row_bytes(q->cols); off_b = (size_t)c0 / 2; n_b = fp4_row_bytes(nc); break;
    }
    unsigned char *od = malloc(n_b * (size_t)nr);
    if (!od) return -1;
    for (int r = 0; r < nr; r++) memcpy(od + (size_t)r * n_b, d + (size_t)(r0 + r) * row_b + off_b, n_b);
    out->data = out->owned = od;
    if (q->fmt == QT_FP8_B128 || q->fmt == QT_MXFP4 || q->fmt == QT_NVFP4) {
        /* scale rows and columns of the window, one byte (four for F32 FP8 scales) each */
        const int es = q->fmt == QT_FP8_B128 && q->scale_is_f32 ? 4 : 1;
        const int srow = q->fmt == QT_FP8_B128 ? (q->cols + 127) / 128 : (q->cols + cblk - 1) / cblk;
        const int sr0 = r0 / rblk, snr = (nr + rblk - 1) / rblk, sc0 = c0 / cblk, snc = (nc + cblk - 1) / cblk;
        unsigned char *os = malloc((size_t)snr * snc * es);
        if (!os) { qt_free(out); return -1; }
        for (int r = 0; r < snr; r++)
            memcpy(os + (size_t)r * snc * es, sc + ((size_t)(sr0 + r) * srow + sc0) * es, (size_t)snc * es);
        out->scale = out->owned_scale = os;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// NVFP4 quantiser (ModelOpt NVFP4QTensor rounding, as fixtures/formats/fpcodec.py quant_nvfp4)

float qt_nvfp4_scale2(float amax)
{
    float s2 = amax / 2688.0f; /* 6 * 448 */
    return s2 > 0 && isfinite(s2) ? s2 : 1.0f;
}

int qt_quantize_nvfp4_s2(const float *w, int rows, int cols, float scale2, qtensor *out)
{
    memset(out, 0, sizeof(*out));
    if (rows <= 0 || cols <= 0 || !(scale2 > 0) || !isfinite(scale2)) return -1;
    const int nb = (cols + 15) / 16;
    const size_t rb = fp4_row_bytes(cols);
    uint8_t *packed = calloc((size_t)rows * rb, 1);
    uint8_t *sc = malloc((size_t)rows * nb);
    if (!packed || !sc) {
        free(packed);
        free(sc);
        return -1;
    }
    const float den6 = 6.0f * scale2;
    for (int r = 0; r < rows; r++) {
        const float *row = w + (size_t)r * cols;
        for (int b = 0; b < nb; b++) {
            int c0 = b * 16, c1 = c0 + 16 < cols ? c0 + 16 : cols;
            float amax = 0.0f;
            for (int c = c0; c < c1; c++) {
                float a = fabsf(row[c]);
                if (a > amax) amax = a;
            }
            float pbs = amax / den6;
            if (pbs == 0.0f) pbs = 1.0f;
            uint8_t sb = qt_f32_to_e4m3(pbs);
            sc[(size_t)r * nb + b] = sb;
            const float div = qt_e4m3_to_f32(sb) * scale2;
            for (int c = c0; c < c1; c++) {
                uint8_t code = qt_f32_to_e2m1(row[c] / div);
                packed[(size_t)r * rb + (c >> 1)] |= (uint8_t)(code << ((c & 1) * 4));
            }
        }
    }
    out->fmt = QT_NVFP4;
    out->rows = rows;
    out->cols = cols;
    out->data = packed;
    out->scale = sc;
    out->scale2 = scale2;
    out->owned = packed;
    out->owned_scale = sc;
    return 0;
}

int qt_quantize_nvfp4(const float *w, int rows, int cols, qtensor *out)
{
    float amax = 0.0f;
    for (size_t i = 0; i < (size_t)rows * (size_t)(cols > 0 ? cols : 0); i++) {
        float a = fabsf(w[i]);
        if (a > amax) amax = a;
    }
    return qt_quantize_nvfp4_s2(w, rows, cols, qt_nvfp4_scale2(amax), out);
}
