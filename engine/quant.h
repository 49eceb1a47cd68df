/* quant.h — weight formats and their dequantisation (the CPU reference's view of every format).
 *
 * A qtensor is a 2-D weight [rows, cols] in one of the formats a V4 checkpoint stores:
 *   QT_F32 / QT_BF16 / QT_F16      plain
 *   QT_FP8_B128   F8_E4M3 data, F8_E8M0 (or F32) scale per 128x128 block (DeepSeek dense Linear)
 *   QT_MXFP4      I8 packed [rows, cols/2] (low nibble = even element), E8M0 scale per 32 inputs
 *   QT_NVFP4      U8 packed [rows, cols/2], E4M3 scale per 16 inputs, F32 global scale_2
 * Dimensions that are not a multiple of the block give a partial last block. Packed FP4 rows take
 * ceil(cols/2) bytes (an odd last element sits in a low nibble).
 * Data is not owned (points into the safetensors mmap) unless `owned` is set.
 */
#ifndef SLUICE_QUANT_H
#define SLUICE_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { QT_F32 = 0, QT_BF16, QT_F16, QT_FP8_B128, QT_MXFP4, QT_NVFP4 } qt_format;

typedef struct {
    qt_format fmt;
    int rows, cols;
    const void *data;
    const void *scale;        /* FP8_B128: E8M0 [ceil(rows/128), ceil(cols/128)] (scale_f32 if F32);
                                 MXFP4: E8M0 [rows, ceil(cols/32)]; NVFP4: E4M3 [rows, ceil(cols/16)] */
    int scale_is_f32;         /* FP8_B128 only: some checkpoints store block scales as F32 */
    float scale2;             /* NVFP4 weight_scale_2 (1 otherwise) */
    float input_scale;        /* NVFP4 input_scale if present (0 otherwise); unused by the CPU path */
    void *owned;              /* non-NULL: buffer(s) to free with qt_free */
    void *owned_scale;
    uint64_t synth_seed;      /* nonzero: a synthetic FP4 matrix not materialised on the host (data NULL); a
                                 device loader draws its codes from this seed (synthetic.h) */
    int synth_scale;          /* ... and its scale codes: synth_scale + 0..1 (E8M0) or + 0..7 (E4M3) */
} qtensor;

/* Scalar decoders. */
float qt_bf16_to_f32(uint16_t v);
uint16_t qt_f32_to_bf16(float f);          /* round to nearest even */
float qt_f16_to_f32(uint16_t v);
float qt_e4m3_to_f32(uint8_t v);           /* 0x7F/0xFF = NaN, no infinities */
float qt_e8m0_to_f32(uint8_t v);           /* 2^(v-127); 0xFF = NaN */
float qt_e2m1_to_f32(uint8_t nibble);      /* {0,.5,1,1.5,2,3,4,6}, bit 3 = sign */
uint8_t qt_f32_to_e4m3(float f);           /* round to nearest even, saturate to ±448 */
uint8_t qt_f32_to_e2m1(float f);           /* round to nearest (ties to even code), saturate ±6 */
/* FP8 blocks as DeepSeek stores activations (V4_SPEC 5; kernels/v4_ops.h "FP8 rows"): a block's scale is 2^(e-127)
 * with e the smallest integer such that 2^(e-127) >= max(amax, 1e-4) / 448 (the quotient in fp32); its codes are
 * E4M3 of x * 2^(127-e). qt_fp8_block_exp: e (the E8M0 byte, at most 254) for a block's largest magnitude. */
uint8_t qt_fp8_block_exp(float amax);
/* x[0..n) in place, blocks of `block` values: quantised to E4M3 under each block's scale and decoded again (the
 * values an FP8 store keeps). n a multiple of block. */
void qt_fp8_round_blocks(float *x, int n, int block);

/* Dequantise row r into out[cols]. */
void qt_dequant_row(const qtensor *q, int r, float *out);
/* y[r] = sum_c W[r][c] x[c] for r in [r0, r1). Row-wise dequant into `tmp` (cols floats) then dot. */
void qt_matvec_rows(const qtensor *q, const float *x, float *y, int r0, int r1, float *tmp);
/* out = the window rows [r0, r0+nr) x cols [c0, c0+nc) of q, in q's format, owned (free with qt_free); the window's
 * edges must be block edges of the format (FP8_B128: 128 both ways; MXFP4: 32 columns; NVFP4: 16 columns) or the
 * tensor's own. A tensor-parallel shard of a weight. 0, or -1 (a window off the blocks or the tensor, a synthetic
 * tensor with no host bytes, out of memory). */
int qt_slice(const qtensor *q, int r0, int nr, int c0, int nc, qtensor *out);
/* out [nr][nc] = the window rows [r0, r0+nr) x cols [c0, c0+nc) of q dequantised, any window. 0, or -1 (out of
 * memory for a row). */
int qt_dequant_window(const qtensor *q, int r0, int nr, int c0, int nc, float *out);
size_t qt_nbytes(const qtensor *q);        /* bytes the weights + scales occupy */
void qt_free(qtensor *q);

/* NVFP4 quantiser following NVIDIA ModelOpt's rounding:
 *   scale_2 = amax(W) / (6 * 448); per 16-block: s = e4m3(amax_block / 6 / scale_2);
 *   q = e2m1(w / (s * scale_2)) (round to nearest, saturate).
 * Fills an owned QT_NVFP4 qtensor from a float matrix. */
int qt_quantize_nvfp4(const float *w, int rows, int cols, qtensor *out);
/* Same with a given weight_scale_2 (e.g. one shared by w1 and w3, as vLLM/TRT-LLM expect). */
int qt_quantize_nvfp4_s2(const float *w, int rows, int cols, float scale2, qtensor *out);
/* ModelOpt's weight_scale_2 for a tensor with this amax: amax / (6 * 448) (1 if that is 0). */
float qt_nvfp4_scale2(float amax);

#endif
