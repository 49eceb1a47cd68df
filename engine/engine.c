/* engine.c — sl_engine_*: model + backend + continuous-batching scheduler + events (engine.h).
 *
 * A request's tokens are prompt + generated so far; `st.pos` of them are in its state. Each step:
 *   1. admit waiting requests (FIFO) while the batch has room and the state budget has room for
 *      the request's tokens so far plus one;
 *   2. plan: running requests in admission order take min(unfed tokens, prefill_chunk, tokens left
 *      in the step budget) tokens (a decoding request has exactly one unfed token); pages for
 *      them are reserved; when the pool is exhausted the newest running request is preempted
 *      (state freed, back to the head of the queue, recomputed later from its tokens);
 *   3. one backend call for all spans; LOGITS events for rows not emitted before (all_logits);
 *   4. requests whose tokens are all fed sample the next token, emit TOKEN, and finish (STOP on
 *      eos unless ignore_eos or on a stop id, LENGTH at max_tokens or the context limit).
 * Preemption never changes a request's output: recompute feeds the same tokens, already emitted
 * rows are not emitted again, and the RNG only advances when a token is sampled.
 *
 * Overlap (engine.overlap, backends with launch/collect): a step of one token per request, sampled by the backend, is
 * launched rather than run, and while it runs the next call plans and launches the step after it, whose tokens the
 * backend takes from its own samples (sl_seq_span.fed), before it collects the first: the host's planning, emitting
 * and the caller's work between calls hide behind the device's step. That needs no token of the running step when
 * no waiting request could be admitted now, every running request is in the launched step, none asks for logits or
 * the repetition penalty (its history would lack the token), and pages for one more token are there without a
 * preemption; otherwise the call collects the running step and plans synchronously. A request that finishes (a stop
 * token, a cancel) while it is in a launched step gets its FINISH at once; its state is freed when that step is
 * collected, and the token sampled for it there is dropped. Overlap changes only which requests share a step (a
 * stopped request's row rides one more step; a request waiting while the batch is full is admitted a step later), so
 * a request's tokens are the same with it on or off wherever they do not depend on their neighbours: the CPU
 * backend, and cuda with engine.deterministic (its fast MoE kernels tile by the batch otherwise).
 */
#include "engine.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "synthetic.h"
#include "sampler.h"
#include "state.h"
#include "weights.h"

typedef struct {
    uint64_t id, tag;
    int32_t *toks;           /* prompt + generated */
    int n_prompt, n_gen, cap;
    sl_sampling s;
    int32_t *stop_ids;
    sl_rng rng;
    v4_seq_state st;
    int admitted;
    int rows_emitted;        /* LOGITS rows emitted for positions < rows_emitted */
    /* plan of the current step */
    int span_n, logits_from;
    float *logits;
    int flying;              /* launched steps it is in, not yet collected */
    int finished;            /* FINISH emitted while flying: freed once its last launched step is collected */
} request;

/* A launched step: its spans and their requests, kept until the backend hands the results back. */
typedef struct {
    sl_seq_span *sp;
    request **rq;
    int n, cap_sp, cap_rq;
} flight;

struct sl_engine {
    sl_engine_opts o;
    v4_weights w;
    int w_loaded;
    v4_state_pool pool;
    sl_backend *be;
    sl_model_info info;
    sl_sampler smp;
    uint64_t next_id;
    request **wait;  int n_wait, cap_wait;     /* FIFO */
    request **run;   int n_run, cap_run;       /* admission order */
    sl_event *ev;    int ev_head, n_ev, cap_ev;
    float **handed;  int n_handed, cap_handed; /* rows handed out by poll, freed next step */
    sl_seq_span *spans; request **span_req; int cap_spans, cap_span_req;
    float *lbuf; size_t cap_lbuf;
    flight fl[2];            /* launched steps not collected yet: n_fly of them, the oldest fl[fly0] */
    int fly0, n_fly;
    request **zomb;  int n_zomb, cap_zomb;     /* finished while flying */
    int overlap;
    sl_engine_stats stats;
    char err[256];           /* text of the last backend failure (FINISH ERROR events point here) */
    uint64_t fail_step;      /* SLUICE_FAIL_STEP: the step whose forward fails as a device fault would (0: none) */
};

const char *sl_finish_reason_name(sl_finish_reason r) {
    switch (r) {
    case SL_FINISH_STOP: return "stop";
    case SL_FINISH_LENGTH: return "length";
    case SL_FINISH_ERROR: return "error";
    case SL_FINISH_EXPIRED: return "expired";
    case SL_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* ------------------------------------------------------------------------------- helpers */
/* Grow a malloc'd array to hold `need` elements; returns the (possibly moved) array or NULL. */
static void *grow_to(void *p, int *cap, int need, size_t elt) {
    if (need <= *cap && p) return p;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(p, (size_t)c * elt);
    if (!q) return NULL;
    *cap = c;
    return q;
}
#define GROW(arr, cap, need) grow_into((void *)&(arr), grow_to((arr), &(cap), (need), sizeof *(arr)))
/* store the grown array (through memcpy: no pointer-type punning); 0 or -1 */
static int grow_into(void *slot, void *q) {
    if (!q) return -1;
    memcpy(slot, &q, sizeof q);
    return 0;
}

static int push_event(sl_engine *e, const sl_event *ev) {
    if (e->ev_head > 0 && e->ev_head * 2 >= e->n_ev) {     /* compact the consumed head */
        memmove(e->ev, e->ev + e->ev_head, (size_t)(e->n_ev - e->ev_head) * sizeof *e->ev);
        e->n_ev -= e->ev_head;
        e->ev_head = 0;
    }
    if (GROW(e->ev, e->cap_ev, e->n_ev + 1)) return -1;
    e->ev[e->n_ev++] = *ev;
    return 0;
}

static void free_request(request *r) {
    if (!r) return;
    free(r->toks);
    free(r->stop_ids);
    free(r);
}

static void finish_event(sl_engine *e, const request *r, sl_finish_reason why, const char *error) {
    sl_event ev = {0};
    ev.kind = SL_EV_FINISH;
    ev.req = r->id;
    ev.tag = r->tag;
    ev.reason = why;
    ev.n_prompt = r->n_prompt;
    ev.n_generated = r->n_gen;
    ev.error = error;                       /* static strings or e->err */
    push_event(e, &ev);
}

static void release(sl_engine *e, request *r) {
    if (r->admitted) v4_seq_free(&e->pool, &r->st);
    r->admitted = 0;
    free_request(r);
}

/* FINISH for a request that is in neither queue any more; its state and memory go now, or, while a launched step
 * still holds it, when that step is collected. */
static void finish(sl_engine *e, request *r, sl_finish_reason why, const char *error) {
    finish_event(e, r, why, error);
    if (!r->flying) {
        release(e, r);
        return;
    }
    r->finished = 1;
    if (GROW(e->zomb, e->cap_zomb, e->n_zomb + 1)) {   /* no room to wait: drop the launched steps' claim on it */
        for (int f = 0; f < e->n_fly; f++) {
            flight *fl = &e->fl[(e->fly0 + f) % 2];
            for (int k = 0; k < fl->n; k++)
                if (fl->rq[k] == r) fl->rq[k] = NULL;
        }
        release(e, r);
        return;
    }
    e->zomb[e->n_zomb++] = r;
}

static void release_zombies(sl_engine *e, int all) {
    int k = 0;
    for (int i = 0; i < e->n_zomb; i++)
        if (all || !e->zomb[i]->flying) release(e, e->zomb[i]);
        else e->zomb[k++] = e->zomb[i];
    e->n_zomb = k;
}

static void remove_at(request **a, int *n, int i) {
    memmove(a + i, a + i + 1, (size_t)(*n - i - 1) * sizeof *a);
    (*n)--;
}

/* ------------------------------------------------------------------------- self-check */
#define CHECK_TOKENS 8
#define CHECK_MAX_REL 5e-2   /* worst compared row's relative L2 of the logits */
#define CHECK_MAX_REL_KV8 1e-1   /* with FP8 KV: a key value computed a hair apart on the two sides can round to
                                    E4M3 codes 6-12 % apart, which small random models amplify (tests/gpu/
                                    test_backend_cuda.c); a broken kernel is far beyond either bound */
#define CHECK_NEAR_TIE 1e-2f /* a top-k decision this close may go either way on the GPU */

/* The self-check's bound for this engine's storage */
static double check_max_rel(const sl_engine *e) { return e->o.kv_fp8 ? CHECK_MAX_REL_KV8 : CHECK_MAX_REL; }

/* Logits of CHECK_TOKENS tokens through the first `sub` sublayers of `be` (a fresh sequence); gap: the CPU's
 * per-row closest top-k decision, or NULL. */
static int check_run(sl_backend *be, v4_state_pool *pool, int sub, const int32_t *tok, float *out, float *gap,
                     char *err, size_t errlen)
{
    v4_seq_state st;
    if (v4_seq_init(pool, &st) || v4_seq_reserve(pool, &st, CHECK_TOKENS)) {
        v4_seq_free(pool, &st);
        snprintf(err, errlen, "self-check: no state for %d tokens", CHECK_TOKENS);
        return -1;
    }
    be->sublayers = sub;
    if (gap) sl_backend_cpu_log_decisions(be, gap, CHECK_TOKENS);
    sl_seq_span sp = {.tokens = tok, .n = CHECK_TOKENS, .st = &st, .logits_from = 0, .logits = out};
    const int rc = be->ops->forward(be, &sp, 1, err, errlen);
    if (gap) sl_backend_cpu_log_decisions(be, NULL, 0);
    be->sublayers = 0;
    v4_seq_free(pool, &st);
    return rc;
}

/* worst relative L2 over rows [0, rows) */
static double worst_rel_l2(const float *a, const float *b, int rows, int V)
{
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < V; i++) {
            const double d = (double)a[(size_t)r * V + i] - b[(size_t)r * V + i];
            num += d * d;
            den += (double)b[(size_t)r * V + i] * b[(size_t)r * V + i];
        }
        const double e = sqrt(num / (den > 0 ? den : 1e-30));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* One comparison of the first `sub` sublayers: the rows before the CPU's first near tie in a top-k decision
 * (from there on either side's rounding may pick the other candidate). 0 agree, 1 differ, -1 error. */
static int check_sub(sl_engine *e, sl_backend *cpu, v4_state_pool *pool, int sub, const int32_t *tok, float *lc,
                     float *lg, double *d, char *err, size_t errlen)
{
    float gap[CHECK_TOKENS];
    if (check_run(cpu, pool, sub, tok, lc, gap, err, errlen) ||
        check_run(e->be, &e->pool, sub, tok, lg, NULL, err, errlen))
        return -1;
    int rows = 0;
    while (rows < CHECK_TOKENS && gap[rows] >= CHECK_NEAR_TIE) rows++;
    *d = worst_rel_l2(lg, lc, rows, e->w.cfg.vocab_size);
    return *d > check_max_rel(e);
}

/* The cuda backend against the CPU reference on the same weights, the reference rounding what the GPU keeps in
 * bf16 the same way (sl_backend_cpu_set_gpu_numerics): the first 4 layers (every layer of a model with <= 8),
 * then, on a disagreement, sublayer by sublayer to name the first that differs. */
static int self_check(sl_engine *e, char *err, size_t errlen)
{
    const v4_config *c = &e->w.cfg;
    if (e->w.layers[0].experts && e->w.layers[0].experts[0].w1.synth_seed) {
        fprintf(stderr, "engine: self-check skipped (synthetic experts exist on the GPU only)\n");
        return 0;
    }
    const int layers = c->n_layers <= 8 ? c->n_layers : 4, V = c->vocab_size;
    v4_state_pool pool;
    if (v4_pool_init(&pool, c, (size_t)256 << 20, err, errlen)) return -1;
    sl_backend *cpu = sl_backend_cpu_create(&e->w, &pool, e->o.n_threads, err, errlen);
    int32_t tok[CHECK_TOKENS];
    for (int i = 0; i < CHECK_TOKENS; i++) tok[i] = (int32_t)(i == 0 && c->bos_id >= 0 ? c->bos_id : (7 * i + 3) % V);
    float *lc = malloc((size_t)CHECK_TOKENS * V * sizeof(float)), *lg = malloc((size_t)CHECK_TOKENS * V * sizeof(float));
    int rc = -1, sub = 2 * layers, r;
    double d = 0;
    if (!cpu || !lc || !lg) {
        if (cpu) snprintf(err, errlen, "self-check: out of memory");
        goto out;
    }
    sl_backend_cpu_set_gpu_numerics(cpu, 1);
    sl_backend_cpu_set_index_fp8(cpu, e->o.index_fp8);
    sl_backend_cpu_set_kv_fp8(cpu, e->o.kv_fp8);
    if ((r = check_sub(e, cpu, &pool, sub, tok, lc, lg, &d, err, errlen)) <= 0) {
        rc = r;
        goto out;
    }
    for (sub = 1; sub < 2 * layers; sub++)
        if ((r = check_sub(e, cpu, &pool, sub, tok, lc, lg, &d, err, errlen)) != 0) break;
    if (r < 0) goto out;
    snprintf(err, errlen, "self-check: the %s backend differs from the CPU reference from layer %d's %s on (logits "
             "rel L2 %.3g > %.2g over %d tokens); engine.self_check=off opens it anyway", e->be->ops->name, (sub - 1) / 2,
             sub % 2 ? "attention" : "MoE", d, check_max_rel(e), CHECK_TOKENS);
out:
    if (cpu) cpu->ops->destroy(cpu);
    v4_pool_free(&pool);
    free(lc);
    free(lg);
    return rc;
}

/* ------------------------------------------------------------------------- open / close */
int sl_engine_open(const sl_engine_opts *opts, sl_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (!opts || !opts->model_path) { snprintf(err, errlen, "no model path given"); return -1; }
    const char *bk = opts->backend ? opts->backend : "cpu";
    if (strcmp(bk, "cpu") && strcmp(bk, "cuda")) {
        snprintf(err, errlen, "unknown backend '%s' (expected cpu or cuda)", bk);
        return -1;
    }
#ifndef SLUICE_HAVE_CUDA_BACKEND
    if (!strcmp(bk, "cuda")) {
        snprintf(err, errlen, "backend 'cuda' is not built into this binary (configure with -DSLUICE_CUDA=ON on a machine with nvcc)");
        return -1;
    }
#endif
    if (opts->quantize_experts && opts->quantize_experts[0] && strcmp(opts->quantize_experts, "nvfp4")) {
        snprintf(err, errlen, "unknown --quantize-experts format '%s' (expected nvfp4)", opts->quantize_experts);
        return -1;
    }
    sl_engine *e = calloc(1, sizeof *e);
    if (!e) { snprintf(err, errlen, "out of memory"); return -1; }
    e->o = *opts;
    if (e->o.max_batch <= 0) e->o.max_batch = 64;
    if (e->o.max_step_tokens <= 0) e->o.max_step_tokens = 8192;
    if (e->o.prefill_chunk <= 0) e->o.prefill_chunk = INT_MAX;
    if (e->o.state_bytes == 0) e->o.state_bytes = (size_t)1 << 30;
    e->next_id = 1;
    e->overlap = opts->overlap >= 0;
    const char *fs = getenv("SLUICE_FAIL_STEP");
    if (fs && *fs) e->fail_step = strtoull(fs, NULL, 10);

    const int synth = !strncmp(opts->model_path, "synthetic:", 10);
    if (synth ? v4_weights_synthetic(opts->model_path + 10, strcmp(bk, "cuda") != 0, &e->w, err, errlen)
              : v4_weights_load(opts->model_path, &e->w, err, errlen)) {
        free(e);
        return -1;
    }
    e->w_loaded = 1;
    if (opts->quantize_experts && !strcmp(opts->quantize_experts, "nvfp4") &&
        v4_weights_quantize_experts_nvfp4(&e->w, err, errlen)) {
        sl_engine_close(e);
        return -1;
    }
    if (v4_pool_init(&e->pool, &e->w.cfg, e->o.state_bytes, err, errlen)) { sl_engine_close(e); return -1; }
    if (sl_sampler_init(&e->smp, e->w.cfg.vocab_size)) { snprintf(err, errlen, "out of memory"); sl_engine_close(e); return -1; }
#ifdef SLUICE_HAVE_CUDA_BACKEND
    if (!strcmp(bk, "cuda")) {
        sl_cuda_opts co = {.gpu_memory_fraction = opts->gpu_memory_fraction, .index_fp8 = opts->index_fp8,
                           .kv_fp8 = opts->kv_fp8};
        co.n_devices = sl_parse_devices(opts->devices, co.devices, err, errlen);
        if (co.n_devices < 0) { sl_engine_close(e); return -1; }
        e->be = sl_backend_cuda_create(&e->w, &e->pool, &co, err, errlen);
    } else
#endif
        e->be = sl_backend_cpu_create(&e->w, &e->pool, opts->n_threads, err, errlen);
    if (!e->be) { sl_engine_close(e); return -1; }
    if (!strcmp(bk, "cpu") && opts->index_fp8 && sl_backend_cpu_set_index_fp8(e->be, 1)) {   /* cuda checks at create */
        snprintf(err, errlen, "FP8 index keys need the model's index_head_dim (%d) to be a multiple of 64; "
                 "use bf16 index keys for this model", e->w.cfg.index_head_dim);
        sl_engine_close(e);
        return -1;
    }
    if (!strcmp(bk, "cpu") && opts->kv_fp8 && sl_backend_cpu_set_kv_fp8(e->be, 1)) {
        snprintf(err, errlen, "FP8 KV needs the model's head_dim - rope_dim (%d - %d) to be a positive multiple of 64; "
                 "use bf16 KV for this model", e->w.cfg.head_dim, e->w.cfg.rope_dim);
        sl_engine_close(e);
        return -1;
    }
#ifdef SLUICE_HAVE_CUDA_BACKEND
    if (!strcmp(bk, "cuda") && opts->deterministic) sl_backend_cuda_set_deterministic(e->be, 1);
#endif
    if (!strcmp(bk, "cuda") && opts->self_check >= 0 && self_check(e, err, errlen)) {
        sl_engine_close(e);
        return -1;
    }

    const v4_config *c = &e->w.cfg;
    e->info.vocab_size = c->vocab_size;
    e->info.max_context = c->max_position > 0 ? c->max_position : INT_MAX / 2;
    e->info.bos_id = c->bos_id;
    e->info.n_eos = c->n_eos < 8 ? c->n_eos : 8;
    for (int i = 0; i < e->info.n_eos; i++) e->info.eos_ids[i] = c->eos_ids[i];
    snprintf(e->info.model_id, sizeof e->info.model_id, "%s", c->model_id);
    e->info.backend = e->be->ops->name;
    *out = e;
    return 0;
}

static void drain_flights(sl_engine *e);

void sl_engine_close(sl_engine *e) {
    if (!e) return;
    if (e->be) drain_flights(e);   /* the device done with the state before it is freed */
    for (int i = 0; i < e->n_wait; i++) free_request(e->wait[i]);
    for (int i = 0; i < e->n_run; i++) {
        if (e->run[i]->admitted) v4_seq_free(&e->pool, &e->run[i]->st);
        free_request(e->run[i]);
    }
    for (int i = e->ev_head; i < e->n_ev; i++)
        if (e->ev[i].kind == SL_EV_LOGITS) free((void *)e->ev[i].logits);
    for (int i = 0; i < e->n_handed; i++) free(e->handed[i]);
    release_zombies(e, 1);
    if (e->be) e->be->ops->destroy(e->be);
    v4_pool_free(&e->pool);
    sl_sampler_free(&e->smp);
    if (e->w_loaded) v4_weights_free(&e->w);
    free(e->wait); free(e->run); free(e->ev); free(e->handed); free(e->spans); free(e->span_req); free(e->lbuf);
    for (int f = 0; f < 2; f++) { free(e->fl[f].sp); free(e->fl[f].rq); }
    free(e->zomb);
    free(e);
}

const sl_model_info *sl_engine_info(const sl_engine *e) { return &e->info; }

int sl_engine_active(const sl_engine *e) { return e->n_wait + e->n_run + (e->n_fly > 0); }

void sl_engine_get_stats(const sl_engine *e, sl_engine_stats *s) {
    *s = e->stats;
    s->state_bytes_used = e->pool.used;
    s->state_bytes_budget = e->pool.budget;
    s->running = e->n_run;
    s->waiting = e->n_wait;
    s->device_bytes_used = s->device_bytes_total = 0;
    if (e->be->ops->memory) e->be->ops->memory(e->be, &s->device_bytes_used, &s->device_bytes_total);
}

/* -------------------------------------------------------------------------------- submit */
int sl_engine_submit(sl_engine *e, const int32_t *prompt, int n_prompt, const sl_sampling *s,
                     uint64_t tag, uint64_t *req, char *err, size_t errlen) {
    int V = e->info.vocab_size;
    if (!prompt || n_prompt < 1) { snprintf(err, errlen, "empty prompt"); return -1; }
    if (!s) { snprintf(err, errlen, "no sampling settings"); return -1; }
    if (sl_sampling_check(s, err, errlen)) return -1;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            snprintf(err, errlen, "prompt token %d at index %d is out of range [0, %d)", (int)prompt[i], i, V);
            return -1;
        }
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] < 0 || s->stop_ids[i] >= V) {
            snprintf(err, errlen, "stop id %d is out of range [0, %d)", (int)s->stop_ids[i], V);
            return -1;
        }
    if ((long)n_prompt + s->max_tokens > e->info.max_context) {
        snprintf(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceeds the context limit %d",
                 n_prompt, s->max_tokens, e->info.max_context);
        return -1;
    }
    size_t need = v4_pool_bytes_for(&e->pool, n_prompt + s->max_tokens);
    if (need > e->pool.budget) {
        snprintf(err, errlen, "request needs %zu bytes of decoder state, the engine has %zu", need, e->pool.budget);
        return -1;
    }
    request *r = calloc(1, sizeof *r);
    if (!r) { snprintf(err, errlen, "out of memory"); return -1; }
    r->cap = n_prompt + (s->max_tokens < 64 ? s->max_tokens : 64);
    r->toks = malloc((size_t)r->cap * sizeof(int32_t));
    if (s->n_stop_ids > 0) r->stop_ids = malloc((size_t)s->n_stop_ids * sizeof(int32_t));
    if (!r->toks || (s->n_stop_ids > 0 && !r->stop_ids) ||
        GROW(e->wait, e->cap_wait, e->n_wait + 1)) {
        free_request(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(r->toks, prompt, (size_t)n_prompt * sizeof(int32_t));
    if (s->n_stop_ids > 0) memcpy(r->stop_ids, s->stop_ids, (size_t)s->n_stop_ids * sizeof(int32_t));
    r->n_prompt = n_prompt;
    r->s = *s;
    r->s.stop_ids = r->stop_ids;
    r->id = e->next_id++;
    r->tag = tag;
    sl_rng_seed(&r->rng, s->seed);
    e->wait[e->n_wait++] = r;
    if (req) *req = r->id;
    return 0;
}

void sl_engine_finish(sl_engine *e, uint64_t req, sl_finish_reason reason) {
    for (int i = 0; i < e->n_wait; i++)
        if (e->wait[i]->id == req) {
            request *r = e->wait[i];
            remove_at(e->wait, &e->n_wait, i);
            finish(e, r, reason, NULL);
            return;
        }
    for (int i = 0; i < e->n_run; i++)
        if (e->run[i]->id == req) {
            request *r = e->run[i];
            remove_at(e->run, &e->n_run, i);
            finish(e, r, reason, NULL);
            return;
        }
}

int sl_engine_poll(sl_engine *e, sl_event *ev) {
    if (e->ev_head >= e->n_ev) return 0;
    *ev = e->ev[e->ev_head++];
    if (ev->kind == SL_EV_LOGITS &&
        !GROW(e->handed, e->cap_handed, e->n_handed + 1))
        e->handed[e->n_handed++] = (float *)ev->logits;
    return 1;
}

/* ---------------------------------------------------------------------------------- step */
static int preempt_newest(sl_engine *e) {
    if (e->n_run == 0) return -1;
    request *r = e->run[e->n_run - 1];
    if (GROW(e->wait, e->cap_wait, e->n_wait + 1)) return -1;
    e->n_run--;
    v4_seq_free(&e->pool, &r->st);
    r->admitted = 0;
    e->stats.preemptions++;
    memmove(e->wait + 1, e->wait, (size_t)e->n_wait * sizeof *e->wait);
    e->wait[0] = r;
    e->n_wait++;
    return 0;
}

static int append_token(request *r, int32_t t) {
    int len = r->n_prompt + r->n_gen;
    if (len == r->cap) {
        int cap = r->cap * 2;
        int32_t *p = realloc(r->toks, (size_t)cap * sizeof *p);
        if (!p) return -1;
        r->toks = p;
        r->cap = cap;
    }
    r->toks[len] = t;
    r->n_gen++;
    return 0;
}

static void drain_flights(sl_engine *e);

static void fail_all(sl_engine *e, const char *why) {
    drain_flights(e);   /* none left after a failed backend call; after any other failure, waited for */
    while (e->n_run) { request *r = e->run[--e->n_run]; r->flying = 0; finish(e, r, SL_FINISH_ERROR, why); }
    while (e->n_wait) { request *r = e->wait[--e->n_wait]; finish(e, r, SL_FINISH_ERROR, why); }
    release_zombies(e, 1);
}

/* Wait for every launched step and drop its results (a backend whose collect fails has dropped them itself). */
static void drain_flights(sl_engine *e) {
    char err[256];
    while (e->n_fly && !e->be->ops->collect(e->be, err, sizeof err)) e->n_fly--;
    e->n_fly = 0;
}

/* SLUICE_FAIL_STEP: 1 (and every request failed) when the step about to run is the one to fail. */
static int injected_fault(sl_engine *e) {
    if (!e->fail_step || e->stats.steps + 1 != e->fail_step) return 0;
    snprintf(e->err, sizeof e->err, "%s backend: step %llu failed (injected: SLUICE_FAIL_STEP)", e->be->ops->name,
             (unsigned long long)e->fail_step);
    fail_all(e, e->err);
    return 1;
}

/* Whether admission (sl_engine_step's first part) takes the first waiting request now: the batch has room, and the
 * state budget has room for its tokens so far plus one (the first request always goes in). */
static int can_admit(const sl_engine *e) {
    if (e->n_wait == 0 || e->n_run >= e->o.max_batch) return 0;
    const request *r = e->wait[0];
    return e->n_run == 0 || e->pool.used + v4_pool_bytes_for(&e->pool, r->n_prompt + r->n_gen + 1) <= e->pool.budget;
}

/* Request r's next token t: append, TOKEN, and the finish it may bring. -1 when out of memory. */
static int take_token(sl_engine *e, request *r, int32_t t, float lp) {
    if (append_token(r, t)) return -1;
    e->stats.tokens_generated++;
    sl_event ev = {0};
    ev.kind = SL_EV_TOKEN;
    ev.req = r->id;
    ev.tag = r->tag;
    ev.token = t;
    ev.logprob = r->s.logprobs ? lp : 0.0f;
    push_event(e, &ev);
    int stop = 0;
    if (!r->s.ignore_eos)
        for (int q = 0; q < e->info.n_eos; q++) stop |= t == e->info.eos_ids[q];
    for (int q = 0; q < r->s.n_stop_ids; q++) stop |= t == r->s.stop_ids[q];
    int reason = stop ? SL_FINISH_STOP
               : (r->n_gen >= r->s.max_tokens || r->n_prompt + r->n_gen >= e->info.max_context) ? SL_FINISH_LENGTH
               : -1;
    if (reason >= 0) {
        for (int i = 0; i < e->n_run; i++)
            if (e->run[i] == r) { remove_at(e->run, &e->n_run, i); break; }
        finish(e, r, (sl_finish_reason)reason, NULL);
    }
    return 0;
}

/* Launch spans[0, ns) as the newest launched step: the synchronous plan's (e->spans, with e->span_req: both move into
 * the free flight) or the free flight's own. 1 launched, 0 not taken by the backend (nothing done), -1 failed (every
 * request failed). */
static int launch(sl_engine *e, sl_seq_span *spans, int ns) {
    if (injected_fault(e)) return -1;
    const int rc = e->be->ops->launch(e->be, spans, ns, e->err, sizeof e->err);
    if (rc < 0) { fail_all(e, e->err); return -1; }
    if (rc) return 0;
    flight *f = &e->fl[(e->fly0 + e->n_fly) % 2];
    if (spans == e->spans) {   /* the synchronous plan's arrays become the flight's, the flight's the plan's */
        sl_seq_span *sp = f->sp; request **q = f->rq;
        int csp = f->cap_sp, crq = f->cap_rq;
        f->sp = e->spans; f->cap_sp = e->cap_spans; f->rq = e->span_req; f->cap_rq = e->cap_span_req;
        e->spans = sp; e->cap_spans = csp; e->span_req = q; e->cap_span_req = crq;
    }
    f->n = ns;
    e->n_fly++;
    for (int k = 0; k < ns; k++) f->rq[k]->flying++;
    e->stats.steps++;
    return 1;
}

/* While step N (the one flight) runs: plan and launch N+1, the token of every running request that continues after
 * N fed from N. The number of spans launched; 0 when N+1 needs what only N's results give (see the header), -1
 * failed. */
static int launch_fed(sl_engine *e) {
    if (e->n_fly != 1 || can_admit(e) || e->n_run > e->o.max_step_tokens) return 0;
    flight *f = &e->fl[(e->fly0 + 1) % 2];
    if (GROW(f->sp, f->cap_sp, e->n_run) || GROW(f->rq, f->cap_rq, e->n_run)) return 0;
    for (int i = 0; i < e->n_run; i++) {   /* every condition before any page is reserved */
        const request *r = e->run[i];
        if (!r->flying || r->s.all_logits || r->s.repetition_penalty != 1.0f) return 0;
    }
    int ns = 0;
    for (int i = 0; i < e->n_run; i++) {
        request *r = e->run[i];
        if (r->n_gen + 1 >= r->s.max_tokens || r->n_prompt + r->n_gen + 1 >= e->info.max_context) continue;
        if (v4_seq_reserve(&e->pool, &r->st, r->st.pos + 1)) return 0;   /* the synchronous plan preempts */
        sl_rng g = r->rng;   /* its RNG after the draw of step N */
        if (!sl_sampling_is_greedy(&r->s)) sl_rng_next(&g);
        f->sp[ns] = (sl_seq_span){.n = 1, .st = &r->st, .logits_from = 0, .sample = &r->s, .rng = g.s, .fed = 1};
        f->rq[ns++] = r;
    }
    if (ns == 0) return 0;
    const int rc = launch(e, f->sp, ns);
    if (rc <= 0) return rc;
    e->stats.tokens_fed += (uint64_t)ns;
    e->stats.steps_overlapped++;
    return ns;
}

/* Collect the oldest launched step and emit its tokens. 0, or -1 (every request failed). */
static int collect(sl_engine *e) {
    flight *f = &e->fl[e->fly0];
    if (e->be->ops->collect(e->be, e->err, sizeof e->err)) { fail_all(e, e->err); return -1; }
    e->fly0 = (e->fly0 + 1) % 2;
    e->n_fly--;
    for (int k = 0; k < f->n; k++) {
        request *r = f->rq[k];
        if (!r) continue;
        r->flying--;
        if (r->finished) continue;   /* finished since the launch: this token is not its */
        if (!sl_sampling_is_greedy(&r->s)) sl_rng_next(&r->rng);
        if (take_token(e, r, f->sp[k].token, f->sp[k].logprob)) { fail_all(e, "out of memory"); return -1; }
    }
    f->n = 0;
    release_zombies(e, 0);
    return 0;
}

/* Collect launched steps that hold no running request any more (their requests all finished while they ran), so no
 * state waits on one while the caller has nothing to step. 0, or -1 (every request failed). */
static int settle(sl_engine *e) {
    while (e->n_fly) {
        const flight *f = &e->fl[e->fly0];
        int live = 0;
        for (int k = 0; k < f->n && !live; k++) live = f->rq[k] && !f->rq[k]->finished;
        if (live) return 0;
        if (collect(e)) return -1;
    }
    return 0;
}

int sl_engine_step(sl_engine *e) {
    int V = e->info.vocab_size;
    for (int i = 0; i < e->n_handed; i++) free(e->handed[i]);
    e->n_handed = 0;

    /* 0. a launched step running: launch the next behind it where it can be planned now, then collect it */
    if (e->n_fly) {
        const int next = launch_fed(e);
        if (next < 0 || collect(e) || settle(e)) return -1;
        if (next > 0) return next;
    }

    /* 1. admission */
    while (can_admit(e)) {
        request *r = e->wait[0];
        if (GROW(e->run, e->cap_run, e->n_run + 1)) break;
        if (v4_seq_init(&e->pool, &r->st)) break;
        r->admitted = 1;
        remove_at(e->wait, &e->n_wait, 0);
        e->run[e->n_run++] = r;
    }
    if (e->n_run == 0) return 0;

    /* 2. plan */
    if (GROW(e->spans, e->cap_spans, e->n_run) || GROW(e->span_req, e->cap_span_req, e->n_run)) {
        fail_all(e, "out of memory");
        return -1;
    }
    int budget = e->o.max_step_tokens, ns = 0;
    size_t rows = 0;
    for (int i = 0; i < e->n_run && budget > 0; i++) {
        request *r = e->run[i];
        int len = r->n_prompt + r->n_gen, pos = r->st.pos;
        int c = len - pos;
        if (c > e->o.prefill_chunk) c = e->o.prefill_chunk;
        if (c > budget) c = budget;
        if (c <= 0) continue;
        while (v4_seq_reserve(&e->pool, &r->st, pos + c)) {
            int self = e->run[e->n_run - 1] == r;
            if (preempt_newest(e)) { fail_all(e, "out of memory"); return -1; }
            if (self) { r = NULL; break; }
        }
        if (!r) break;
        r->span_n = c;
        int last = pos + c == len;
        int from = c;                                        /* no rows */
        if (r->s.all_logits) from = r->rows_emitted > pos ? r->rows_emitted - pos : 0;
        if (from > c) from = c;
        if (last && from > c - 1) from = c - 1;              /* the row we sample from */
        r->logits_from = from;
        sl_seq_span sp = {.tokens = r->toks + pos, .n = c, .st = &r->st, .logits_from = from, .logits = NULL};
        if (last && from == c - 1 && !r->s.all_logits && e->be->ops->samples) {   /* the device samples: no logits */
            sp.sample = &r->s;
            sp.hist = r->toks;
            sp.n_hist = len;
            sp.rng = r->rng.s;
        } else {
            rows += (size_t)(c - from);
        }
        e->span_req[ns] = r;
        e->spans[ns++] = sp;
        budget -= c;
        e->stats.tokens_fed += (uint64_t)c;
    }
    if (ns == 0) return 0;
    if (rows * V > e->cap_lbuf) {
        float *p = realloc(e->lbuf, rows * V * sizeof(float));
        if (!p) { fail_all(e, "out of memory"); return -1; }
        e->lbuf = p;
        e->cap_lbuf = rows * V;
    }
    size_t off = 0;
    for (int k = 0; k < ns; k++) {
        if (e->spans[k].sample) continue;
        e->spans[k].logits = e->lbuf + off;
        off += (size_t)(e->spans[k].n - e->spans[k].logits_from) * V;
    }

    /* 3. run: launched where every span is one token the backend samples, so that the next call overlaps it */
    int one_token = e->overlap && e->be->ops->launch;
    for (int k = 0; k < ns && one_token; k++)
        one_token = e->spans[k].n == 1 && e->spans[k].sample && e->spans[k].logits_from == 0;
    if (one_token) {
        const int rc = launch(e, e->spans, ns);
        if (rc) return rc < 0 ? -1 : ns;
    }
    if (injected_fault(e)) return -1;
    if (e->be->ops->forward(e->be, e->spans, ns, e->err, sizeof e->err)) {
        fail_all(e, e->err);
        return -1;
    }

    e->stats.steps++;

    /* 4. emit, sample, retire */
    for (int k = 0; k < ns; k++) {
        request *r = e->span_req[k];
        sl_seq_span *sp = &e->spans[k];
        int pos0 = r->st.pos - sp->n, len = r->n_prompt + r->n_gen;
        for (int j = sp->logits_from; j < sp->n; j++) {
            int p = pos0 + j;
            if (!r->s.all_logits || p < r->rows_emitted) continue;
            float *row = malloc((size_t)V * sizeof(float));
            if (!row) continue;
            memcpy(row, sp->logits + (size_t)(j - sp->logits_from) * V, (size_t)V * sizeof(float));
            sl_event ev = {0};
            ev.kind = SL_EV_LOGITS;
            ev.req = r->id;
            ev.tag = r->tag;
            ev.position = p;
            ev.logits = row;
            if (push_event(e, &ev)) free(row);
            r->rows_emitted = p + 1;
        }
        if (r->st.pos < len) continue;                       /* still prefilling */
        float lp = 0.0f;
        int32_t t;
        if (sp->sample) {   /* chosen on the device from the RNG state it was given; advance ours the same way */
            t = sp->token;
            lp = sp->logprob;
            if (!sl_sampling_is_greedy(&r->s)) sl_rng_next(&r->rng);
        } else {
            t = sl_sample(&e->smp, &r->s, sp->logits + (size_t)(sp->n - 1 - sp->logits_from) * V, r->toks, len,
                          &r->rng, &lp);
        }
        if (take_token(e, r, t, lp)) { fail_all(e, "out of memory"); return -1; }
    }
    return ns;
}
