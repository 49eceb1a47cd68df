/* test_quant.c — scalar codecs (every E2M1 code, every E4M3 / E8M0 byte), BF16/F16 edges, row
 * dequantisation for every format incl. partial blocks, matvec, nbytes, the NVFP4 quantiser, and the FP8 blocks
 * with power-of-two scales (the indexer's FP8 keys). */
#include "check.h"
#include "quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvfp4_gold.h"


static float bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Independent decoders: straight from the format definitions, in double. */
static double ref_e4m3(int v)
{
    int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    double mag = e == 0 ? (m / 8.0) * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -mag : mag;
}
static double ref_e2m1(int c)
{
    int s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
    double mag = e == 0 ? 0.5 * m : pow(2.0, e - 1) * (1.0 + 0.5 * m);
    return s ? -mag : mag;
}

static void test_scalars(void)
{
    /* E2M1: all 16 codes */
    static const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++) {
        CHECK_NEAR(qt_e2m1_to_f32((uint8_t)c), ref_e2m1(c), 0);
        CHECK(fabsf(qt_e2m1_to_f32((uint8_t)c)) == want[c & 7]);
        CHECK(qt_f32_to_e2m1(qt_e2m1_to_f32((uint8_t)c)) == (c == 8 ? 8 : c) || (c == 8 && qt_f32_to_e2m1(-0.0f) == 0));
    }
    CHECK(qt_e2m1_to_f32(0x17) == 6.0f); /* high bits ignored */
    /* E2M1 encoding: nearest, ties to the even code, saturation, sign */
    static const float in[] = {0.24f, 0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 7.0f, 1e30f,
                               -0.75f, -5.5f, -100.0f};
    static const uint8_t out[] = {0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7, 10, 15, 15};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) CHECK(qt_f32_to_e2m1(in[i]) == out[i]);

    /* E4M3: all 256 bytes against the definition, and encode(decode(b)) == b */
    for (int v = 0; v < 256; v++) {
        double r = ref_e4m3(v);
        float f = qt_e4m3_to_f32((uint8_t)v);
        if (isnan(r)) {
            CHECK(isnan(f));
            CHECK(v == 0x7F || v == 0xFF);
            continue;
        }
        CHECK((double)f == r);
        CHECK(!!signbit(f) == (v >= 128));
        CHECK(qt_f32_to_e4m3(f) == v);
    }
    CHECK(qt_e4m3_to_f32(0x7E) == 448.0f && qt_e4m3_to_f32(0x01) == 0x1p-9f && qt_e4m3_to_f32(0x08) == 0x1p-6f);
    CHECK(qt_e4m3_to_f32(0x38) == 1.0f && qt_e4m3_to_f32(0xB8) == -1.0f && qt_e4m3_to_f32(0x07) == 7 * 0x1p-9f);
    /* E4M3 encoding: ties to even mantissa, saturation at 448, NaN */
    CHECK(qt_f32_to_e4m3(1.0625f) == 0x38);        /* halfway 1 and 1.125 -> even (1.0) */
    CHECK(qt_f32_to_e4m3(1.1875f) == 0x3A);        /* halfway 1.125 and 1.25 -> 1.25 */
    CHECK(qt_f32_to_e4m3(1.07f) == 0x39);
    CHECK(qt_f32_to_e4m3(0x1p-10f) == 0x00);       /* half the smallest subnormal -> 0 (even) */
    CHECK(qt_f32_to_e4m3(3 * 0x1p-10f) == 0x02);   /* 1.5 quanta -> 2 (even) */
    CHECK(qt_f32_to_e4m3(460.0f) == 0x7E && qt_f32_to_e4m3(1e9f) == 0x7E && qt_f32_to_e4m3(INFINITY) == 0x7E);
    CHECK(qt_f32_to_e4m3(-INFINITY) == 0xFE && qt_f32_to_e4m3(NAN) == 0x7F && qt_f32_to_e4m3(-0.0f) == 0x80);
    /* every midpoint between neighbouring positive codes goes to the even code */
    for (int v = 0; v < 0x7E; v++) {
        double mid = (ref_e4m3(v) + ref_e4m3(v + 1)) / 2;
        CHECK(qt_f32_to_e4m3((float)mid) == ((v & 1) ? v + 1 : v));
    }

    /* E8M0: all 256 bytes */
    for (int v = 0; v < 256; v++) {
        float f = qt_e8m0_to_f32((uint8_t)v);
        if (v == 255) CHECK(isnan(f));
        else CHECK((double)f == pow(2.0, v - 127));
    }
    CHECK(qt_e8m0_to_f32(127) == 1.0f && qt_e8m0_to_f32(0) == 0x1p-127f && qt_e8m0_to_f32(254) == 0x1p127f);

    /* BF16 */
    CHECK(qt_bf16_to_f32(0x3F80) == 1.0f && qt_bf16_to_f32(0xC000) == -2.0f);
    CHECK(isinf(qt_bf16_to_f32(0x7F80)) && qt_bf16_to_f32(0xFF80) < 0 && isnan(qt_bf16_to_f32(0x7FC0)));
    CHECK(qt_bf16_to_f32(0x0001) == 0x1p-133f && qt_bf16_to_f32(0x8000) == 0 && signbit(qt_bf16_to_f32(0x8000)));
    CHECK(qt_f32_to_bf16(bits(0x3F808000)) == 0x3F80); /* tie -> even */
    CHECK(qt_f32_to_bf16(bits(0x3F818000)) == 0x3F82); /* tie -> even (up) */
    CHECK(qt_f32_to_bf16(bits(0x3F808001)) == 0x3F81);
    CHECK(qt_f32_to_bf16(bits(0x7F7FFFFF)) == 0x7F80); /* rounds to inf */
    CHECK(qt_f32_to_bf16(INFINITY) == 0x7F80 && qt_f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK((qt_f32_to_bf16(NAN) & 0x7F80) == 0x7F80 && (qt_f32_to_bf16(NAN) & 0x7F));
    CHECK(qt_f32_to_bf16(bits(0x7F800001)) != 0x7F80); /* signalling NaN stays NaN */
    CHECK(qt_f32_to_bf16(bits(0x00010000)) == 0x0001);
    for (int i = 0; i < 1000; i++) {
        float f = rndf() * 1000;
        uint16_t h = qt_f32_to_bf16(f);
        CHECK(fabsf(qt_bf16_to_f32(h) - f) <= fabsf(f) * 0x1p-8f);
    }

    /* F16 */
    CHECK(qt_f16_to_f32(0x3C00) == 1.0f && qt_f16_to_f32(0xC000) == -2.0f && qt_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(isinf(qt_f16_to_f32(0x7C00)) && qt_f16_to_f32(0xFC00) == -INFINITY && isnan(qt_f16_to_f32(0x7E00)));
    CHECK(isnan(qt_f16_to_f32(0x7C01)) && isnan(qt_f16_to_f32(0xFE00)));
    CHECK(qt_f16_to_f32(0x0001) == 0x1p-24f && qt_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(qt_f16_to_f32(0x0400) == 0x1p-14f && qt_f16_to_f32(0x8001) == -0x1p-24f);
    CHECK(qt_f16_to_f32(0x8000) == 0 && signbit(qt_f16_to_f32(0x8000)));
    CHECK(qt_f16_to_f32(0x3555) == (float)(1 + 0x155 / 1024.0) * 0.25f);
}

/* FP8 128x128 blocks on a 130x200 matrix: 2x2 blocks, the last ones partial. */
static void test_fp8(int f32_scale)
{
    const int R = 130, C = 200, BR = 2, BC = 2;
    uint8_t *w = malloc((size_t)R * C), sc8[4];
    float scf[4], *row = malloc(C * sizeof(float));
    for (int i = 0; i < R * C; i++) {
        w[i] = (uint8_t)rnd();
        if ((w[i] & 0x7F) == 0x7F) w[i] ^= 1; /* no NaN codes */
    }
    for (int b = 0; b < BR * BC; b++) {
        sc8[b] = (uint8_t)(110 + rnd() % 30);
        scf[b] = f32_scale ? rndf() * 0.01f : 0;
    }
    qtensor q = {.fmt = QT_FP8_B128, .rows = R, .cols = C, .data = w, .scale = f32_scale ? (void *)scf : (void *)sc8,
                 .scale_is_f32 = f32_scale, .scale2 = 1};
    long bad = 0;
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&q, r, row);
        for (int c = 0; c < C; c++) {
            int b = (r / 128) * BC + c / 128;
            double s = f32_scale ? scf[b] : pow(2.0, sc8[b] - 127);
            bad += (double)row[c] != (double)(float)(ref_e4m3(w[r * C + c]) * s);
        }
    }
    CHECK(bad == 0);
    /* hand-computed corners: (129, 199) lies in block (1,1), (127,127) in (0,0), (128,0) in (1,0) */
    w[129 * C + 199] = 0x3A; /* 1.25 */
    w[127 * C + 127] = 0xC2; /* -2.5 */
    w[128 * C + 0] = 0x01;   /* 2^-9 */
    sc8[3] = 127 + 3;        /* 8 */
    sc8[0] = 127 - 1;        /* 0.5 */
    sc8[2] = 127 + 9;        /* 512 */
    if (!f32_scale) {
        qt_dequant_row(&q, 129, row);
        CHECK(row[199] == 10.0f);
        qt_dequant_row(&q, 127, row);
        CHECK(row[127] == -1.25f);
        qt_dequant_row(&q, 128, row);
        CHECK(row[0] == 1.0f);
        CHECK(qt_nbytes(&q) == (size_t)R * C + 4);
    }
    free(w);
    free(row);
}

/* MXFP4 (block 32) and NVFP4 (block 16) with cols not a multiple of the block, odd cols included. */
static void test_fp4(qt_format fmt, int R, int C)
{
    const int blk = fmt == QT_MXFP4 ? 32 : 16, nb = (C + blk - 1) / blk, rb = (C + 1) / 2;
    uint8_t *p = malloc((size_t)R * rb), *sc = malloc((size_t)R * nb);
    float *row = malloc(C * sizeof(float));
    for (int i = 0; i < R * rb; i++) p[i] = (uint8_t)rnd();
    for (int i = 0; i < R * nb; i++) sc[i] = fmt == QT_MXFP4 ? (uint8_t)(120 + rnd() % 12) : (uint8_t)(rnd() % 0x7E);
    qtensor q = {.fmt = fmt, .rows = R, .cols = C, .data = p, .scale = sc, .scale2 = fmt == QT_NVFP4 ? 0.0123f : 1};
    long bad = 0;
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&q, r, row);
        for (int c = 0; c < C; c++) {
            int code = (p[r * rb + c / 2] >> (4 * (c % 2))) & 15;
            double s = fmt == QT_MXFP4 ? pow(2.0, sc[r * nb + c / blk] - 127) : ref_e4m3(sc[r * nb + c / blk]);
            float want = fmt == QT_MXFP4 ? (float)(ref_e2m1(code) * s) : (float)(ref_e2m1(code) * s * (double)0.0123f);
            bad += row[c] != want;
        }
    }
    CHECK(bad == 0);
    /* hand-computed: last (partial) block of the last row */
    int r = R - 1, c = C - 1;
    p[r * rb + c / 2] = (uint8_t)((c % 2) ? (0x0D << 4) | (p[r * rb + c / 2] & 15) : (p[r * rb + c / 2] & 0xF0) | 0x0D); /* -3 */
    sc[r * nb + nb - 1] = fmt == QT_MXFP4 ? 127 + 2 : 0x40; /* 4 | e4m3 0x40 = 2.0 */
    qt_dequant_row(&q, r, row);
    CHECK(row[c] == (fmt == QT_MXFP4 ? -12.0f : -6.0f * 0.0123f));
    CHECK(qt_nbytes(&q) == (size_t)R * rb + (size_t)R * nb + (fmt == QT_NVFP4 ? 4 : 0));

    /* matvec over a row range equals the dot products of dequantised rows */
    float *x = malloc(C * sizeof(float)), *y = calloc((size_t)R, sizeof(float)), *tmp = malloc(C * sizeof(float));
    for (int i = 0; i < C; i++) x[i] = rndf();
    qt_matvec_rows(&q, x, y, 1, R, tmp);
    CHECK(y[0] == 0.0f);
    for (int rr = 1; rr < R; rr++) {
        qt_dequant_row(&q, rr, row);
        double acc = 0;
        for (int i = 0; i < C; i++) acc += (double)row[i] * x[i];
        CHECK_NEAR(y[rr], acc, 1e-5 * (1 + fabs(acc)));
    }
    free(x);
    free(y);
    free(tmp);
    free(p);
    free(sc);
    free(row);
}

static void test_plain(void)
{
    const int R = 5, C = 7;
    float f[35];
    uint16_t b[35], h[35];
    for (int i = 0; i < R * C; i++) {
        f[i] = rndf();
        b[i] = qt_f32_to_bf16(f[i]);
        h[i] = (uint16_t)(0x3C00 + i); /* 1 + i/1024 */
    }
    /* unaligned copy of f: rows must still decode (loads use memcpy) */
    unsigned char *un = malloc(sizeof(f) + 1);
    memcpy(un + 1, f, sizeof(f));
    qtensor qf = {.fmt = QT_F32, .rows = R, .cols = C, .data = un + 1, .scale2 = 1};
    qtensor qb = {.fmt = QT_BF16, .rows = R, .cols = C, .data = b, .scale2 = 1};
    qtensor qh = {.fmt = QT_F16, .rows = R, .cols = C, .data = h, .scale2 = 1};
    float row[7], x[7], y[5], tmp[7];
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&qf, r, row);
        for (int c = 0; c < C; c++) CHECK(row[c] == f[r * C + c]);
        qt_dequant_row(&qb, r, row);
        for (int c = 0; c < C; c++) CHECK(row[c] == qt_bf16_to_f32(b[r * C + c]));
        qt_dequant_row(&qh, r, row);
        for (int c = 0; c < C; c++) CHECK(row[c] == 1.0f + (r * C + c) / 1024.0f);
    }
    for (int c = 0; c < C; c++) x[c] = rndf();
    qt_matvec_rows(&qf, x, y, 0, R, tmp);
    for (int r = 0; r < R; r++) {
        double acc = 0;
        for (int c = 0; c < C; c++) acc += (double)f[r * C + c] * x[c];
        CHECK_NEAR(y[r], acc, 1e-6);
    }
    CHECK(qt_nbytes(&qf) == 140 && qt_nbytes(&qb) == 70);
    free(un);
}

/* NVFP4 quantiser: bytes identical to fpcodec.quant_nvfp4 (ModelOpt rounding) on a fixed matrix. */
static void test_nvfp4_gold(void)
{
    const int R = 4, C = 48;
    float w[4 * 48];
    uint32_t s = 12345;
    for (int i = 0; i < R * C; i++) {
        s = (uint32_t)(((uint64_t)s * 1103515245u + 12345u) % (1u << 31));
        w[i] = (float)((int)((s >> 8) % 4001) - 2000) * 0x1p-11f;
    }
    for (int c = 0; c < 16; c++) w[1 * C + 16 + c] *= 0x1p-12f;
    for (int c = 0; c < 16; c++) w[2 * C + 32 + c] = 0.0f;
    qtensor q;
    CHECK(qt_quantize_nvfp4(w, R, C, &q) == 0);
    CHECK(q.fmt == QT_NVFP4 && q.rows == R && q.cols == C && q.owned && q.owned_scale);
    CHECK(q.scale2 == GOLD_S2);
    CHECK(!memcmp(q.data, GOLD_PACKED, sizeof(GOLD_PACKED)));
    CHECK(!memcmp(q.scale, GOLD_SCALE, sizeof(GOLD_SCALE)));
    float row[48];
    long bad = 0;
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&q, r, row);
        for (int c = 0; c < C; c++) bad += row[c] != bits(GOLD_DEQ_BITS[r * C + c]);
    }
    CHECK(bad == 0);
    qt_free(&q);
    CHECK(q.owned == NULL && q.data == NULL);
}

/* Round trip on fresh random matrices (cols not a multiple of 16): per-element error within half a
 * quantisation step of the block, and exact reproduction of representable matrices. */
static void test_nvfp4_roundtrip(void)
{
    const int R = 9, C = 45, nb = 3;
    float w[9 * 45], row[45];
    for (int i = 0; i < R * C; i++) w[i] = rndf() * (1 + (i % 7)) * 0.05f;
    qtensor q;
    CHECK(qt_quantize_nvfp4(w, R, C, &q) == 0);
    double se = 0, sw = 0;
    long bad = 0;
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&q, r, row);
        for (int c = 0; c < C; c++) {
            double seff = qt_e4m3_to_f32(((const uint8_t *)q.scale)[r * nb + c / 16]) * (double)q.scale2;
            double v = fabs(w[r * C + c]) / seff, e = fabs(row[c] - w[r * C + c]) / seff;
            double lim = v < 2 ? 0.25 : v < 4 ? 0.5 : v <= 6 ? 1.0 : v - 6;
            bad += e > lim * (1 + 1e-6) + 1e-6;
            se += e * e * seff * seff;
            sw += (double)w[r * C + c] * w[r * C + c];
        }
    }
    CHECK(bad == 0);
    CHECK(sqrt(se / sw) < 0.12); /* FP4: ~8-10 % relative RMS error */
    qt_free(&q);

    /* representable: block j of row r = e2m1 codes * sb * scale2 with ±6 in every block, global amax
     * 6*448*scale2 -> every code and block scale must come back exactly */
    const float s2 = 0x1p-10f;
    static const uint8_t sbs[] = {0x7E, 0x38, 0x30, 0x45, 0x11, 0x5A};
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int b = c / 16;
            float sb = qt_e4m3_to_f32(sbs[(r * nb + b) % 6]);
            uint8_t code = (c % 16 == 0) ? ((r + b) % 2 ? 7 : 15) : (uint8_t)(rnd() & 15);
            w[r * C + c] = qt_e2m1_to_f32(code) * sb * s2;
        }
    CHECK(qt_quantize_nvfp4(w, R, C, &q) == 0);
    CHECK(q.scale2 == s2);
    bad = 0;
    for (int r = 0; r < R; r++) {
        qt_dequant_row(&q, r, row);
        for (int c = 0; c < C; c++) bad += row[c] != w[r * C + c];
        for (int b = 0; b < nb; b++) bad += ((const uint8_t *)q.scale)[r * nb + b] != sbs[(r * nb + b) % 6];
    }
    CHECK(bad == 0);
    qt_free(&q);

    /* all zeros: codes 0, dequantises to 0, no NaN */
    memset(w, 0, sizeof(w));
    CHECK(qt_quantize_nvfp4(w, R, C, &q) == 0);
    qt_dequant_row(&q, R - 1, row);
    for (int c = 0; c < C; c++) CHECK(row[c] == 0.0f);
    qt_free(&q);
    CHECK(qt_quantize_nvfp4(w, 0, C, &q) == -1);
}

/* qt_fp8_block_exp is the smallest power of two at or above max(amax, 1e-4) / 448 (the fp32 quotient); every value
 * qt_fp8_round_blocks keeps is an E4M3 value times its block's scale, the nearest one to x / scale (ties to even), and
 * rounding again changes nothing. */
static void test_fp8_blocks(void)
{
    const float amaxes[] = {0.0f, 1e-6f, 1e-4f, 0.5f, 1.0f, 448.0f, 896.0f, 3.7f, 1000.0f, 0.013f};
    for (size_t i = 0; i < sizeof amaxes / sizeof *amaxes; i++) {
        const float a = amaxes[i], x = (a > 1e-4f ? a : 1e-4f) / 448.0f;
        const int e = qt_fp8_block_exp(a) - 127;
        CHECK(ldexp(1.0, e) >= x && ldexp(1.0, e - 1) < x);
    }
    CHECK(qt_fp8_block_exp(448.0f) == 127 && qt_fp8_block_exp(449.0f) == 128 && qt_fp8_block_exp(224.0f) == 126);
    uint64_t r = 0x243F6A8885A308D3ull;
    float x[256], y[256];
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 256; i++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            const double u = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
            x[i] = (float)(u * ldexp(1.0, trial % 40 - 20) * (i % 7 ? 1.0 : 1e-3));   /* small values inside a block */
        }
        memcpy(y, x, sizeof x);
        qt_fp8_round_blocks(y, 256, 64);
        for (int b = 0; b < 4; b++) {
            float amax = 0.0f;
            for (int i = 64 * b; i < 64 * b + 64; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            const int e = qt_fp8_block_exp(amax) - 127;
            for (int i = 64 * b; i < 64 * b + 64; i++) {
                const float v = ldexpf(x[i], -e), q = ldexpf(y[i], -e);
                CHECK(fabsf(v) <= 448.0f);
                CHECK(qt_e4m3_to_f32(qt_f32_to_e4m3(q)) == q);   /* an E4M3 value */
                CHECK(qt_f32_to_e4m3(v) == qt_f32_to_e4m3(q));   /* the one x / scale rounds to */
            }
        }
        float z[256];
        memcpy(z, y, sizeof y);
        qt_fp8_round_blocks(z, 256, 64);
        CHECK(!memcmp(y, z, sizeof y));
    }
}

int main(void)
{
    test_scalars();
    test_fp8_blocks();
    test_plain();
    test_fp8(0);
    test_fp8(1);
    test_fp4(QT_MXFP4, 3, 72);
    test_fp4(QT_MXFP4, 5, 45);
    test_fp4(QT_MXFP4, 2, 32);
    test_fp4(QT_NVFP4, 3, 40);
    test_fp4(QT_NVFP4, 4, 45);
    test_fp4(QT_NVFP4, 2, 16);
    test_nvfp4_gold();
    test_nvfp4_roundtrip();
    CHECK_DONE();
}
