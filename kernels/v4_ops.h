/* v4_ops.h — launchers for the DeepSeek-V4 layer's kernels other than the dense projections
 * (dense_gemm.h) and the MoE fast path (moe_kernels.h), callable from C. V4_SPEC.md is the
 * contract; engine/cpu/ is the reference each kernel is tested against (tests/gpu/test_v4_ops.c).
 *
 * Families (one file each in kernels/sm90/):
 *   v4_mhc.cu        embedding, mHC pre (the previous sublayer's mHC post, split mixes, Sinkhorn, the collapse)
 *                    fused with the sublayer's RMSNorm, the head's mHC collapse, RMSNorm + RoPE on rows,
 *                    the profile's timestamps
 *   v4_compress.cu   the CSA/HCA compressors with an online per-dim softmax (O(d) state per window)
 *   v4_attention.cu  the lightning indexer's scores, top-k selection, sparse attention with sinks
 *                    over window + compressed entries, the sliding-window ring store
 *   v4_sample.cu     next-token selection (engine/sampler.h's rules) on the logits rows
 *   v4_moe_ref.cu    a generic MoE (router + experts, fp32 weights) for shapes the MoE fast path
 *                    does not take (tiny test models)
 *   v4_synth.cu      random weight bytes for synthetic models, drawn on the GPU at load
 *   v4_allreduce.cu  the all-reduce across the ranks of a model split over GPUs (engine/shard.h)
 *
 * Every launcher only enqueues on `st` (no allocation, no host sync) and returns the launch's
 * cudaError_t. Activations: fp32 unless named bf16 (uint16_t storage). Pointers are device pointers.
 *
 * Per-sequence state the kernels read and write lives in two arenas owned by the backend:
 *   slots: one fixed part per sequence (slot_bytes each): per layer the sliding ring, [window] key rows
 *          ("KV rows" below; slot p mod window), and per compressor its online-softmax state,
 *          fp32 [groups][3][d] (m, s, a = running max, Σe, Σe·C; s == 0 means empty): 1 group for
 *          HCA, 3 for CSA (the previous window's "a" halves, the open window's "a" and "b" halves).
 *   pages: block_tokens positions of compressed entries for every layer (page_bytes each): entry w
 *          of a layer with ratio r sits in page blocks[w*r / block_tokens] at the layer's offset,
 *          row (w*r mod block_tokens) / r, bf16 [d]; the main compressor's entries as key rows ("KV rows"); the
 *          indexer's keys, when they are stored FP8, in FP8 rows.
 *   FP8 rows: a region of `rows` rows of d values (d a multiple of 64) keeps every row's d E4M3 codes (row-major),
 *          then every row's d/64 scale exponents (E8M0: block b of the row is codes * 2^(e_b - 127)), each row's
 *          exponents padded to V4_FP8_SCALE_STRIDE(d) bytes. A block's exponent is the smallest e with
 *          2^(e-127) >= max(amax, 1e-4) / 448 (DeepSeek's per-64 power-of-two scale, V4_SPEC 5).
 *   KV rows: the attention's keys (the ring, the main compressor's entries, the step's own rows) are bf16 [hd], or with
 *          FP8 KV (engine.kv_dtype=fp8) v4_kv_row_bytes each, one row on its own: the first nope = hd - 2 rope_half
 *          values (a multiple of 64) as E4M3 codes, then the rotated dims as bf16, then the nope/64 exponents (the
 *          FP8 rows' block rule) padded to 16 bytes. DeepSeek rounds kv[0:448] so (V4_SPEC 2.4, 5) and keeps the
 *          rotated dims in bf16.
 */
#ifndef SLUICE_V4_OPS_H
#define SLUICE_V4_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One step's token layout (device arrays, uploaded once per step). Tokens of a span are
 * consecutive rows in position order; spans are sequences. */
typedef struct {
    int n;                      /* token rows */
    int n_spans;
    const int32_t *tok_id;      /* [n] token ids */
    const int32_t *tok_pos;     /* [n] absolute positions */
    const int32_t *tok_span;    /* [n] span of each row */
    const int32_t *span_slot;   /* [n_spans] fixed-part slot */
    const int32_t *span_pos0;   /* [n_spans] position of the span's first row */
    const int32_t *span_row0;   /* [n_spans] its first row */
    const int32_t *span_n;      /* [n_spans] its rows */
    const int32_t *blocks;      /* [n_spans][max_blocks] page ids */
    int max_blocks;
} v4_step;

#define V4_FP8_SCALE_STRIDE(d) ((((d) / 64) + 3) & ~3)
/* Bytes of a region of `rows` FP8 rows of d values. */
static inline size_t v4_fp8_rows_bytes(int rows, int d) { return (size_t)rows * (d + V4_FP8_SCALE_STRIDE(d)); }

#ifdef __CUDACC__
#define V4_HOST_DEVICE __host__ __device__
#else
#define V4_HOST_DEVICE
#endif
/* FP8 KV rows (above): whether hd and rope_half allow them, and a row's bytes (16-byte aligned). */
static inline V4_HOST_DEVICE int v4_kv8_ok(int hd, int rope_half)
{
    const int nope = hd - 2 * rope_half;
    return nope > 0 && nope % 64 == 0 && nope <= 1024 && rope_half % 4 == 0;
}
#define V4_KV8_EXP_BYTES(nope) ((((nope) / 64) + 15) & ~15)
/* Bytes of one key row: hd bf16, or an FP8 KV row. */
static inline V4_HOST_DEVICE size_t v4_kv_row_bytes(int hd, int rope_half, int kv8)
{
    const int nope = hd - 2 * rope_half;
    return kv8 ? (size_t)nope + 4 * (size_t)rope_half + V4_KV8_EXP_BYTES(nope) : (size_t)hd * 2;
}

typedef struct {
    uint8_t *slots;
    size_t slot_bytes;
    uint8_t *pages;
    size_t page_bytes;
    int block_tokens;
} v4_arena;

/* ---- v4_mhc.cu */
/* X[i][j][:] = E[tok_id[i]] for every stream j < hc; E fp32 or bf16 [vocab][dim]. A negative id -1 - k is fed[k] (a
 * token sampled on the device by the step before), and the kernel writes the id it resolved into tok_id[i] for the
 * kernels after it; fed may be NULL when no id is negative. */
cudaError_t v4_embed(const v4_step *s, const void *E, int e_bf16, int dim, int hc, const int32_t *fed, float *X,
                     cudaStream_t st);
/* mHC pre for every row: with pend_f, first the previous sublayer's mHC post, in place (X'[k] = pend_post_k pend_f +
 * sum_j pend_comb[j][k] X[j], all indexed by token row); then mixes = (fn @ X_i) * rsqrt(mean(X_i^2)+norm_eps),
 * pre/post/comb (Sinkhorn), x = sum_j pre_j X_i[j], and xn = RMSNorm_w(x) written as bf16 [n][dim]; post [n][hc],
 * comb [n][hc][hc] fp32. head != 0: the head's collapse (fn [hc][hc*dim], pre only; post/comb unused) over the rows
 * listed in `rows` (nr of them; NULL = 0..nr-1), xn row r for rows[r]. hc <= 8, dim even. scratch:
 * v4_hc_pre_scratch_floats(nr, dim, hc) floats. */
cudaError_t v4_hc_pre(float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn, const float *scale,
                      const float *base, int sinkhorn_iters, float hc_eps, float norm_eps, const float *norm_w,
                      int head, const float *pend_f, const float *pend_post, const float *pend_comb, uint16_t *xn,
                      float *post, float *comb, float *scratch, cudaStream_t st);
size_t v4_hc_pre_scratch_floats(int nr, int dim, int hc);
/* v4_hc_pre's three launches, for a caller that runs the third beside the sublayer (only the next sublayer's post
 * reads post and comb): v4_hc_mix (the pending post, the mixes' chunk sums into scratch), v4_hc_collapse (pre, the
 * collapse, the norm into xn), v4_hc_comb (post and comb; not for the head). The last two read scratch as the first
 * left it; v4_hc_pre is v4_hc_mix, v4_hc_comb, v4_hc_collapse on one stream. */
cudaError_t v4_hc_mix(float *X, int nr, const int32_t *rows, int dim, int hc, const float *fn, int head,
                      const float *pend_f, const float *pend_post, const float *pend_comb, float *scratch,
                      cudaStream_t st);
cudaError_t v4_hc_collapse(const float *X, int nr, const int32_t *rows, int dim, int hc, const float *scale,
                           const float *base, float hc_eps, float norm_eps, const float *norm_w, int head,
                           const float *scratch, uint16_t *xn, cudaStream_t st);
cudaError_t v4_hc_comb(int nr, int dim, int hc, const float *scale, const float *base, int sinkhorn_iters,
                       float hc_eps, float norm_eps, const float *scratch, float *post, float *comb, cudaStream_t st);
/* One RMSNorm + RoPE job: for r < rows: out[r] (bf16, row stride ld_out) = RoPE(norm(in[r])), in row stride
 * ld_in, d floats a row (even); norm: 0 none, 1 RMSNorm (weight w, NULL = unweighted); rope_half > 0: interleaved
 * pairs on the last 2*rope_half dims at the position of token r / rows_per_tok (s->tok_pos), angles
 * pos*inv_freq[i] in double. ld_tok > 0: a token's rows_per_tok rows start ld_tok floats after the previous token's
 * (row r at in + (r / rows_per_tok) * ld_tok + (r % rows_per_tok) * ld_in: heads inside a wider projection's row).
 * out_kv8: the rows written there instead, as FP8 KV rows (v4_kv_row_bytes(d, rope_half, 1) apart; v4_kv8_ok), the
 * codes rounded from the fp32 values. */
typedef struct {
    const float *in;
    int ld_in, rows, rows_per_tok, d, norm;
    const float *w;
    int rope_half;
    const double *inv_freq;
    uint16_t *out;
    int ld_out;
    int ld_tok;
    uint8_t *out_kv8;
} v4_norm_job;
#define V4_NORM_JOBS 4
/* Up to V4_NORM_JOBS jobs in one launch (eps shared). */
cudaError_t v4_norm_rope(const v4_step *s, const v4_norm_job *jobs, int n_jobs, float eps, cudaStream_t st);
/* *dst = the GPU's nanosecond clock (%globaltimer) when the stream runs this one-thread launch (step profiles). */
cudaError_t v4_stamp(uint64_t *dst, cudaStream_t st);

/* ---- v4_compress.cu */
/* How v4_compress stores an entry: bf16 [d]; an FP8 row of the page's region (d a multiple of 64: the indexer's FP8
 * keys); an FP8 KV row (v4_kv8_ok(d, rope_half): the main compressor's entries with FP8 KV). */
enum { V4_ENTRY_BF16 = 0, V4_ENTRY_FP8_ROWS = 1, V4_ENTRY_KV8 = 2 };
/* Push every row's compressor inputs (C, Z without ape, fp32 rows of coff*d at row stride ld; coff 2 for ratio 4) into
 * its sequence's window state (slot offset state_off); when (t+1) mod ratio == 0 the pooled entry
 * e = norm_w * rms(e) with RoPE (last 2*rope_half dims, position w*ratio) is written to its page (layer offset
 * page_off) in the form `entry` names (V4_ENTRY_*), FP8 codes rounded from the fp32 values. Rows of one span are
 * folded in position order. d <= 1024. */
cudaError_t v4_compress(const v4_step *s, const v4_arena *a, size_t state_off, size_t page_off, int ratio,
                        int d, const float *C, const float *Z, int ld, const float *ape, const float *norm_w,
                        float eps, int rope_half, const double *inv_freq, int entry, cudaStream_t st);

/* ---- v4_attention.cu */
/* Lightning indexer + top-k for rows r0..r0+nr-1 (a CSA layer): for row i at position t the
 * candidates are entries e < (t+1)/4 (index keys at page_off: bf16 [dI], or FP8 rows with key_fp8); k = min(topk, (t+1)/4) of
 * them are chosen by score(e) = sum_h w_h ReLU(q_h . K_e), w_h = wI[i * ld_w + h] * w_scale, higher first,
 * equal scores -> lower index; sel[i][0..k) (any order), the rest -1. q: bf16 [n][nI][dI] roped.
 * scores: scratch fp32 [nr][max_entries], max_entries >= the largest candidate count of these rows; q NULL: the
 * scores are given there (the top-k alone). The 64 x 128 scores run in blocks of v4_indexer_tiles_per_block tiles of
 * 128 candidates. */
/* The indexer's plan: tiles of 128 candidates a scoring block takes (its queries loaded once, the next tile's keys
 * loading while one is scored), for `rows` rows of `tiles` tiles on n_sms multiprocessors: enough blocks for two a
 * multiprocessor come first, then up to 4 tiles a block. */
int v4_indexer_tiles_per_block(int rows, int tiles, int n_sms);
cudaError_t v4_indexer(const v4_step *s, const v4_arena *a, size_t page_off, int key_fp8, int r0, int nr,
                       const uint16_t *q, int nI, int dI, const float *wI, int ld_w, float w_scale, int topk,
                       int32_t *sel, float *scores, int max_entries, cudaStream_t st);
/* Sparse attention for every row i (position t, span s): keys = the window (positions
 * max(0,t-W+1)..t: this step's rows from kv where the position is in the step, else the
 * ring at ring_off) + compressed entries at page_off: ratio 4: the rows of sel[i] (topk per row,
 * -1 = none); other ratio r > 0: every entry w < (t+1)/r; 0: none. Every key row, kv's [n] included, is bf16 [hd], or
 * with kv8 an FP8 KV row ("KV rows" above; the tensor cores take them at V4's rope_half 32 on sm_90a, the CUDA cores
 * otherwise). K = V; scores (q_h . k) * scale,
 * sink[h] in the denominator, fp32 softmax. q bf16 [n][H][hd]; o bf16 [n][H][hd]: the output de-rotated (RoPE
 * by -pos on the last 2 rope_half dims, angles pos * inv_freq[i] in double; rope_half 0: none). max_keys >= W + the
 * largest compressed count of the step. hd 512 and H <= 64 (V4's shape) run on the tensor cores, with the
 * probabilities rounded to bf16, in splits of split_keys keys (a multiple of 64; 0: 64, the fixed splits that keep a
 * row's arithmetic independent of the batch) merged through `scratch` (scratch_floats of it,
 * v4_attention_scratch_floats for the rows of one launch; fewer rows a launch when smaller); other shapes on the
 * CUDA cores (fp32), no scratch, split_keys unused. */
cudaError_t v4_attention(const v4_step *s, const v4_arena *a, size_t ring_off, int W, size_t page_off, int ratio,
                         const int32_t *sel, int topk, const uint16_t *q, const void *kv, int kv8, int H, int hd,
                         float scale, const float *sink, int max_keys, float *scratch, size_t scratch_floats,
                         int rope_half, const double *inv_freq, int split_keys, uint16_t *o, cudaStream_t st);
/* The split length for `rows` rows of up to max_keys keys on n_sms multiprocessors: one wave of blocks, splits no
 * shorter than 64 keys (each split beyond the first costs a scratch unit twice its keys' bytes, written and read). */
int v4_attention_split(int rows, int max_keys, int n_sms);
/* Scratch v4_attention needs to run `rows` rows in one launch with up to max_keys keys each (0: none). */
size_t v4_attention_scratch_floats(int H, int hd, int rows, int max_keys);
/* Store the last min(n, W) rows of every span's kv (key rows of row_bytes, a multiple of 4) into its ring (after the
 * attention read it). */
cudaError_t v4_ring_store(const v4_step *s, const v4_arena *a, size_t ring_off, int W, const void *kv,
                          size_t row_bytes, cudaStream_t st);

/* ---- v4_sample.cu */
typedef struct {
    int row;                    /* its logits row */
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
    uint64_t rng;               /* the request's splitmix64 state before this draw (engine/sampler.h) */
    int hist_off, n_hist;       /* its tokens so far at hist[hist_off..] (read only when the penalty is not 1) */
} v4_sample_req;
/* For r < m: the next token of request req[r] from logits row req[r].row (fp32 [.][V], may be rewritten: penalty and
 * temperature applied) by engine/sampler.h's rules: token[r], and logprob[r] = log-softmax of the processed logits
 * at it. probs: scratch [m][V] fp32; marks: scratch [m][(V+31)/32]. The caller advances its
 * own RNG copy once per non-greedy draw, as sl_sample does. */
cudaError_t v4_sample(float *logits, int m, int V, const v4_sample_req *req, const int32_t *hist, float *probs,
                      uint32_t *marks, int32_t *token, float *logprob, cudaStream_t st);

/* ---- v4_moe_ref.cu */
typedef struct {
    int dim, inter, shared_inter, n_experts, topk;
    int score_func;             /* 0 sqrtsoftplus, 1 softmax, 2 sigmoid */
    float route_scale, swiglu_limit;
    const float *gate;          /* [E][dim] */
    const float *bias;          /* [E] or NULL */
    const int32_t *tid2eid;     /* [vocab][topk] or NULL (hash routing) */
    const float *w1, *w3;       /* [E][inter][dim] */
    const float *w2;            /* [E][dim][inter] */
    const float *s1, *s3, *s2;  /* shared expert [si][dim], [si][dim], [dim][si]; NULL = none */
} v4_moe_ref_w;
/* f[i] = shared(x_i) + sum of the routed experts (V4_SPEC 2.7), x bf16 [n][dim], f fp32 [n][dim];
 * experts are added in increasing expert order (as the CPU reference). */
cudaError_t v4_moe_ref(const v4_step *s, const v4_moe_ref_w *w, const uint16_t *x, float *f, cudaStream_t st);

/* ---- v4_allreduce.cu: the ranks' partial sums of a sublayer's output made whole (engine/shard.h); every rank adds
 * them in rank order, so all ranks get the same bits. */
#define V4_AR_MAX_RANKS 8
#define V4_AR_BLOCKS 32         /* blocks of a peer all-reduce launch; each meets its peers through its own flags */
/* Ranks sharing one GPU and one stream: buf[r][i] = the sum over ranks of buf[.][i], every rank's buffer, in place. */
typedef struct {
    int n;
    float *buf[V4_AR_MAX_RANKS];
} v4_ar_local;
cudaError_t v4_allreduce_local(const v4_ar_local *a, size_t count, cudaStream_t st);
/* Ranks on distinct GPUs with peer access, one launch per rank on its own stream (every rank launches the same
 * sequence): out[i] = the sum over ranks of in[r][i] (peer pointers), after every rank's launch has started. in[me]
 * must not be written again until this rank's next launch has run (alternate two input buffers). inbox[r]: rank r's
 * flags, V4_AR_BLOCKS x V4_AR_MAX_RANKS words, zeroed with this rank's epoch[V4_AR_BLOCKS] before the first launch
 * (and after a fault). A wait past timeout_ns writes 1 + the missing rank to *fault (host-mapped memory) and goes on. */
typedef struct {
    int n, me;
    const float *in[V4_AR_MAX_RANKS];
    unsigned *inbox[V4_AR_MAX_RANKS];
    unsigned *epoch;
    unsigned *fault;
    unsigned long long timeout_ns;
} v4_ar_peer;
cudaError_t v4_allreduce_peer(const v4_ar_peer *a, size_t count, float *out, cudaStream_t st);

/* ---- v4_synth.cu */
/* dst[i] = lo + h(seed, i) mod span (span >= 256: the raw hash byte): a synthetic model's weight bytes. */
cudaError_t v4_fill_random(uint8_t *dst, size_t n, uint64_t seed, int lo, int span, cudaStream_t st);
/* dst[i] = bf16 uniform in (-scale, scale) from h(seed, i). */
cudaError_t v4_fill_bf16(uint16_t *dst, size_t n, uint64_t seed, float scale, cudaStream_t st);
/* A region of `rows` FP8 rows of d values (d a multiple of 64) uniform in (-scale, scale) from h(seed, i). */
cudaError_t v4_fill_fp8_rows(uint8_t *region, int rows, int d, uint64_t seed, float scale, cudaStream_t st);
/* `rows` consecutive FP8 KV rows of hd values (v4_kv8_ok) uniform in (-scale, scale) from h(seed, i). */
cudaError_t v4_fill_kv8_rows(uint8_t *dst, int rows, int hd, int rope_half, uint64_t seed, float scale, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
