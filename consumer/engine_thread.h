/* engine_thread.h — the thread that owns the sl_engine.
 *
 * The consumer thread sends commands (submit a request, finish one early) and receives events (tokens,
 * finishes). Both directions are mutex-protected lists swapped in one piece; their size is bounded by
 * the worker's admission limit (worker.max_inflight jobs, each with at most max_tokens events).
 * When events arrive the engine thread writes one byte to `wake_fd` (a pipe the consumer thread polls).
 * The engine thread sleeps on a condition variable while it has no work.
 */
#ifndef SLUICE_ENGINE_THREAD_H
#define SLUICE_ENGINE_THREAD_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

enum { ECMD_SUBMIT = 0, ECMD_FINISH };

typedef struct {
    int kind;
    void *tag;
    int32_t *prompt;                 /* SUBMIT: malloc'ed, owned by the engine thread afterwards */
    int n_prompt;
    sl_sampling s;                   /* SUBMIT: s.stop_ids malloc'ed, owned likewise */
    sl_finish_reason reason;         /* FINISH */
} eng_cmd;

enum { EEV_TOKEN = 0, EEV_FINISH };

typedef struct {
    int kind;
    void *tag;
    int32_t token;
    float logprob;
    sl_finish_reason reason;
    int n_prompt, n_generated;
    double ttft_ms, decode_ms;       /* FINISH: engine submit -> first token, first token -> finish */
    char error[160];                 /* FINISH with ERROR */
} eng_event;

typedef struct eng_thread eng_thread;

int eng_thread_start(eng_thread **out, sl_engine *e, int wake_fd);
/* Stops the thread (active requests are abandoned) and joins it; the engine stays open. */
void eng_thread_stop(eng_thread *t);
int eng_thread_send(eng_thread *t, const eng_cmd *cmds, int n);   /* 0 or -1 (out of memory) */
/* Take every pending event; *evs is malloc'ed (caller frees). Returns the count. */
int eng_thread_take(eng_thread *t, eng_event **evs);
/* 1 (and the engine's one line in why) once a step has failed: a device fault, not the jobs'. The failed step's
 * requests send no finish (the caller hands their jobs back), and later submits are dropped unanswered; 0 before. */
int eng_thread_fault(eng_thread *t, char *why, size_t n);
/* Engine statistics for /metrics: the engine's counters as of its last step (the engine is not
 * thread-safe, so the engine thread copies them after each step), plus the thread's own. */
typedef struct {
    sl_engine_stats e;
    uint64_t steps;                  /* steps that ran at least one sequence */
    double busy_s;                   /* time spent in steps and event draining */
    int batch;                       /* sequences in the last step; 0 once nothing is active */
} eng_stats;
void eng_thread_stats(eng_thread *t, eng_stats *out);

#endif
