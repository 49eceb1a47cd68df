/* worker_jobs.c — a job's life in the worker: message -> validate -> claim -> engine -> result ->
 * delivery -> Redis done -> offset. See worker.h for the threading and record ownership rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "worker.h"

// ---------------------------------------------------------------- records

static int is_inflight(int s) { return s == JS_CLAIM || s == JS_RUNNING; }

static void set_state(worker *w, job_rec *r, int s) {
    w->n_inflight += is_inflight(s) - is_inflight(r->state);
    r->state = s;
}

static job_rec *rec_new(worker *w, const rd_kafka_message_t *m) {
    job_rec *r = calloc(1, sizeof(*r));
    if (!r) abort();
    r->kind = JK_JOB;
    r->state = JS_PARKED;   /* not in flight until set_state(JS_CLAIM) */
    r->partition = m->partition;
    r->offset = m->offset;
    r->t_recv = now_ms();
    r->next = w->head;
    if (w->head) w->head->prev = r;
    w->head = r;
    if (offsets_add(&w->offs, m->partition, m->offset)) abort();
    return r;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    if (!d) abort();
    return d;
}

static uint8_t *xmemdup(const void *p, size_t n) {
    uint8_t *d = malloc(n ? n : 1);
    if (!d) abort();
    if (n) memcpy(d, p, n);
    return d;
}

/* The DLQ message for a record: a copy of at most the producer's message limit of the original bytes
 * (wk_produce_dlq cuts what does not fit and says so), kept so that a failed write can be retried. */
static void dlq_send(worker *w, job_rec *r, const void *value, size_t vlen, const void *key, size_t klen,
                     const char *topic, const char *error, const char *cls) {
    struct dlq_msg *d = calloc(1, sizeof(*d));
    if (!d) abort();
    r->kind = JK_DLQ;
    set_state(w, r, JS_PRODUCING);
    r->dlq = d;
    size_t cap = (size_t)w->produce_max;
    d->orig_value_len = value ? vlen : 0;
    d->orig_key_len = key ? klen : 0;
    d->value_len = d->orig_value_len < cap ? d->orig_value_len : cap;
    d->key_len = d->orig_key_len < cap ? d->orig_key_len : cap;
    d->value = value ? xmemdup(value, d->value_len) : NULL;
    d->key = key ? xmemdup(key, d->key_len) : NULL;
    d->limit = cap;
    d->error = xstrdup(error);
    d->cls = xstrdup(cls);
    d->topic = xstrdup(topic);
    snprintf(d->partition, sizeof(d->partition), "%d", (int)r->partition);
    snprintf(d->offset, sizeof(d->offset), "%lld", (long long)r->offset);
    wlog(w, L_INFO, "DLQ %s[%d]@%lld: %s", d->topic, (int)r->partition, (long long)r->offset, error);
    atomic_fetch_add(&w->m.dlq, 1);
    wk_produce_dlq(w, r);
}

/* Bad input: a JK_DLQ record that writes the message to the DLQ with the error headers; its offset is
 * released once the DLQ write is delivered. */
static void dlq(worker *w, const rd_kafka_message_t *m, const char *error, const char *cls) {
    job_rec *r = rec_new(w, m);
    dlq_send(w, r, m->payload, m->len, m->key, m->key_len, rd_kafka_topic_name(m->rkt), error, cls);
}

static void free_raw(job_rec *r) {
    free(r->raw);
    free(r->raw_key);
    r->raw = r->raw_key = NULL;
    r->raw_len = r->raw_key_len = 0;
}

static void rec_free(worker *w, job_rec *r) {
    set_state(w, r, JS_PARKED);
    if (r->produce_tries > 0) w->n_produce_failed--;   /* a handed-back record with a pending retry */
    if (r->prev) r->prev->next = r->next;
    else w->head = r->next;
    if (r->next) r->next->prev = r->prev;
    job_free(&r->job);
    free(r->prompt);
    free(r->tokens);
    free(r->logprobs);
    textdec_free(&r->text);
    free(r->result);
    free(r->reply_error);
    free(r->small);
    free_raw(r);
    if (r->dlq) {
        free(r->dlq->value);
        free(r->dlq->key);
        free(r->dlq->error);
        free(r->dlq->cls);
        free(r->dlq->topic);
        free(r->dlq);
    }
    free(r);
}

/* Free when nothing holds the pointer any more (engine tag, producer opaque, queues). */
static void rec_maybe_free(worker *w, job_rec *r) {
    if (!r->in_engine && !r->in_producer && !r->in_claimq && !r->in_doneq) rec_free(w, r);
}

// ---------------------------------------------------------------- stage profile

#define PROF_STAGES 5
#define PROF_MAX 400000
struct stage_prof {
    float *v[PROF_STAGES];           /* ms per stage, first PROF_MAX jobs */
    int n;
};
static const char *const PROF_NAMES[PROF_STAGES] = {
    "consume->claimed (decode, validate, Redis claim)", "claimed->engine finish (engine queue + compute)",
    "engine finish->delivery report (produce, broker ack)", "delivery->Redis done (pipelined write)",
    "consume->offset stored (whole stay in the worker)"};

static void prof_add(worker *w, job_rec *r) {
    if (r->kind != JK_JOB || r->t_claimed == 0 || r->t_finished == 0 || r->t_delivered == 0) return;
    if (!w->prof) {
        w->prof = calloc(1, sizeof(*w->prof));
        for (int i = 0; w->prof && i < PROF_STAGES; i++) w->prof->v[i] = malloc(PROF_MAX * sizeof(float));
    }
    struct stage_prof *p = w->prof;
    if (!p || !p->v[PROF_STAGES - 1] || p->n >= PROF_MAX) return;
    double now = now_ms();
    p->v[0][p->n] = (float)(r->t_claimed - r->t_recv);
    p->v[1][p->n] = (float)(r->t_finished - r->t_claimed);
    p->v[2][p->n] = (float)(r->t_delivered - r->t_finished);
    p->v[3][p->n] = (float)(now - r->t_delivered);
    p->v[4][p->n] = (float)(now - r->t_recv);
    p->n++;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

void wj_profile_print(worker *w) {
    struct stage_prof *p = w->prof;
    if (!p) return;
    if (p->n > 0) {
        wlog(w, L_INFO, "stage profile over %d jobs (ms):        mean     p50     p99", p->n);
        for (int s = 0; s < PROF_STAGES; s++) {
            double sum = 0;
            for (int i = 0; i < p->n; i++) sum += p->v[s][i];
            qsort(p->v[s], (size_t)p->n, sizeof(float), cmp_f);
            wlog(w, L_INFO, "  %-52s %7.3f %7.3f %7.3f", PROF_NAMES[s], sum / p->n, p->v[s][p->n / 2],
                 p->v[s][(int)(p->n * 0.99)]);
        }
    }
    for (int s = 0; s < PROF_STAGES; s++) free(p->v[s]);
    free(p);
    w->prof = NULL;
}

static void push(job_rec ***q, int *n, int *cap, job_rec *r) {
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 256;
        job_rec **p = realloc(*q, (size_t)c * sizeof(*p));
        if (!p) abort();
        *q = p;
        *cap = c;
    }
    (*q)[(*n)++] = r;
}

// ---------------------------------------------------------------- one job id, one computation

static uint64_t fnv1a(const void *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *b = p, *e = b + n; b < e; b++) h = (h ^ *b) * 0x100000001b3ull;
    return h;
}

static job_rec **ids_slot(worker *w, const char *id, size_t len) {
    return &w->ids[fnv1a(id, len) & (w->ids_cap - 1)];
}

static job_rec *ids_find(worker *w, const sl_job *j) {
    if (!w->ids_cap) return NULL;
    for (job_rec *r = *ids_slot(w, j->id, j->id_len); r; r = r->id_next)
        if (r->job.id_len == j->id_len && memcmp(r->job.id, j->id, j->id_len) == 0) return r;
    return NULL;
}

static void ids_add(worker *w, job_rec *r) {
    if (w->n_ids + 1 > w->ids_cap / 2) {
        size_t cap = w->ids_cap ? w->ids_cap * 2 : 1024;
        job_rec **old = w->ids;
        size_t ocap = w->ids_cap;
        w->ids = calloc(cap, sizeof(*w->ids));
        if (!w->ids) abort();
        w->ids_cap = cap;
        for (size_t i = 0; i < ocap; i++)
            for (job_rec *x = old[i], *nx; x; x = nx) {
                nx = x->id_next;
                job_rec **sl = ids_slot(w, x->job.id, x->job.id_len);
                x->id_next = *sl;
                *sl = x;
            }
        free(old);
    }
    job_rec **sl = ids_slot(w, r->job.id, r->job.id_len);
    r->id_next = *sl;
    *sl = r;
    r->in_ids = 1;
    w->n_ids++;
}

static void ids_del(worker *w, job_rec *r) {
    if (!r->in_ids) return;
    for (job_rec **p = ids_slot(w, r->job.id, r->job.id_len); *p; p = &(*p)->id_next)
        if (*p == r) {
            *p = r->id_next;
            break;
        }
    r->in_ids = 0;
    r->id_next = NULL;
    w->n_ids--;
}

static void unfollow(job_rec *f) {
    job_rec *l = f->leader;
    if (!l) return;
    for (job_rec **p = &l->followers; *p; p = &(*p)->next_follower)
        if (*p == f) {
            *p = f->next_follower;
            break;
        }
    f->leader = NULL;
    f->next_follower = NULL;
}

/* Follower f leaves the chain it was taken from (its leader and link cleared); returns the one after it. */
static job_rec *release_follower(job_rec *f) {
    job_rec *nx = f->next_follower;
    f->leader = NULL;
    f->next_follower = NULL;
    return nx;
}

static void reemit(worker *w, job_rec *r, char *bytes, size_t len);
static void rec_to_dlq(worker *w, job_rec *r, const char *error, const char *cls);

/* The leader's Result is delivered: each follower re-emits it (the job is not computed again). */
static void serve_followers(worker *w, job_rec *l) {
    job_rec *f = l->followers;
    l->followers = NULL;
    for (job_rec *nx; f; f = nx) {
        nx = release_follower(f);
        f->tokens_out = l->tokens_out;
        reemit(w, f, (char *)xmemdup(l->result, l->result_len), l->result_len);
    }
}

/* A leader leaves (released, handed back): its followers get its delivered Result, or (draining) are
 * left as parked records for the drain to hand back, or the first of them becomes the leader and is
 * claimed. Frees no record. */
static void leader_gone(worker *w, job_rec *l) {
    ids_del(w, l);
    if (!l->followers) return;
    if (l->result && (l->kind == JK_REEMIT || l->t_delivered > 0)) {
        serve_followers(w, l);
        return;
    }
    job_rec *f = l->followers;
    l->followers = NULL;
    if (w->draining) {
        /* plain parked records now: the drain hands them back (never freed here: the callers walk the
         * record list) */
        while (f) f = release_follower(f);
        return;
    }
    job_rec *nl = f;
    nl->followers = nl->next_follower;
    nl->leader = NULL;
    nl->next_follower = NULL;
    for (job_rec *x = nl->followers; x; x = x->next_follower) x->leader = nl;
    ids_add(w, nl);
    set_state(w, nl, JS_CLAIM);
    nl->in_claimq = 1;
    push(&w->claimq, &w->n_claimq, &w->cap_claimq, nl);
}

/* A job that turns out not to be runnable after all (its id is known with another payload): the DLQ
 * gets its message; its followers (the same payload) go with it. */
static void rec_to_dlq(worker *w, job_rec *r, const char *error, const char *cls) {
    ids_del(w, r);
    job_rec *f = r->followers;
    r->followers = NULL;
    for (job_rec *nx; f; f = nx) {
        nx = release_follower(f);
        rec_to_dlq(w, f, error, cls);
    }
    dlq_send(w, r, r->raw, r->raw_len, r->raw_key, r->raw_key_len, w->topic_jobs, error, cls);
    free_raw(r);
}

/* The record's work is over: release its offset (if the low-water mark moves) and free it. */
static void rec_release(worker *w, job_rec *r) {
    leader_gone(w, r);
    prof_add(w, r);
    int64_t off = offsets_done(&w->offs, r->partition, r->offset);
    if (off >= 0) wk_store_offset(w, r->partition, off);
    r->abandoned = 1;
    rec_maybe_free(w, r);
}

int wj_live(worker *w) {
    int n = 0;
    for (job_rec *r = w->head; r; r = r->next) n += !r->abandoned;
    return n;
}

int wj_undelivered(worker *w) {
    int n = 0;
    for (job_rec *r = w->head; r; r = r->next) n += !r->abandoned && !(r->kind == JK_JOB && r->state == JS_DONEWRITE);
    return n;
}

int wj_release_delivered(worker *w) {
    int n = 0;
    for (int i = 0; i < w->n_doneq; i++) {
        job_rec *r = w->doneq[i];
        r->in_doneq = 0;
        if (r->abandoned) {
            rec_maybe_free(w, r);
        } else {
            rec_release(w, r);
            n++;
        }
    }
    w->n_doneq = 0;
    return n;
}

// ---------------------------------------------------------------- validation

static int topic_name_ok(const char *t) {
    size_t n = strlen(t);
    if (n == 0 || n > 249) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

/* 0, or -1 with one line naming the field. Tokenises a text prompt into r->prompt. */
int wj_validate(worker *w, sl_job *j, int32_t **prompt, int *n_prompt, char *err, size_t errlen) {
    int vocab = w->info->vocab_size, ctx = w->info->max_context;
    if (j->id_len == 0) return snprintf(err, errlen, "id: empty"), -1;
    if (j->id_len > JOB_ID_MAX) return snprintf(err, errlen, "id: %zu bytes, longer than %d", j->id_len, JOB_ID_MAX), -1;
    if (memchr(j->id, 0, j->id_len)) return snprintf(err, errlen, "id: holds a NUL byte"), -1;
    if (!sl_utf8_valid(j->id, j->id_len)) return snprintf(err, errlen, "id: not valid UTF-8"), -1;
    if (j->n_messages > 0) {   /* a chat job: the messages make the prompt */
        if (j->prompt_is_text ? j->prompt_text_len > 0 : j->n_prompt_ids > 0)
            return snprintf(err, errlen, "prompt: must be empty in a chat job (a job has prompt or messages)"), -1;
        if (!w->tc) return snprintf(err, errlen, "messages: chat jobs need a tokenizer: %s", w->tc_err), -1;
        if (textcodec_encode_messages(w->tc, j->messages, j->n_messages, j->thinking, prompt, n_prompt, err, errlen))
            return -1;
    } else if (j->thinking) {
        return snprintf(err, errlen, "thinking: set on a job without messages (it applies to chat jobs)"), -1;
    } else if (j->prompt_is_text) {
        if (j->prompt_text_len == 0) return snprintf(err, errlen, "prompt: empty"), -1;
        if (!w->tc) return snprintf(err, errlen, "prompt: text prompts need a tokenizer: %s", w->tc_err), -1;
        char e2[200] = "";
        if (textcodec_encode(w->tc, j->prompt_text, j->prompt_text_len, prompt, n_prompt, e2, sizeof(e2)))
            return snprintf(err, errlen, "prompt: cannot tokenize: %s", e2), -1;
        if (*n_prompt == 0) return snprintf(err, errlen, "prompt: tokenizes to no tokens"), -1;
    } else {
        if (j->n_prompt_ids == 0) return snprintf(err, errlen, "prompt: empty token list"), -1;
        for (int i = 0; i < j->n_prompt_ids; i++)
            if (j->prompt_ids[i] < 0 || j->prompt_ids[i] >= vocab)
                return snprintf(err, errlen, "prompt: token id %d at %d outside the vocabulary [0, %d)",
                                (int)j->prompt_ids[i], i, vocab),
                       -1;
        *prompt = malloc((size_t)j->n_prompt_ids * sizeof(int32_t));
        if (!*prompt) abort();
        memcpy(*prompt, j->prompt_ids, (size_t)j->n_prompt_ids * sizeof(int32_t));
        *n_prompt = j->n_prompt_ids;
    }
    int lim = w->max_tokens_limit > 0 && w->max_tokens_limit < ctx ? w->max_tokens_limit : ctx;
    if (j->max_tokens < 1 || j->max_tokens > lim)
        return snprintf(err, errlen, "max_tokens: %d outside [1, %d]", (int)j->max_tokens, lim), -1;
    if (*n_prompt >= ctx)
        return snprintf(err, errlen, "prompt: %d tokens, longer than the model context %d", *n_prompt, ctx), -1;
    if ((int64_t)*n_prompt + j->max_tokens > ctx)
        return snprintf(err, errlen, "max_tokens: prompt %d + max_tokens %d exceed the model context %d", *n_prompt,
                        (int)j->max_tokens, ctx),
               -1;
    if (!isfinite(j->temperature) || j->temperature < 0 || j->temperature > 100)
        return snprintf(err, errlen, "temperature: %g outside [0, 100]", (double)j->temperature), -1;
    if (!isfinite(j->top_p) || j->top_p <= 0 || j->top_p > 1)
        return snprintf(err, errlen, "top_p: %g outside (0, 1]", (double)j->top_p), -1;
    if (j->top_k < 0) return snprintf(err, errlen, "top_k: %d is negative", (int)j->top_k), -1;
    if (!isfinite(j->min_p) || j->min_p < 0 || j->min_p > 1)
        return snprintf(err, errlen, "min_p: %g outside [0, 1]", (double)j->min_p), -1;
    if (!isfinite(j->repetition_penalty) || j->repetition_penalty <= 0 || j->repetition_penalty > 100)
        return snprintf(err, errlen, "repetition_penalty: %g outside (0, 100]", (double)j->repetition_penalty), -1;
    for (int i = 0; i < j->n_stop; i++)
        if (j->stop_len[i] == 0) return snprintf(err, errlen, "stop[%d]: empty string", i), -1;
    if (j->n_stop > 0 && !w->tc)
        return snprintf(err, errlen, "stop: stop strings need a tokenizer (use stop_token_ids): %s", w->tc_err), -1;
    for (int i = 0; i < j->n_stop_ids; i++)
        if (j->stop_ids[i] < 0 || j->stop_ids[i] >= vocab)
            return snprintf(err, errlen, "stop_token_ids[%d]: %d outside the vocabulary [0, %d)", i,
                            (int)j->stop_ids[i], vocab),
                   -1;
    if (j->has_deadline && j->deadline_ms <= 0)
        return snprintf(err, errlen, "deadline_ms: %lld is not a Unix time in ms", (long long)j->deadline_ms), -1;
    if (j->reply_topic && !topic_name_ok(j->reply_topic))
        return snprintf(err, errlen, "reply_topic: '%.64s' is not a valid topic name", j->reply_topic), -1;
    return 0;
}

/* The id for a log line or an error header: at most 64 bytes, and an id that is not valid UTF-8 or
 * holds a NUL with every byte outside printable ASCII written as \xNN. */
static const char *printable_id(const sl_job *j, char *buf, size_t cap) {
    size_t n = j->id_len < 64 ? j->id_len : 64;
    if (!memchr(j->id, 0, j->id_len) && sl_utf8_valid(j->id, j->id_len)) {
        while (n < j->id_len && n > 0 && ((unsigned char)j->id[n] & 0xC0) == 0x80) n--;   /* whole characters */
        snprintf(buf, cap, "%.*s", (int)n, j->id);
        return buf;
    }
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)j->id[i];
        o += (size_t)(c >= 0x20 && c < 0x7f && c != '\\' ? snprintf(buf + o, cap - o, "%c", c)
                                                          : snprintf(buf + o, cap - o, "\\x%02x", c));
    }
    buf[o] = 0;
    return buf;
}

/* FNV-1a 64 of the id, top bit cleared: a recomputed job samples the same tokens. */
static uint64_t seed_from_id(const char *id) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h & 0x7fffffffffffffffull;
}

// ---------------------------------------------------------------- consume

void wj_on_message(worker *w, rd_kafka_message_t *m) {
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            wlog(w, L_WARN, "consumer: %s", rd_kafka_message_errstr(m));
            wk_consumer_error(w, m);
        }
        return;
    }
    if (w->draining) return;   /* fetched before the pause: left for the next owner (offset not stored) */
    atomic_fetch_add(&w->m.consumed, 1);
    char err[1024];
    if (!m->payload || m->len == 0) {
        dlq(w, m, "empty message value (null or 0 bytes)", "framing");
        return;
    }
    if ((int64_t)(m->len + m->key_len) > w->max_bytes) {
        snprintf(err, sizeof(err), "message of %zu bytes (key %zu + value %zu) exceeds input.max_bytes=%lld",
                 m->key_len + m->len, m->key_len, m->len, (long long)w->max_bytes);
        dlq(w, m, err, "size");
        return;
    }
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    if (codec_unframe(m->payload, m->len, w->framing, &pl, &plen, &sid, err, sizeof(err))) {
        dlq(w, m, err, "framing");
        return;
    }
    if (sid >= 0 && w->n_schema_ids > 0) {
        int ok = 0;
        for (int i = 0; i < w->n_schema_ids; i++) ok |= w->schema_ids[i] == sid;
        if (!ok) {
            snprintf(err, sizeof(err), "schema id %d is not in input.schema_ids", (int)sid);
            dlq(w, m, err, "schema");
            return;
        }
    }
    /* with a registry, a framed job's schema id names its writer schema (fetched once, then cached; a
     * registry that fails sends the job to the DLQ rather than holding the partition) */
    sl_job job;
    sl_job_resolver *res = NULL;
    if (w->registry && sid >= 0 && registry_job_resolver(w->registry, sid, &res, err, sizeof(err)) != REG_OK) {
        dlq(w, m, err, "schema");
        return;
    }
    if (res ? codec_decode_job_resolved(w->codec, res, pl, plen, &job, err, sizeof(err))
            : codec_decode_job(w->codec, pl, plen, &job, err, sizeof(err))) {
        dlq(w, m, err, "decode");
        return;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    char verr[400];
    if (wj_validate(w, &job, &prompt, &n_prompt, verr, sizeof(verr))) {
        char shown[4 * 64 + 1];
        snprintf(err, sizeof(err), "invalid job '%s': %s", printable_id(&job, shown, sizeof(shown)), verr);
        free(prompt);
        job_free(&job);
        dlq(w, m, err, "validation");
        return;
    }
    /* one job id, one job: the same payload again while it is here follows the first record; another
     * payload under the id is a conflict (the DLQ says so) */
    uint64_t digest = fnv1a(pl, plen);
    job_rec *lead = ids_find(w, &job);
    if (lead && lead->digest != digest) {
        char shown[4 * 64 + 1];
        snprintf(err, sizeof(err), "job id '%s' is already in progress with a different payload (digest %s, this "
                 "message's %016llx)", printable_id(&job, shown, sizeof(shown)), lead->digest_hex,
                 (unsigned long long)digest);
        free(prompt);
        job_free(&job);
        dlq(w, m, err, "conflict");
        return;
    }
    job_rec *r = rec_new(w, m);
    r->job = job;
    r->schema_id = sid;
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    r->seed = job.has_seed ? (uint64_t)job.seed : seed_from_id(job.id);
    r->has_text = w->tc != NULL;
    if (r->has_text) textdec_init(&r->text, w->tc);
    r->digest = digest;
    snprintf(r->digest_hex, sizeof(r->digest_hex), "%016llx", (unsigned long long)digest);
    if (lead && lead->t_delivered > 0 && lead->result) {   /* its Result is out already */
        r->tokens_out = lead->tokens_out;
        reemit(w, r, (char *)xmemdup(lead->result, lead->result_len), lead->result_len);
        return;
    }
    /* kept while the job may still go to the DLQ (a conflict that only Redis knows of) */
    r->raw = xmemdup(m->payload, m->len);
    r->raw_len = m->len;
    if (m->key) {
        r->raw_key = xmemdup(m->key, m->key_len);
        r->raw_key_len = m->key_len;
    }
    if (lead) {
        r->leader = lead;   /* stays JS_PARKED, not in flight, until the leader's Result is delivered */
        r->next_follower = lead->followers;
        lead->followers = r;
        wlog(w, L_DEBUG, "job %s is already here: waiting for its result", lead->job.id);
        return;
    }
    ids_add(w, r);
    set_state(w, r, JS_CLAIM);
    r->in_claimq = 1;
    push(&w->claimq, &w->n_claimq, &w->cap_claimq, r);
}

// ---------------------------------------------------------------- results

static const sl_result_status STATUS_OF[] = {RS_OK, RS_OK, RS_ERROR, RS_EXPIRED, RS_CANCELLED};
static const sl_result_finish FINISH_OF[] = {RF_STOP, RF_LENGTH, RF_ERROR, RF_EXPIRED, RF_CANCELLED};

/* The fields every Result of this record carries: id, engine timing, worker, model, echoed metadata. */
static sl_result result_of(const worker *w, const job_rec *r) {
    sl_result res = {0};
    res.id = r->job.id;
    res.ttft_ms = r->ttft_ms;
    res.decode_ms = r->decode_ms;
    res.worker = w->worker_id;
    res.model = w->info->model_id;
    res.meta_k = (const char *const *)r->job.meta_k;
    res.meta_v = (const char *const *)r->job.meta_v;
    res.n_meta = r->job.n_meta;
    return res;
}

/* Encode to bare Avro; a schema-valid record cannot fail, so failing is a bug: do not lose the job silently. */
static void encode_result(worker *w, const sl_result *res, uint8_t **out, size_t *outlen) {
    char err[256];
    if (codec_encode_result(w->codec, res, -1, out, outlen, err, sizeof(err))) {
        wlog(w, L_ERROR, "%s", err);
        abort();
    }
}

/* The full Result (kept for Redis) is larger than Kafka takes (the producer's message.max.bytes, or
 * the broker's/topic's limit): produce a small ERROR Result that says where the full one is. */
static void oversize_result(worker *w, job_rec *r) {
    if (r->small) return;
    char msg[512];
    snprintf(msg, sizeof(msg),
             "result of %zu bytes is larger than the Kafka message limit; the full result is in Redis at "
             "%sresult:%.256s (for redis.ttl_s)",
             r->result_len, cfg_get(w->cfg, "redis.prefix"), r->job.id);
    sl_result res = result_of(w, r);
    res.status = RS_ERROR;
    res.finish = RF_ERROR;
    res.error = msg;
    res.prompt_tokens = r->n_prompt;
    res.completion_tokens = r->tokens_out;
    res.queue_ms = r->t_admit > 0 ? r->t_admit - r->t_recv : 0;
    encode_result(w, &res, &r->small, &r->small_len);
    wlog(w, L_WARN, "job %s: %s", r->job.id, msg);
}

/* Produce the record's Result; over the producer's message limit, the small ERROR Result instead. */
static void produce_result(worker *w, job_rec *r) {
    if (wk_produce_result(w, r) == WK_TOO_LARGE) {
        oversize_result(w, r);
        wk_produce_result(w, r);
    }
}

/* Encode the record's Result, keep the bare bytes for Redis, produce it. */
static void finish_job(worker *w, job_rec *r, sl_finish_reason reason, const char *error, int n_prompt) {
    sl_result res = result_of(w, r);
    if ((unsigned)reason > SL_FINISH_CANCELLED) reason = SL_FINISH_ERROR;
    res.status = STATUS_OF[reason];
    res.finish = FINISH_OF[reason];
    res.tokens = r->tokens;
    res.n_tokens = r->n_tokens;
    if (r->has_text) {
        if (r->stop_hit) textdec_drop_pending(&r->text);
        if (textdec_finish(&r->text)) abort();   /* also makes "" for no tokens */
        res.text = r->text.text;
        res.text_len = r->text.len;
        if (r->job.n_messages > 0) {   /* a chat job: content / reasoning_content as DeepSeek's API gives them */
            sl_chat_answer a;
            textcodec_chat_answer(w->tc, r->job.thinking, r->tokens, r->n_tokens, res.text, res.text_len, &a);
            res.content = a.content, res.content_len = a.content_len;
            res.reasoning_content = a.reasoning, res.reasoning_content_len = a.reasoning_len;
        }
    }
    if (r->job.logprobs) {
        res.logprobs = r->logprobs;
        res.n_logprobs = r->n_tokens;
    }
    res.error = reason == SL_FINISH_ERROR ? (error && error[0] ? error : "engine error") : NULL;
    res.prompt_tokens = n_prompt;
    res.completion_tokens = r->n_tokens;
    res.queue_ms = r->t_admit > 0 ? r->t_admit - r->t_recv : now_ms() - r->t_recv;
    encode_result(w, &res, &r->result, &r->result_len);
    r->failed = reason == SL_FINISH_ERROR;
    r->tokens_out = r->n_tokens;
    r->t_finished = now_ms();
    if (reason == SL_FINISH_CANCELLED) atomic_fetch_add(&w->m.cancelled, 1);
    if (reason == SL_FINISH_EXPIRED) atomic_fetch_add(&w->m.expired, 1);
    if (reason == SL_FINISH_ERROR) atomic_fetch_add(&w->m.errors, 1);
    if (r->job.stream) wk_produce_chunk(w, r, 1);
    set_state(w, r, JS_PRODUCING);
    produce_result(w, r);
}

static void admit(worker *w, job_rec *r) {
    free_raw(r);
    r->t_admit = now_ms();
    if (r->job.has_deadline && wall_ms() >= r->job.deadline_ms) {
        finish_job(w, r, SL_FINISH_EXPIRED, NULL, r->n_prompt);
        return;
    }
    eng_cmd c = {0};
    c.kind = ECMD_SUBMIT;
    c.tag = r;
    c.prompt = malloc((size_t)r->n_prompt * sizeof(int32_t));
    if (!c.prompt) abort();
    memcpy(c.prompt, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    c.n_prompt = r->n_prompt;
    c.s.temperature = r->job.temperature;
    c.s.top_k = r->job.top_k;
    c.s.top_p = r->job.top_p;
    c.s.min_p = r->job.min_p;
    c.s.repetition_penalty = r->job.repetition_penalty;
    c.s.seed = r->seed;
    c.s.max_tokens = r->job.max_tokens;
    if (r->job.n_stop_ids > 0) {
        int32_t *ids = malloc((size_t)r->job.n_stop_ids * sizeof(int32_t));
        if (!ids) abort();
        memcpy(ids, r->job.stop_ids, (size_t)r->job.n_stop_ids * sizeof(int32_t));
        c.s.stop_ids = ids;
        c.s.n_stop_ids = r->job.n_stop_ids;
    }
    c.s.ignore_eos = r->job.ignore_eos;
    c.s.logprobs = r->job.logprobs;
    if (w->n_cmds == w->cap_cmds) {
        int cap = w->cap_cmds ? w->cap_cmds * 2 : 256;
        eng_cmd *p = realloc(w->cmds, (size_t)cap * sizeof(*p));
        if (!p) abort();
        w->cmds = p;
        w->cap_cmds = cap;
    }
    w->cmds[w->n_cmds++] = c;
    r->in_engine = 1;
    set_state(w, r, JS_RUNNING);
}

static void engine_finish(worker *w, job_rec *r, sl_finish_reason reason) {
    if (!r->in_engine || r->finish_sent) return;
    eng_cmd c = {0};
    c.kind = ECMD_FINISH;
    c.tag = r;
    c.reason = reason;
    if (eng_thread_send(w->eng, &c, 1)) abort();
    r->finish_sent = 1;
    r->forced = reason;
}

void wj_send_cmds(worker *w) {
    if (w->n_cmds == 0) return;
    if (eng_thread_send(w->eng, w->cmds, w->n_cmds)) abort();
    w->n_cmds = 0;
}

static void reemit(worker *w, job_rec *r, char *bytes, size_t len) {
    free_raw(r);
    r->kind = JK_REEMIT;
    r->result = (uint8_t *)bytes;
    r->result_len = len;
    atomic_fetch_add(&w->m.reemitted, 1);
    set_state(w, r, JS_PRODUCING);
    produce_result(w, r);
}

// ---------------------------------------------------------------- claim

void wj_claim_round(worker *w, int parked_only) {
    job_rec **batch = NULL;
    int n = 0, cap = 0;
    if (parked_only) {
        double now = now_ms();
        for (job_rec *r = w->head; r; r = r->next)
            if (!r->abandoned && r->kind == JK_JOB && r->state == JS_PARKED && !r->leader && r->next_check <= now)
                push(&batch, &n, &cap, r);
    } else {
        batch = w->claimq;
        n = w->n_claimq;
        w->claimq = NULL;
        w->n_claimq = w->cap_claimq = 0;
    }
    if (n == 0) {
        free(batch);
        return;
    }
    redis_claim *c = calloc((size_t)n, sizeof(*c));
    if (!c) abort();
    for (int i = 0; i < n; i++) {
        c[i].id = batch[i]->job.id;
        c[i].partition = batch[i]->partition;
        c[i].offset = batch[i]->offset;
        c[i].digest = batch[i]->digest_hex;
    }
    if (redis_claim_batch(w->redis, c, n) != 0) atomic_fetch_add(&w->m.redis_retries, 1);
    for (int i = 0; i < n; i++) {
        job_rec *r = batch[i];
        r->in_claimq = 0;
        if (r->abandoned) {
            free(c[i].result);
            rec_maybe_free(w, r);
            continue;
        }
        switch (c[i].status) {
        case RC_DONE:
            reemit(w, r, c[i].result, c[i].result_len);
            break;
        case RC_CONFLICT: {
            char shown[4 * 64 + 1], e[512];
            snprintf(e, sizeof(e), "job id '%s' is already known with a different payload (digest %s, this message's %s)",
                     printable_id(&r->job, shown, sizeof(shown)), c[i].holder, r->digest_hex);
            rec_to_dlq(w, r, e, "conflict");
            break;
        }
        case RC_POISON: {   /* its workers kept dying while running it: not run again */
            char shown[4 * 64 + 1], e[512];
            snprintf(e, sizeof(e), "job '%s' was being run by a worker that died, %s times (worker.max_job_crashes "
                     "%lld): not run again", printable_id(&r->job, shown, sizeof(shown)), c[i].holder,
                     (long long)cfg_int(w->cfg, "worker.max_job_crashes"));
            rec_to_dlq(w, r, e, "crashes");
            break;
        }
        case RC_PARKED:
            if (r->state != JS_PARKED) {
                atomic_fetch_add(&w->m.parked, 1);
                wlog(w, L_DEBUG, "job %s is held by %s: parked", r->job.id, c[i].holder);
            }
            set_state(w, r, JS_PARKED);
            r->next_check = now_ms() + (double)cfg_int(w->cfg, "worker.parked_recheck_ms");
            break;
        case RC_CLAIMED:
            r->claimed = 1;
            r->t_claimed = now_ms();
            admit(w, r);
            break;
        default:
            /* Redis unreachable: run the job anyway; the done write is retried before the offset moves */
            r->t_claimed = now_ms();
            admit(w, r);
            break;
        }
    }
    free(c);
    free(batch);
}

// ---------------------------------------------------------------- engine events

static void on_token(worker *w, job_rec *r, const eng_event *ev) {
    if (r->abandoned || r->stop_hit) return;
    if (r->n_tokens == r->cap_tokens) {
        int cap = r->cap_tokens ? r->cap_tokens * 2 : 16;
        int32_t *t = realloc(r->tokens, (size_t)cap * sizeof(int32_t));
        float *l = realloc(r->logprobs, (size_t)cap * sizeof(float));
        if (!t || !l) abort();
        r->tokens = t;
        r->logprobs = l;
        r->cap_tokens = cap;
    }
    r->tokens[r->n_tokens] = ev->token;
    r->logprobs[r->n_tokens] = ev->logprob;
    r->n_tokens++;
    atomic_fetch_add(&w->m.tokens, 1);
    if (r->has_text) {
        size_t before = r->text.len;
        if (textdec_push(&r->text, ev->token)) abort();
        if (r->job.n_stop > 0) {
            long at = stop_find(r->text.text, r->text.len, before, r->job.stop, r->job.stop_len, r->job.n_stop);
            if (at >= 0) {
                r->text.len = (size_t)at;
                r->text.text[at] = 0;
                textdec_drop_pending(&r->text);
                if (r->chunk_text_sent > r->text.len) r->chunk_text_sent = r->text.len;
                r->stop_hit = 1;
                engine_finish(w, r, SL_FINISH_STOP);
            }
        }
    }
    if (r->job.stream) wk_produce_chunk(w, r, 0);
}

void wj_engine_events(worker *w) {
    eng_event *evs;
    int n = eng_thread_take(w->eng, &evs);
    for (int i = 0; i < n; i++) {
        job_rec *r = evs[i].tag;
        if (evs[i].kind == EEV_TOKEN) {
            on_token(w, r, &evs[i]);
            continue;
        }
        r->in_engine = 0;
        if (r->abandoned) {
            rec_maybe_free(w, r);
            continue;
        }
        r->ttft_ms = evs[i].ttft_ms;
        r->decode_ms = evs[i].decode_ms;
        sl_finish_reason reason = r->stop_hit ? SL_FINISH_STOP : evs[i].reason;
        if (evs[i].reason == SL_FINISH_ERROR) wlog(w, L_WARN, "job %s: engine error: %s", r->job.id, evs[i].error);
        finish_job(w, r, reason, evs[i].error, evs[i].n_prompt ? evs[i].n_prompt : r->n_prompt);
    }
    free(evs);
}

// ---------------------------------------------------------------- delivery, done, offsets

void wj_on_delivery(worker *w, job_rec *r, rd_kafka_resp_err_t err) {
    r->in_producer = 0;
    if (r->abandoned) {
        rec_maybe_free(w, r);
        return;
    }
    if (err) {
        atomic_fetch_add(&w->m.produce_retries, 1);
        if (r->kind == JK_DLQ) {
            /* the record keeps the message: write it again from the timers; the offset waits */
            wk_dlq_failed(w, r, err);
            return;
        }
        if (!r->small && (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)) {
            oversize_result(w, r);   /* the broker's (or topic's) limit is below ours */
        } else if (!r->reply_error && r->job.reply_topic && r->job.reply_topic[0] && wk_reply_topic_failed(err)) {
            /* a reply topic that does not exist (or may not be written) will not start working by
             * itself: deliver the result to the default topic with the reason */
            wk_reply_fallback(w, r, err);
        } else {
            wlog(w, L_WARN, "result delivery for %s failed: %s; producing again", r->job.id, rd_kafka_err2str(err));
        }
        produce_result(w, r);
        return;
    }
    if (r->kind == JK_JOB) {
        r->t_delivered = now_ms();
        atomic_fetch_add(&w->m.results, 1);
        serve_followers(w, r);
        r->state = JS_DONEWRITE;
        r->in_doneq = 1;
        push(&w->doneq, &w->n_doneq, &w->cap_doneq, r);
        return;
    }
    rec_release(w, r);
}

void wj_flush_done(worker *w) {
    while (w->n_doneq > 0) {
        if (!redis_connected(w->redis) && now_ms() < w->next_redis_retry) return;
        int n = w->n_doneq < 512 ? w->n_doneq : 512;
        redis_done *d = calloc((size_t)n, sizeof(*d));
        if (!d) abort();
        for (int i = 0; i < n; i++) {
            job_rec *r = w->doneq[i];
            d[i].id = r->job.id;
            d[i].failed = r->failed;
            d[i].result = r->result;
            d[i].result_len = r->result_len;
            d[i].tokens_out = r->tokens_out;
            d[i].digest = r->digest_hex[0] ? r->digest_hex : NULL;
        }
        int rc = redis_done_batch(w->redis, d, n);
        int kept = 0;
        for (int i = 0; i < n; i++) {
            job_rec *r = w->doneq[i];
            if (r->abandoned) {
                r->in_doneq = 0;
                rec_maybe_free(w, r);
            } else if (d[i].status == RC_OK || d[i].status == RC_ALREADY) {
                r->in_doneq = 0;
                rec_release(w, r);
            } else {
                w->doneq[kept++] = r;   /* retried */
            }
        }
        free(d);
        memmove(w->doneq + kept, w->doneq + n, (size_t)(w->n_doneq - n) * sizeof(job_rec *));
        w->n_doneq -= n - kept;
        if (rc != 0 || kept > 0) {
            atomic_fetch_add(&w->m.redis_retries, 1);
            w->next_redis_retry = now_ms() + 250;
            return;
        }
    }
}

// ---------------------------------------------------------------- timers

static void cancel_sweep(worker *w) {
    int n = 0;
    for (job_rec *r = w->head; r; r = r->next) n += !r->abandoned && r->state == JS_RUNNING && !r->finish_sent;
    if (n == 0) return;
    job_rec **rs = malloc((size_t)n * sizeof(*rs));
    const char **ids = malloc((size_t)n * sizeof(*ids));
    uint8_t *cancelled = malloc((size_t)n);
    if (!rs || !ids || !cancelled) abort();
    int k = 0;
    int64_t wall = wall_ms();
    for (job_rec *r = w->head; r; r = r->next) {
        if (r->abandoned || r->state != JS_RUNNING || r->finish_sent) continue;
        if (r->job.has_deadline && wall >= r->job.deadline_ms) {
            engine_finish(w, r, SL_FINISH_EXPIRED);
            continue;
        }
        rs[k] = r;
        ids[k++] = r->job.id;
    }
    if (k > 0 && redis_cancel_sweep(w->redis, ids, k, cancelled) == 0) {
        for (int i = 0; i < k; i++)
            if (cancelled[i]) engine_finish(w, rs[i], SL_FINISH_CANCELLED);
    }
    free(rs);
    free(ids);
    free(cancelled);
}

static void renew_leases(worker *w) {
    int n = 0;
    for (job_rec *r = w->head; r; r = r->next) n += !r->abandoned && r->state == JS_RUNNING && r->claimed;
    if (n == 0) return;
    const char **ids = malloc((size_t)n * sizeof(*ids));
    int *st = malloc((size_t)n * sizeof(int));
    if (!ids || !st) abort();
    int k = 0;
    for (job_rec *r = w->head; r; r = r->next)
        if (!r->abandoned && r->state == JS_RUNNING && r->claimed) ids[k++] = r->job.id;
    if (redis_renew_batch(w->redis, ids, k, st) == 0)
        for (int i = 0; i < k; i++)
            if (st[i] == RC_LOST) wlog(w, L_WARN, "lease of job %s was taken over; finishing it anyway", ids[i]);
    free(ids);
    free(st);
}

static void heartbeat(worker *w) {
    char parts[1024] = "", seen[32], inflight[32];
    size_t off = 0;
    for (int i = 0; w->assigned && i < w->assigned->cnt && off + 16 < sizeof(parts); i++)
        off += (size_t)snprintf(parts + off, sizeof(parts) - off, "%s%d", i ? "," : "", w->assigned->elems[i].partition);
    snprintf(seen, sizeof(seen), "%lld", (long long)wall_ms());
    snprintf(inflight, sizeof(inflight), "%lld", (long long)w->n_inflight);
    const char *fv[] = {"partitions", parts, "topic", w->topic_jobs, "model", w->info->model_id,
                        "last_seen_ms", seen, "inflight", inflight, "state", w->draining ? "draining" : "running"};
    redis_heartbeat(w->redis, fv, 6, 3 * cfg_int(w->cfg, "worker.heartbeat_ms"));
}

void wj_timers(worker *w) {
    double now = now_ms();
    if (now >= w->next_sweep) {
        cancel_sweep(w);
        w->next_sweep = now + (double)cfg_int(w->cfg, "worker.cancel_sweep_ms");
    }
    if (now >= w->next_renew) {
        renew_leases(w);
        w->next_renew = now + (double)cfg_int(w->cfg, "lease.renew_ms");
    }
    if (now >= w->next_parked) {
        wj_claim_round(w, 1);
        w->next_parked = now + (double)cfg_int(w->cfg, "worker.parked_recheck_ms") / 4;
    }
    wk_topic_check(w);
    if (now >= w->next_heartbeat) {
        heartbeat(w);
        w->next_heartbeat = now + (double)cfg_int(w->cfg, "worker.heartbeat_ms");
    }
    /* results and DLQ writes that failed (a produce call, or a DLQ delivery): try again */
    for (job_rec *r = w->n_produce_failed > 0 ? w->head : NULL; r; r = r->next)
        if (!r->abandoned && r->state == JS_PRODUCING && !r->in_producer && r->next_check <= now &&
            r->produce_tries > 0) {
            if (r->kind == JK_DLQ) wk_produce_dlq(w, r);
            else produce_result(w, r);
        }
    /* backpressure */
    int64_t pending = offsets_pending(&w->offs);
    atomic_store(&w->m.inflight, w->n_inflight);
    atomic_store(&w->m.pending, pending);
    if (w->draining) {
        wj_drop_parked(w);   /* parked since the drain began (a claim round, a follower whose leader left) */
        return;
    }
    int64_t maxin = w->max_inflight, maxp = w->max_pending;
    if (!w->paused && (w->n_inflight >= maxin || pending >= maxp)) {
        wlog(w, L_DEBUG, "pausing: %lld in flight, %lld pending", (long long)w->n_inflight, (long long)pending);
        wk_pause_all(w, 1);
    } else if (w->paused && w->n_inflight < maxin / 2 + 1 && pending < maxp / 2 + 1) {
        wk_pause_all(w, 0);
    }
}

// ---------------------------------------------------------------- hand back (revoke, shutdown)

/* Give a record up: its offset is not stored, its Redis claim is released so the next owner can take
 * the job at once, and the engine stops working on it. */
static void hand_back(worker *w, job_rec *r, char ***rel, int *n_rel) {
    if (r->abandoned) return;
    unfollow(r);
    leader_gone(w, r);
    if (r->claimed && (r->state == JS_CLAIM || r->state == JS_RUNNING)) {
        *rel = realloc(*rel, (size_t)(*n_rel + 1) * sizeof(char *));
        if (!*rel) abort();
        (*rel)[(*n_rel)++] = strdup(r->job.id);
    }
    if (r->in_engine) engine_finish(w, r, SL_FINISH_CANCELLED);
    atomic_fetch_add(&w->m.handed_back, 1);
    set_state(w, r, JS_PARKED);
    r->abandoned = 1;
    rec_maybe_free(w, r);
}

static void release_claims(worker *w, char **rel, int n_rel) {
    if (n_rel > 0 && redis_release_batch(w->redis, (const char *const *)rel, n_rel) != 0)
        wlog(w, L_WARN, "could not release %d claims (Redis down); their leases expire", n_rel);
    for (int i = 0; i < n_rel; i++) free(rel[i]);
    free(rel);
}

void wj_revoke(worker *w, const rd_kafka_topic_partition_list_t *parts, int lost) {
    wj_send_cmds(w);   /* submits before any finish that hand_back sends */
    if (!lost) {
        /* finish what is finished: delivery reports -> Redis done -> offsets */
        rd_kafka_flush(w->producer, 2000);
        wj_flush_done(w);
        /* stored now; librdkafka commits a revoked partition's stored offset itself when it is
         * unassigned (enable.auto.commit) — a synchronous commit here would block forever on a
         * lost coordinator */
        wk_flush_offsets(w);
    }
    char **rel = NULL;
    int n_rel = 0;
    for (int i = 0; i < parts->cnt; i++) {
        if (strcmp(parts->elems[i].topic, w->topic_jobs) != 0) continue;
        int32_t p = parts->elems[i].partition;
        for (job_rec *r = w->head, *nx; r; r = nx) {
            nx = r->next;
            if (r->partition != p) continue;
            /* A lost partition (the session timed out: brokers unreachable) takes no work with it: a job already
             * computing or delivering goes on to its Result and its done mark in Redis. Its offset is no longer ours
             * to store (the tracker goes below); whoever holds the partition now parks on the claim and re-emits
             * the stored Result, and this worker, if it gets the partition back, absorbs the re-delivery. */
            if (lost && r->kind == JK_JOB && !r->abandoned &&
                (r->state == JS_RUNNING || r->state == JS_PRODUCING || r->state == JS_DONEWRITE))
                continue;
            hand_back(w, r, &rel, &n_rel);
        }
        offsets_drop(&w->offs, p);
        if (p < w->n_store_off) w->store_off[p] = -1;
    }
    wj_send_cmds(w);
    release_claims(w, rel, n_rel);
}

void wj_drop_parked(worker *w) {
    char **rel = NULL;
    int n_rel = 0;
    for (job_rec *r = w->head, *nx; r; r = nx) {
        nx = r->next;
        if (!r->abandoned && r->kind == JK_JOB && r->state == JS_PARKED) hand_back(w, r, &rel, &n_rel);
    }
    release_claims(w, rel, n_rel);
}

void wj_hand_back_all(worker *w) {
    wj_send_cmds(w);
    char **rel = NULL;
    int n_rel = 0;
    for (job_rec *r = w->head, *nx; r; r = nx) {
        nx = r->next;
        hand_back(w, r, &rel, &n_rel);
    }
    wj_send_cmds(w);
    release_claims(w, rel, n_rel);
}

void wj_free_all(worker *w) {
    for (job_rec *r = w->head; r; r = r->next) r->leader = r->followers = r->next_follower = NULL;
    free(w->ids);
    w->ids = NULL;
    w->ids_cap = w->n_ids = 0;
    for (job_rec *r = w->head; r; r = r->next) r->in_ids = 0;
    while (w->head) rec_free(w, w->head);
    free(w->claimq);
    free(w->doneq);
    for (int i = 0; i < w->n_cmds; i++) {
        free(w->cmds[i].prompt);
        free((void *)w->cmds[i].s.stop_ids);
    }
    free(w->cmds);
    w->claimq = NULL;
    w->doneq = NULL;
    w->cmds = NULL;
}
