/* backend.h — what the scheduler calls to run the model (in the spirit of ggml's backend vtable).
 *
 * One call = one step for a batch of sequences. Each sequence brings a span of new tokens that
 * continue its state (positions st->pos .. st->pos+n-1; the scheduler has already reserved pages
 * for them with v4_seq_reserve) and asks for next-token logits of its last `n - logits_from`
 * tokens. The backend advances st->pos by n. A sequence's result must not depend on which other
 * sequences share the batch, nor on how its tokens were split into spans.
 *
 * Backends:
 *   cpu   float32 reference (engine/cpu/), exact V4_SPEC semantics without the official-only
 *         fake-quant steps; the oracle for everything else.
 *   cuda  every op on the GPU with the state in device memory (engine/cuda/, built with
 *         SLUICE_CUDA). The engine calls sl_backend_cuda_create() only when
 *         SLUICE_HAVE_CUDA_BACKEND is defined; otherwise opening backend "cuda" fails with a clear
 *         error. It registers its own state storage with the pool (state.h, v4_state_store).
 */
#ifndef SLUICE_BACKEND_H
#define SLUICE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "shard.h"
#include "state.h"
#include "weights.h"

typedef struct {
    const int32_t *tokens;   /* n new token ids */
    int n;
    v4_seq_state *st;        /* continues at st->pos; advanced by n */
    int logits_from;         /* logits for tokens i in [logits_from, n); n = none */
    float *logits;           /* out: (n - logits_from) rows of vocab_size floats */
    /* Sampling on the device (backends whose ops->samples is set; NULL otherwise): with logits_from == n - 1 the
     * backend chooses the next token from the last row by sampler.h's rules into token / logprob and returns no
     * logits. hist: the request's tokens so far (for the repetition penalty); rng: its RNG state before the draw
     * (the caller advances its own copy as sl_sample would). */
    const sl_sampling *sample;
    const int32_t *hist;
    int n_hist;
    uint64_t rng;
    int32_t token;           /* out */
    float logprob;           /* out */
    /* launch only: 1 = the span's one token is the one the backend sampled for this sequence in the step launched just
     * before this one, which is still outstanding (launched, not collected; tokens is not read) */
    int fed;
} sl_seq_span;

typedef struct sl_backend sl_backend;

typedef struct {
    const char *name;
    /* Run one step. 0, or -1 with one line in err (the scheduler then fails every request). */
    int (*forward)(sl_backend *b, sl_seq_span *spans, int n_spans, char *err, size_t errlen);
    void (*destroy)(sl_backend *b);
    int samples;             /* 1: forward honours sl_seq_span.sample */
    /* Device memory in use and in all (for metrics); NULL where the backend has no device. */
    void (*memory)(sl_backend *b, size_t *used, size_t *total);
    /* Pipelined decode (both NULL where not offered): the host plans step N+1 while step N runs.
     * launch enqueues a step whose spans are one token each, sampled by the backend (sample set, logits_from 0), and
     * may return before the step ends; st->pos advances at once. 0; 1 when the backend does not take this step
     * (nothing was done: run it with forward); -1 with err. The spans must stay untouched until collected.
     * collect waits for the oldest launched step and fills its spans' token and logprob: 0, or -1 with err (the
     * scheduler then fails every request, and no launched step is outstanding any more).
     * At most two launched steps are outstanding (launch N+1, then collect N); forward is called only with none. */
    int (*launch)(sl_backend *b, sl_seq_span *spans, int n_spans, char *err, size_t errlen);
    int (*collect)(sl_backend *b, char *err, size_t errlen);
} sl_backend_ops;

struct sl_backend {
    const sl_backend_ops *ops;
    const v4_weights *w;     /* not owned */
    v4_state_pool *pool;     /* not owned */
    void *impl;
    int sublayers;           /* 0: the whole model; n > 0: forward stops after n sublayers (attention of layer 0,
                                its MoE, attention of layer 1, ...) and applies the head: a prefix of the model,
                                for the engine's self-check */
};

/* CPU reference backend; n_threads 0 = online cores. NULL with err on failure. */
sl_backend *sl_backend_cpu_create(const v4_weights *w, v4_state_pool *pool, int n_threads,
                                  char *err, size_t errlen);

/* Tests: the CPU reference with the cuda backend's storage numerics: what that backend keeps or feeds to a
 * projection in bf16 (activations into the projections, q, KV, compressed entries and indexer keys, the attention
 * output, non-FP8 dense weights) is rounded to bf16 here too, the rest stays fp32; so a comparison of the two
 * measures the kernels, not bf16 storage. Off by default. */
void sl_backend_cpu_set_gpu_numerics(sl_backend *b, int on);
/* The indexer's keys kept as FP8 blocks (engine.h's index_fp8; the values the cuda backend's FP8 keys hold): 0, or
 * -1 when the model's index_head_dim is not a multiple of 64. */
int sl_backend_cpu_set_index_fp8(sl_backend *b, int on);
/* The attention's keys (window rows and compressed entries) kept as FP8 KV (engine.h's kv_fp8): their dims before the
 * rotated ones rounded to E4M3 with a power-of-two scale per 64, the values the cuda backend's FP8 KV rows hold; 0,
 * or -1 when head_dim - rope_dim is not a positive multiple of 64. */
int sl_backend_cpu_set_kv_fp8(sl_backend *b, int on);
/* Tests: until called again with NULL, for each row i < cap of the following steps (rows in step order) keep in
 * gap[i] (set to 1 here) the smallest relative gap of the top-k decisions made for it in any layer: the router's
 * (last expert taken against the first left out, by score + bias) and the indexer's (worst entry taken against the
 * best left out). A small gap is a near tie that another backend's rounding may decide the other way. */
void sl_backend_cpu_log_decisions(sl_backend *b, float *gap, int cap);
/* CUDA backend (engine/cuda/, only when SLUICE_HAVE_CUDA_BACKEND). */
typedef struct {
    double gpu_memory_fraction;   /* how much of each GPU's memory weights, buffers and state may take (0 = 0.9); the
                                     pool's budget shrinks to the state that fits */
    int n_devices;                /* 0: every visible GPU (at most SL_MAX_RANKS) */
    int devices[SL_MAX_RANKS];    /* one rank per entry (engine/shard.h: the model split across them); one GPU
                                     repeated runs every rank on it, in turn on one stream (tests of the split) */
    int index_fp8;                /* the indexer's keys stored FP8 (engine.h's index_fp8) */
    int kv_fp8;                   /* the attention's keys stored as FP8 KV rows (engine.h's kv_fp8) */
} sl_cuda_opts;
/* o NULL: the defaults. With several ranks one step runs on all of them, an all-reduce after each sublayer; a GPU that
 * stops answering fails the step within seconds, with one line naming it. */
sl_backend *sl_backend_cuda_create(const v4_weights *w, v4_state_pool *pool, const sl_cuda_opts *o, char *err,
                                   size_t errlen);
/* The ranks the model is split across (1: not split), and in *gpus (if not NULL) the distinct GPUs they run on. */
int sl_backend_cuda_ranks(sl_backend *b, int *gpus);
/* Batch invariance where the fast kernels would break it: the MoE's tiling and the attention's key splits depend on
 * the batch. On: every token's MoE runs alone, as in a batch of one, and the attention keeps its fixed 64-key splits,
 * so a request's tokens do not depend on its neighbours (engine.deterministic; slower at large batches). The other
 * kernels are batch-invariant as they are. */
void sl_backend_cuda_set_deterministic(sl_backend *b, int on);
/* Benchmarks: the kernel families of a decode step. With fam_ms non-NULL, each following decode step that would
 * replay a CUDA graph is captured afresh with a GPU timestamp after every launch and replayed once; fam_ms[f] gets
 * family f's share of that step in ms (the launch gaps inside it included, the timestamps' own cost not). NULL: off.
 * 0, or -1 when the timestamps cannot be allocated. */
enum {
    SL_FAM_MHC, SL_FAM_DENSE, SL_FAM_COMPRESS, SL_FAM_INDEXER, SL_FAM_ATTENTION, SL_FAM_MOE, SL_FAM_HEAD,
    SL_FAM_COLLECTIVE,   /* the all-reduces between ranks (rank 0's wait and sum) */
    SL_FAM_N
};
extern const char *const sl_cuda_family_names[SL_FAM_N];
int sl_backend_cuda_profile(sl_backend *b, double *fam_ms);
/* The launches of the last profiled step in order: what[k] names launch k (static strings), us[k] its time in µs
 * (as fam_ms counts it); at most cap. Returns the count. */
int sl_backend_cuda_profile_launches(sl_backend *b, const char **what, double *us, int cap);
/* Benchmarks: one CSA layer's attention path alone (the first CSA layer, *layer): the indexer's scores and top-k,
 * then the sparse attention over the window and the selected entries, re-run on the last step's rows, queries and
 * state, `iters` launches back to back, five times; *ms: the median time of one. 0, or -1 with err (no CSA layer, no
 * step yet). */
int sl_backend_cuda_attention_ms(sl_backend *b, int iters, int *layer, double *ms, char *err, size_t errlen);
/* Benchmarks: the routed experts chosen for the last step's tokens at its last MoE layer, topk per token in row
 * order, into experts[tokens * topk] (tokens: the last step's token count). 0, or -1 (the last layer runs the
 * generic MoE, deterministic mode (one token at a time), a copy failed). */
int sl_backend_cuda_last_routing(sl_backend *b, int tokens, int32_t *experts);
/* Benchmarks: make a cuda sequence look as if `pos` tokens had been fed: its window, compressed entries
 * and indexer keys random (bf16 in +-1, what RMSNorm'd rows look like), its compressors' open windows
 * empty; pages must be reserved for pos tokens. 0 or -1 with err. */
int sl_backend_cuda_fill_state(sl_backend *b, v4_seq_state *st, int pos, uint64_t seed, char *err, size_t errlen);

#endif
