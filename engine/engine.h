/* engine.h — the one public surface of the inference engine.
 *
 * Open a model directory, submit requests (token ids + sampling settings), call sl_engine_step()
 * repeatedly, and drain events (tokens, logits rows, finishes) with sl_engine_poll(). The consumer
 * never sees a tensor. An engine is driven by ONE thread (the worker's engine thread); it is not
 * thread-safe. Continuous batching: each step admits waiting requests while pages and the token
 * budget allow, runs chunked prefill for new ones and one decode token for running ones, samples,
 * emits, retires. When KV pages run out a request is preempted (its state freed and recomputed
 * later), never failed.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_engine sl_engine;

typedef struct {
    const char *model_path;      /* checkpoint directory */
    const char *backend;         /* "cpu" (default) | "cuda" */
    const char *quantize_experts;/* NULL | "nvfp4": quantise routed experts at load time */
    int n_threads;               /* CPU backend worker threads; 0 = number of online cores */
    int max_batch;               /* max running sequences per step; 0 = 64 */
    int prefill_chunk;           /* max prompt tokens per sequence per step; 0 = whole prompt */
    int max_step_tokens;         /* token budget per step across sequences; 0 = 8192 */
    size_t state_bytes;          /* memory for per-sequence state pages; 0 = 1 GiB */
    int self_check;              /* cuda: at open, a few tokens through the GPU path and the CPU reference with the
                                    same weights (the first 4 layers, all when the model has <= 8); on disagreement
                                    the open fails with one line naming the first layer and sublayer that differ.
                                    0 = default (on for cuda), 1 = on, -1 = off */
    double gpu_memory_fraction;  /* cuda: the share of the GPU's memory the engine may take (weights, buffers,
                                    state); 0 = 0.9 */
    int deterministic;           /* cuda: 1 = a request's tokens never depend on the batch it shares (the MoE's fast
                                    kernels then run each token alone: slower at large batches); 0 = fastest */
    const char *devices;         /* cuda: the GPUs the model is split across, "0,1,..." (engine/shard.h); NULL, "" or
                                    "all" = every visible GPU */
    int index_fp8;               /* 1 = the lightning indexer's keys stored FP8 (E4M3 with a power-of-two scale per 64
                                    dims, as DeepSeek stores activations: half the bytes of bf16, which the indexer
                                    reads for every candidate); the model's index_head_dim must be a multiple of 64.
                                    0 = bf16 */
    int kv_fp8;                  /* 1 = the attention's keys (the window ring, the compressed entries, the step's own
                                    rows) stored as DeepSeek's FP8 KV: the dims before the rotated ones as E4M3 with a
                                    power-of-two scale per 64, the rotated dims bf16 (V4-Flash: 592 bytes a key
                                    against 1,024); head_dim - rope_dim must be a positive multiple of 64 (the cuda
                                    backend: at most 1024, and rope_dim a multiple of 8). 0 = bf16 */
    int overlap;                 /* decode steps launched so that the host plans step N+1 while step N runs (engine.c's
                                    header says when and what it changes: only which requests share a step).
                                    0 = default (on), 1 = on, -1 = off */
} sl_engine_opts;

typedef struct {
    int vocab_size;
    int max_context;             /* prompt + generated tokens must fit */
    int bos_id;                  /* -1 if none */
    int eos_ids[8];
    int n_eos;
    char model_id[128];
    const char *backend;
} sl_model_info;

typedef struct {
    float temperature;           /* 0 = greedy */
    int top_k;                   /* 0 = off */
    float top_p;                 /* 1 = off */
    float min_p;                 /* 0 = off */
    float repetition_penalty;    /* 1 = off; applied to prompt and generated tokens (CTRL rule) */
    uint64_t seed;               /* same seed + same prompt -> same tokens */
    int max_tokens;              /* >= 1 */
    const int32_t *stop_ids;     /* finish with STOP after emitting one of these (copied) */
    int n_stop_ids;
    int ignore_eos;              /* 0: stop after emitting eos (included in the output) */
    int logprobs;                /* 1: report the sampled token's log-probability */
    int all_logits;              /* 1: emit an SL_EV_LOGITS row for every position fed */
} sl_sampling;

typedef enum {
    SL_FINISH_STOP = 0,          /* eos or stop id (or the caller's stop string via sl_engine_finish) */
    SL_FINISH_LENGTH,            /* max_tokens */
    SL_FINISH_ERROR,
    SL_FINISH_EXPIRED,
    SL_FINISH_CANCELLED,
} sl_finish_reason;

typedef enum { SL_EV_TOKEN = 0, SL_EV_LOGITS, SL_EV_FINISH } sl_event_kind;

typedef struct {
    sl_event_kind kind;
    uint64_t req;                /* id returned by sl_engine_submit */
    uint64_t tag;                /* caller's tag from the request */
    int32_t token;               /* TOKEN */
    float logprob;               /* TOKEN, when logprobs was asked */
    int position;                /* LOGITS: row t = next-token logits after position t */
    const float *logits;         /* LOGITS: vocab_size floats, valid until the next step */
    sl_finish_reason reason;     /* FINISH */
    int n_prompt, n_generated;   /* FINISH */
    const char *error;           /* FINISH with ERROR */
} sl_event;

/* 0 or -1 with one line in err (missing/corrupt checkpoint, unknown backend, ...). */
int sl_engine_open(const sl_engine_opts *opts, sl_engine **out, char *err, size_t errlen);
void sl_engine_close(sl_engine *e);
const sl_model_info *sl_engine_info(const sl_engine *e);

/* Queue a request; the prompt and stop ids are copied. Returns 0 and *req, or -1 with err
 * (empty prompt, token id out of range, prompt + max_tokens past the context, bad sampling values). */
int sl_engine_submit(sl_engine *e, const int32_t *prompt, int n_prompt, const sl_sampling *s,
                     uint64_t tag, uint64_t *req, char *err, size_t errlen);
/* Finish a request early with `reason` (CANCELLED, EXPIRED, or STOP for a matched stop string);
 * a FINISH event follows. Unknown ids are ignored. */
void sl_engine_finish(sl_engine *e, uint64_t req, sl_finish_reason reason);

/* Run one scheduler step. Returns the number of sequences in the step this call ran or launched (0 = idle; with
 * overlap a call may also emit the tokens of the step the call before launched) or -1 on a backend failure (then every
 * request gets a FINISH with ERROR). Tests of what a caller does then: the environment variable SLUICE_FAIL_STEP=N,
 * read at open, fails the Nth step that runs sequences that way (a device fault's stand-in). */
int sl_engine_step(sl_engine *e);
/* Take the next event; 1 = got one, 0 = none left. */
int sl_engine_poll(sl_engine *e, sl_event *ev);
/* Requests submitted and not yet finished, plus 1 while a launched step is still to be collected (its requests may
 * all have finished): step while this is not 0. */
int sl_engine_active(const sl_engine *e);

/* Counters since open (for tests and the worker's metrics). */
typedef struct {
    uint64_t steps;              /* steps that ran at least one sequence */
    uint64_t preemptions;        /* requests whose state was freed to be recomputed later */
    uint64_t tokens_fed;         /* tokens run through the model (prefill + decode + recompute) */
    uint64_t tokens_generated;   /* tokens sampled */
    uint64_t steps_overlapped;   /* steps launched while the step before them ran (engine.overlap) */
    size_t state_bytes_used, state_bytes_budget;
    size_t device_bytes_used, device_bytes_total;   /* the backend's device memory (0 on the CPU) */
    int running, waiting;
} sl_engine_stats;
void sl_engine_get_stats(const sl_engine *e, sl_engine_stats *s);

const char *sl_finish_reason_name(sl_finish_reason r);

#endif
