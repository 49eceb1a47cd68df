/* jobs.h — run a set of requests through an sl_engine and collect what came back (model tests). */
#ifndef SLUICE_TEST_JOBS_H
#define SLUICE_TEST_JOBS_H

#include "../../engine/engine.h"
#include "fixture.h"

#define JOB_MAX_TOK 256

typedef struct {
    /* in */
    const int32_t *prompt;
    int n_prompt;
    sl_sampling s;
    /* out */
    uint64_t id;
    int32_t toks[JOB_MAX_TOK];
    float lp[JOB_MAX_TOK];
    int n;
    float *rows;            /* all_logits: (n_prompt + max_tokens) x V */
    int n_rows;
    int finished;
    sl_finish_reason why;
} job;

static inline sl_sampling greedy_sampling(int max_tokens) {
    sl_sampling s;
    memset(&s, 0, sizeof s);
    s.top_p = 1.0f;
    s.repetition_penalty = 1.0f;
    s.max_tokens = max_tokens;
    return s;
}

/* overlap: sl_engine_opts.overlap (0 = the default) */
static inline sl_engine *open_engine_overlap(const char *dir, int chunk, int max_batch, int step_tokens,
                                             size_t state_bytes, const char *qexp, int overlap) {
    sl_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = dir;
    o.backend = "cpu";
    o.n_threads = 2;
    o.prefill_chunk = chunk;
    o.max_batch = max_batch;
    o.max_step_tokens = step_tokens;
    o.state_bytes = state_bytes;
    o.quantize_experts = qexp;
    o.overlap = overlap;
    sl_engine *e;
    char err[512];
    if (sl_engine_open(&o, &e, err, sizeof err)) {
        fprintf(stderr, "open %s: %s\n", dir, err);
        return NULL;
    }
    return e;
}

static inline sl_engine *open_engine(const char *dir, int chunk, int max_batch, int step_tokens, size_t state_bytes,
                              const char *qexp) {
    return open_engine_overlap(dir, chunk, max_batch, step_tokens, state_bytes, qexp, 0);
}

/* Submit all jobs, step until every one finished. 0 or -1. */
static inline int run_jobs(sl_engine *e, job *jobs, int n) {
    int V = sl_engine_info(e)->vocab_size;
    char err[512];
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        j->n = j->n_rows = j->finished = 0;
        free(j->rows);
        j->rows = NULL;
        if (j->s.all_logits) j->rows = calloc((size_t)(j->n_prompt + j->s.max_tokens) * V, sizeof(float));
        if (sl_engine_submit(e, j->prompt, j->n_prompt, &j->s, (uint64_t)i, &j->id, err, sizeof err)) {
            fprintf(stderr, "submit: %s\n", err);
            return -1;
        }
    }
    int left = n, guard = 0;
    while (left > 0) {
        if (sl_engine_step(e) < 0) { fprintf(stderr, "step failed\n"); }
        if (++guard > 100000) { fprintf(stderr, "engine does not finish\n"); return -1; }
        sl_event ev;
        while (sl_engine_poll(e, &ev)) {
            job *j = &jobs[ev.tag];
            if (ev.req != j->id) { fprintf(stderr, "event for the wrong request\n"); return -1; }
            if (ev.kind == SL_EV_TOKEN) {
                if (j->n < JOB_MAX_TOK) { j->toks[j->n] = ev.token; j->lp[j->n] = ev.logprob; }
                j->n++;
            } else if (ev.kind == SL_EV_LOGITS) {
                if (ev.position != j->n_rows) { fprintf(stderr, "logits row %d out of order (want %d)\n", ev.position, j->n_rows); return -1; }
                memcpy(j->rows + (size_t)ev.position * V, ev.logits, (size_t)V * sizeof(float));
                j->n_rows++;
            } else {
                j->finished = 1;
                j->why = ev.reason;
                left--;
            }
        }
    }
    return 0;
}

static inline void free_jobs(job *jobs, int n) {
    for (int i = 0; i < n; i++) { free(jobs[i].rows); jobs[i].rows = NULL; }
}

#endif
