/* sluice-submit — produce Jobs and wait for their Results; also an open-loop load generator.
 *
 *   sluice-submit --brokers HOST:PORT [options] [PROMPT...]
 *
 * Jobs come from the PROMPT arguments, else from --chat (one chat job per question: messages [system
 * (--system), user], thinking with --thinking), --file (one prompt per line), --jsonl (one Job as a
 * JSON object per line: the Avro field names; "prompt" a string or an array of ids, or "messages" and
 * "thinking" for a chat job), or stdin lines. Each result is printed as one JSON line, with "content" and
 * "reasoning_content" when the Result has them (chat jobs). Exit status: 0 when every job got a result with status OK,
 * 1 otherwise (error results, timeout), 2 on bad usage.
 *
 * Load mode (--rate R --count N): N copies of --prompt at R jobs/s, open loop (send times fixed in
 * advance, never waiting for results); prints a per-second progress line and a latency report
 * (submit -> result, the engine's share from Result.timing, and the difference = added latency).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"
#include "schema_registry.h"
#include "schemas_gen.h"   /* SL_JOB_AVSC */

typedef struct {
    const char *brokers, *topic, *results, *framing, *prompt, *file, *jsonl, *report, *system, *registry;
    int schema_id, max_tokens, tokens_mode, count, timeout_s, quiet, stream, thinking;
    double rate, temperature;
    int64_t seed;
    int has_seed;
    char **kafka_kv;
    int n_kafka_kv;
    char **args;
    int n_args;
    char **chat;                     /* --chat questions */
    int n_chat;
} opts;

typedef struct {
    char id[96];
    uint8_t *val;
    size_t len;
    double t_send, t_recv;           /* monotonic ms */
    double engine_ms;
    int got, ok;
} job_slot;

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice-submit --brokers HOST:PORT [options] [PROMPT...]\n"
            "  --topic T            job topic (sluice.jobs)\n"
            "  --results T          result topic to wait on (sluice.results)\n"
            "  --framing F          confluent|bare (confluent)\n"
            "  --schema-id N        Confluent schema id written in front of each job (1)\n"
            "  --registry URL       register the Job schema (schemas/job.avsc) in this Confluent Schema Registry\n"
            "                       (http://host:port) under subject <topic>-value and write its id instead\n"
            "  --chat Q             a chat job asking Q (repeatable: one job each); prints content and\n"
            "                       reasoning_content.  --system S: system message;  --thinking: thinking mode\n"
            "  --file F             one prompt per line;  --jsonl F: one Job JSON object per line\n"
            "  --tokens             prompts are comma-separated token ids, not text\n"
            "  --max-tokens N       (16)   --temperature T (0)   --seed S (none: derived from the id)\n"
            "  --stream             ask for TokenChunks too\n"
            "  --timeout S          give up waiting after S seconds (60)\n"
            "  --rate R --count N   load mode: N jobs of --prompt (\"hi\") at R jobs/s, open loop\n"
            "  --report FILE        load mode: write the report as JSON\n"
            "  -X key=value         librdkafka property for both clients\n"
            "  --quiet              do not print each result\n");
}

static int bad(const char *what, const char *v) {
    fprintf(stderr, "sluice-submit: bad %s '%s' (try --help)\n", what, v ? v : "");
    return 2;
}

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof(*o));
    o->topic = "sluice.jobs";
    o->results = "sluice.results";
    o->framing = "confluent";
    o->schema_id = 1;
    o->max_tokens = 16;
    o->timeout_s = 60;
    o->prompt = "hi";
    o->args = calloc((size_t)argc, sizeof(char *));
    o->kafka_kv = calloc((size_t)argc, sizeof(char *));
    o->chat = calloc((size_t)argc, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
#define NEEDV()                                     \
    do {                                            \
        if (!v) return bad("argument (missing value)", a); \
        i++;                                        \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--brokers")) { NEEDV(); o->brokers = v; }
        else if (!strcmp(a, "--topic")) { NEEDV(); o->topic = v; }
        else if (!strcmp(a, "--results")) { NEEDV(); o->results = v; }
        else if (!strcmp(a, "--framing")) {
            NEEDV();
            if (strcmp(v, "confluent") && strcmp(v, "bare")) return bad("--framing", v);
            o->framing = v;
        } else if (!strcmp(a, "--schema-id")) {
            NEEDV();
            o->schema_id = (int)strtol(v, &end, 10);
            if (*end || o->schema_id < 0) return bad("--schema-id", v);
        } else if (!strcmp(a, "--registry")) { NEEDV(); o->registry = v; }
        else if (!strcmp(a, "--file")) { NEEDV(); o->file = v; }
        else if (!strcmp(a, "--jsonl")) { NEEDV(); o->jsonl = v; }
        else if (!strcmp(a, "--report")) { NEEDV(); o->report = v; }
        else if (!strcmp(a, "--prompt")) { NEEDV(); o->prompt = v; }
        else if (!strcmp(a, "--chat")) { NEEDV(); o->chat[o->n_chat++] = (char *)v; }
        else if (!strcmp(a, "--system")) { NEEDV(); o->system = v; }
        else if (!strcmp(a, "--thinking")) o->thinking = 1;
        else if (!strcmp(a, "--tokens")) o->tokens_mode = 1;
        else if (!strcmp(a, "--stream")) o->stream = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--max-tokens")) {
            NEEDV();
            o->max_tokens = (int)strtol(v, &end, 10);
            if (*end || o->max_tokens < 1) return bad("--max-tokens", v);
        } else if (!strcmp(a, "--temperature")) {
            NEEDV();
            o->temperature = strtod(v, &end);
            if (*end || o->temperature < 0) return bad("--temperature", v);
        } else if (!strcmp(a, "--seed")) {
            NEEDV();
            o->seed = strtoll(v, &end, 10);
            if (*end) return bad("--seed", v);
            o->has_seed = 1;
        } else if (!strcmp(a, "--timeout")) {
            NEEDV();
            o->timeout_s = (int)strtol(v, &end, 10);
            if (*end || o->timeout_s < 1) return bad("--timeout", v);
        } else if (!strcmp(a, "--rate")) {
            NEEDV();
            o->rate = strtod(v, &end);
            if (*end || !(o->rate > 0)) return bad("--rate", v);
        } else if (!strcmp(a, "--count")) {
            NEEDV();
            o->count = (int)strtol(v, &end, 10);
            if (*end || o->count < 1) return bad("--count", v);
        } else if (!strcmp(a, "-X")) {
            NEEDV();
            if (!strchr(v, '=')) return bad("-X (want key=value)", v);
            o->kafka_kv[o->n_kafka_kv++] = (char *)v;
        } else if (a[0] == '-' && a[1] == '-') {
            return bad("option", a);
        } else {
            o->args[o->n_args++] = (char *)a;
        }
    }
    if (!o->brokers) return bad("usage: --brokers is required", "");
    if ((o->rate > 0) != (o->count > 0)) return bad("load mode: give both --rate and --count", "");
    if (o->registry && !strcmp(o->framing, "bare")) return bad("usage: --registry needs --framing confluent", "");
    if (o->n_chat > 0 && (o->n_args > 0 || o->file || o->jsonl || o->count > 0))
        return bad("usage: --chat jobs are sent alone (not with PROMPT, --file, --jsonl or --count)", "");
    if ((o->system || o->thinking) && o->n_chat == 0) return bad("usage: --system and --thinking go with --chat", "");
    return 0;
}

// ---------------------------------------------------------------- building jobs

static int parse_ids(const char *s, int32_t **ids, int *n) {
    *n = 0;
    *ids = malloc((strlen(s) / 2 + 2) * sizeof(int32_t));
    if (!*ids) return -1;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX) return -1;
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    return *n > 0 ? 0 : -1;
}

static void job_defaults(sl_job *j, const opts *o) {
    memset(j, 0, sizeof(*j));
    j->max_tokens = o->max_tokens;
    j->temperature = (float)o->temperature;
    j->top_p = 1.0f;
    j->repetition_penalty = 1.0f;
    j->has_seed = o->has_seed;
    j->seed = o->seed;
    j->stream = o->stream;
}

static void add_message(sl_job *j, const char *role, const char *content, size_t len, const char *reasoning,
                        size_t rlen) {
    sl_job_message *m = realloc(j->messages, (size_t)(j->n_messages + 1) * sizeof(*m));
    if (!m) abort();
    j->messages = m;
    m += j->n_messages++;
    m->role = strdup(role);
    m->content = malloc(len + 1);
    if (!m->role || !m->content) abort();
    memcpy(m->content, content, len);
    m->content[len] = 0;
    m->content_len = len;
    m->reasoning_content = NULL;
    m->reasoning_content_len = rlen;
    if (reasoning) {
        if (!(m->reasoning_content = malloc(rlen + 1))) abort();
        memcpy(m->reasoning_content, reasoning, rlen);
        m->reasoning_content[rlen] = 0;
    }
}

/* A chat job: [system,] user question; its prompt is empty. */
static void chat_job(sl_job *j, const opts *o, const char *question) {
    j->prompt_is_text = 1;
    j->prompt_text = strdup("");
    if (o->system) add_message(j, "system", o->system, strlen(o->system), NULL, 0);
    add_message(j, "user", question, strlen(question), NULL, 0);
    j->thinking = o->thinking;
}

/* Fill a Job from a JSON object (the Avro field names). */
static int job_from_json(sl_job *j, json_t *obj, char *err, size_t errlen) {
    json_t *v;
    if ((v = json_object_get(obj, "id")) && json_is_string(v)) j->id = strdup(json_string_value(v));
    json_t *msgs = json_object_get(obj, "messages");
    if (msgs && !json_is_array(msgs)) {
        snprintf(err, errlen, "\"messages\" must be an array of {\"role\", \"content\", \"reasoning_content\"}");
        return -1;
    }
    for (size_t i = 0; msgs && i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i), *r = json_object_get(m, "role"), *c = json_object_get(m, "content"),
               *rc = json_object_get(m, "reasoning_content");
        if (!json_is_string(r) || !json_is_string(c) || (rc && !json_is_null(rc) && !json_is_string(rc))) {
            snprintf(err, errlen, "messages[%zu]: needs string \"role\" and \"content\" (and \"reasoning_content\" a "
                     "string or null)", i);
            return -1;
        }
        add_message(j, json_string_value(r), json_string_value(c), json_string_length(c),
                    json_is_string(rc) ? json_string_value(rc) : NULL, json_is_string(rc) ? json_string_length(rc) : 0);
    }
    if ((v = json_object_get(obj, "thinking"))) j->thinking = json_is_true(v);
    v = json_object_get(obj, "prompt");
    if (!v && j->n_messages > 0) {   /* a chat job: the prompt is empty */
        j->prompt_is_text = 1;
        j->prompt_text = strdup("");
    } else if (json_is_string(v)) {
        j->prompt_is_text = 1;
        j->prompt_text_len = json_string_length(v);
        j->prompt_text = malloc(j->prompt_text_len + 1);
        memcpy(j->prompt_text, json_string_value(v), j->prompt_text_len + 1);
    } else if (json_is_array(v)) {
        j->n_prompt_ids = (int)json_array_size(v);
        j->prompt_ids = malloc(((size_t)j->n_prompt_ids + 1) * sizeof(int32_t));
        for (int i = 0; i < j->n_prompt_ids; i++) j->prompt_ids[i] = (int32_t)json_integer_value(json_array_get(v, (size_t)i));
    } else {
        snprintf(err, errlen, "\"prompt\" must be a string or an array of token ids (or give \"messages\")");
        return -1;
    }
    if ((v = json_object_get(obj, "max_tokens"))) j->max_tokens = (int32_t)json_integer_value(v);
    if ((v = json_object_get(obj, "temperature"))) j->temperature = (float)json_number_value(v);
    if ((v = json_object_get(obj, "top_p"))) j->top_p = (float)json_number_value(v);
    if ((v = json_object_get(obj, "top_k"))) j->top_k = (int32_t)json_integer_value(v);
    if ((v = json_object_get(obj, "min_p"))) j->min_p = (float)json_number_value(v);
    if ((v = json_object_get(obj, "repetition_penalty"))) j->repetition_penalty = (float)json_number_value(v);
    if ((v = json_object_get(obj, "seed")) && json_is_integer(v)) j->has_seed = 1, j->seed = json_integer_value(v);
    if ((v = json_object_get(obj, "ignore_eos"))) j->ignore_eos = json_is_true(v);
    if ((v = json_object_get(obj, "logprobs"))) j->logprobs = json_is_true(v);
    if ((v = json_object_get(obj, "stream"))) j->stream = json_is_true(v);
    if ((v = json_object_get(obj, "priority"))) j->priority = (int32_t)json_integer_value(v);
    if ((v = json_object_get(obj, "deadline_ms")) && json_is_integer(v))
        j->has_deadline = 1, j->deadline_ms = json_integer_value(v);
    if ((v = json_object_get(obj, "reply_topic")) && json_is_string(v)) j->reply_topic = strdup(json_string_value(v));
    if ((v = json_object_get(obj, "tenant")) && json_is_string(v)) j->tenant = strdup(json_string_value(v));
    if ((v = json_object_get(obj, "stop")) && json_is_array(v)) {
        size_t n = json_array_size(v);
        j->stop = calloc(n + 1, sizeof(char *));
        j->stop_len = calloc(n + 1, sizeof(size_t));
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(v, i);
            if (!json_is_string(s)) continue;
            j->stop_len[j->n_stop] = json_string_length(s);
            j->stop[j->n_stop++] = strdup(json_string_value(s));
        }
    }
    if ((v = json_object_get(obj, "stop_token_ids")) && json_is_array(v)) {
        j->n_stop_ids = (int)json_array_size(v);
        j->stop_ids = malloc(((size_t)j->n_stop_ids + 1) * sizeof(int32_t));
        for (int i = 0; i < j->n_stop_ids; i++) j->stop_ids[i] = (int32_t)json_integer_value(json_array_get(v, (size_t)i));
    }
    if ((v = json_object_get(obj, "metadata")) && json_is_object(v)) {
        size_t n = json_object_size(v);
        j->meta_k = calloc(n + 1, sizeof(char *));
        j->meta_v = calloc(n + 1, sizeof(char *));
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (!json_is_string(x)) continue;
            j->meta_k[j->n_meta] = strdup(k);
            j->meta_v[j->n_meta++] = strdup(json_string_value(x));
        }
    }
    return 0;
}

// ---------------------------------------------------------------- id index

typedef struct {
    job_slot *slots;
    int n;
    int *table;                      /* open addressing, -1 = empty */
    int size;
} index_t;

static uint64_t fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void index_build(index_t *ix) {
    ix->size = 1;
    while (ix->size < 2 * ix->n + 2) ix->size *= 2;
    ix->table = malloc((size_t)ix->size * sizeof(int));
    for (int i = 0; i < ix->size; i++) ix->table[i] = -1;
    for (int i = 0; i < ix->n; i++) {
        uint64_t h = fnv(ix->slots[i].id) & (uint64_t)(ix->size - 1);
        while (ix->table[h] >= 0) h = (h + 1) & (uint64_t)(ix->size - 1);
        ix->table[h] = i;
    }
}

static int index_find(const index_t *ix, const char *id) {
    uint64_t h = fnv(id) & (uint64_t)(ix->size - 1);
    while (ix->table[h] >= 0) {
        if (!strcmp(ix->slots[ix->table[h]].id, id)) return ix->table[h];
        h = (h + 1) & (uint64_t)(ix->size - 1);
    }
    return -1;
}

// ---------------------------------------------------------------- results

typedef struct {
    const opts *o;
    rd_kafka_t *consumer;
    index_t *ix;
    sl_codec *codec;
    atomic_int received, failed;
    atomic_int stop;
} recv_ctx;

static void print_result(const sl_result *r) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "status", json_string(result_status_name(r->status)));
    json_object_set_new(o, "finish_reason", json_string(result_finish_name(r->finish)));
    json_t *t = json_array();
    for (int i = 0; i < r->n_tokens; i++) json_array_append_new(t, json_integer(r->tokens[i]));
    json_object_set_new(o, "tokens", t);
    json_object_set_new(o, "text", r->text ? json_stringn(r->text, r->text_len) : json_null());
    if (r->reasoning_content)
        json_object_set_new(o, "reasoning_content", json_stringn(r->reasoning_content, r->reasoning_content_len));
    if (r->content) json_object_set_new(o, "content", json_stringn(r->content, r->content_len));
    if (r->error) json_object_set_new(o, "error", json_string(r->error));
    json_object_set_new(o, "worker", json_string(r->worker));
    json_object_set_new(o, "queue_ms", json_real(r->queue_ms));
    json_object_set_new(o, "engine_ms", json_real(r->ttft_ms + r->decode_ms));
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(o);
}

static void *recv_main(void *arg) {
    recv_ctx *c = arg;
    while (!atomic_load(&c->stop)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->consumer, 100);
        if (!m) continue;
        double t = mono_ms();
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "sluice-submit: result consumer: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        const uint8_t *pl;
        size_t plen;
        int32_t sid;
        char err[256];
        sl_result_owned r;
        if (codec_unframe(m->payload, m->len, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) ||
            codec_decode_result(c->codec, pl, plen, &r, err, sizeof(err))) {
            fprintf(stderr, "sluice-submit: undecodable result at offset %lld: %s\n", (long long)m->offset, err);
            rd_kafka_message_destroy(m);
            continue;
        }
        int i = index_find(c->ix, r.r.id);
        if (i >= 0 && !c->ix->slots[i].got) {
            job_slot *s = &c->ix->slots[i];
            s->t_recv = t;
            s->engine_ms = r.r.ttft_ms + r.r.decode_ms;
            s->ok = r.r.status == RS_OK;
            s->got = 1;
            if (!s->ok) atomic_fetch_add(&c->failed, 1);
            if (!c->o->quiet) print_result(&r.r);
            atomic_fetch_add(&c->received, 1);
        }
        result_owned_free(&r);
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    /* -X goes to both clients; each warns about the other's properties */
    if (strcmp(fac, "CONFWARN") != 0 && level <= 4) fprintf(stderr, "sluice-submit: librdkafka %s: %s\n", fac, buf);
}

static rd_kafka_conf_t *base_conf(const opts *o) {
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(c, log_cb);
    rd_kafka_conf_set(c, "socket.nagle.disable", "true", NULL, 0);
    char err[256];
    if (rd_kafka_conf_set(c, "bootstrap.servers", o->brokers, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "sluice-submit: %s\n", err);
        exit(2);
    }
    for (int i = 0; i < o->n_kafka_kv; i++) {
        char *kv = strdup(o->kafka_kv[i]), *eq = strchr(kv, '=');
        *eq = 0;
        if (rd_kafka_conf_set(c, kv, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "sluice-submit: -X %s: %s\n", o->kafka_kv[i], err);
            exit(2);
        }
        free(kv);
    }
    return c;
}

/* Assign every partition of the result topic at its current end: we see only results from now on. */
static rd_kafka_t *result_consumer(const opts *o) {
    rd_kafka_conf_t *c = base_conf(o);
    char err[256], gid[64];
    snprintf(gid, sizeof(gid), "sluice-submit-%d", (int)getpid());
    rd_kafka_conf_set(c, "group.id", gid, err, sizeof(err));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", err, sizeof(err));
    rd_kafka_conf_set(c, "fetch.wait.max.ms", "1", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "sluice-submit: %s\n", err);
        exit(1);
    }
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, o->results, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, 10000);
    if (e || md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0) {
        fprintf(stderr, "sluice-submit: no metadata for result topic %s: %s\n", o->results,
                rd_kafka_err2str(e ? e : md->topics[0].err));
        exit(1);
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    for (int p = 0; p < md->topics[0].partition_cnt; p++) {
        int64_t lo, hi;
        e = rd_kafka_query_watermark_offsets(rk, o->results, p, &lo, &hi, 10000);
        if (e) {
            fprintf(stderr, "sluice-submit: watermarks of %s[%d]: %s\n", o->results, p, rd_kafka_err2str(e));
            exit(1);
        }
        rd_kafka_topic_partition_list_add(l, o->results, p)->offset = hi;
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    e = rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        fprintf(stderr, "sluice-submit: assign: %s\n", rd_kafka_err2str(e));
        exit(1);
    }
    return rk;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    if (n == 0) return NAN;
    int i = (int)ceil(p / 100.0 * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) fprintf(stderr, "sluice-submit: job delivery failed: %s\n", rd_kafka_err2str(m->err));
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    codec_install_allocator((size_t)256 << 20);
    sl_codec *codec, *rcodec;
    char err[512];
    if (codec_new(&codec, err, sizeof(err)) || codec_new(&rcodec, err, sizeof(err))) {
        fprintf(stderr, "sluice-submit: %s\n", err);
        return 1;
    }
    int32_t sid = strcmp(o.framing, "bare") ? o.schema_id : -1;
    if (o.registry) {   /* the registry's id for the Job schema, as Confluent's serializers do */
        sl_registry *reg = NULL;
        char subject[512];
        snprintf(subject, sizeof(subject), "%s-value", o.topic);
        int failed = registry_new(o.registry, 5000, &reg, err, sizeof(err)) ||
                     registry_register(reg, subject, SL_JOB_AVSC, &sid, err, sizeof(err));
        registry_free(reg);
        if (failed) {
            fprintf(stderr, "sluice-submit: %s\n", err);
            return 1;
        }
        if (!o.quiet) fprintf(stderr, "sluice-submit: Job schema registered under %s as id %d\n", subject, (int)sid);
    }

    /* ---- build and encode every job before anything is timed */
    job_slot *slots = NULL;
    int n = 0, cap = 0;
    char runid[32];
    snprintf(runid, sizeof(runid), "%lx%04x", (unsigned long)time(NULL), (unsigned)getpid() & 0xffff);
    FILE *in = NULL;
    int from_lines = 0;
    if (o.count > 0) {
    } else if (o.jsonl) {
        in = fopen(o.jsonl, "r");
    } else if (o.file) {
        in = fopen(o.file, "r");
        from_lines = 1;
    } else if (o.n_args == 0 && o.n_chat == 0) {
        in = stdin;
        from_lines = 1;
    }
    if ((o.jsonl || o.file) && !in) {
        fprintf(stderr, "sluice-submit: cannot open %s: %s\n", o.jsonl ? o.jsonl : o.file, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t lcap = 0;
    for (int k = 0;; k++) {
        sl_job j;
        job_defaults(&j, &o);
        if (o.count > 0) {
            if (k >= o.count) break;
            j.prompt_is_text = 1;
            j.prompt_text = strdup(o.prompt);
            j.prompt_text_len = strlen(o.prompt);
        } else if (o.n_chat > 0) {
            if (k >= o.n_chat) break;
            chat_job(&j, &o, o.chat[k]);
        } else if (!in) {
            if (k >= o.n_args) break;
            if (o.tokens_mode) {
                if (parse_ids(o.args[k], &j.prompt_ids, &j.n_prompt_ids)) return bad("token list", o.args[k]);
            } else {
                j.prompt_is_text = 1;
                j.prompt_text = strdup(o.args[k]);
                j.prompt_text_len = strlen(o.args[k]);
            }
        } else {
            ssize_t len = getline(&line, &lcap, in);
            if (len < 0) break;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (len == 0) {
                job_free(&j);
                continue;
            }
            if (from_lines && o.tokens_mode) {
                if (parse_ids(line, &j.prompt_ids, &j.n_prompt_ids)) return bad("token list", line);
            } else if (from_lines) {
                j.prompt_is_text = 1;
                j.prompt_text = strdup(line);
                j.prompt_text_len = (size_t)len;
            } else {
                json_error_t je;
                json_t *obj = json_loadb(line, (size_t)len, 0, &je);
                if (!obj || !json_is_object(obj) || job_from_json(&j, obj, err, sizeof(err))) {
                    fprintf(stderr, "sluice-submit: %s line %d: %s\n", o.jsonl, k + 1, obj ? err : je.text);
                    return 2;
                }
                json_decref(obj);
            }
        }
        if (!j.id) {
            char id[96];
            snprintf(id, sizeof(id), "%s-%d", runid, n);
            j.id = strdup(id);
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            slots = realloc(slots, (size_t)cap * sizeof(*slots));
            if (!slots) return 1;
        }
        job_slot *s = &slots[n];
        memset(s, 0, sizeof(*s));
        snprintf(s->id, sizeof(s->id), "%s", j.id);
        if (codec_encode_job(codec, &j, sid, &s->val, &s->len, err, sizeof(err))) {
            fprintf(stderr, "sluice-submit: %s\n", err);
            return 1;
        }
        job_free(&j);
        n++;
    }
    free(line);
    if (in && in != stdin) fclose(in);
    if (n == 0) {
        fprintf(stderr, "sluice-submit: no jobs to send\n");
        return 2;
    }
    index_t ix = {slots, n, NULL, 0};
    index_build(&ix);

    /* ---- clients */
    rd_kafka_t *cons = result_consumer(&o);
    rd_kafka_conf_t *pc = base_conf(&o);
    rd_kafka_conf_set(pc, "linger.ms", "1", err, sizeof(err));
    rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
    rd_kafka_t *prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof(err));
    if (!prod) {
        fprintf(stderr, "sluice-submit: %s\n", err);
        return 1;
    }
    recv_ctx rc_ = {.o = &o, .consumer = cons, .ix = &ix, .codec = rcodec};
    pthread_t th;
    pthread_create(&th, NULL, recv_main, &rc_);

    /* ---- send: open loop at --rate, or everything at once */
    double t0 = mono_ms(), last_report = t0;
    int sent = 0;
    while (sent < n) {
        double now = mono_ms();
        if (o.rate > 0) {
            double due = t0 + sent * 1000.0 / o.rate;
            if (due > now) {
                rd_kafka_poll(prod, 0);
                double wait = due - now;
                if (wait > 0.2) {
                    struct timespec ts = {0, (long)((wait > 5 ? 5 : wait - 0.1) * 1e6)};
                    nanosleep(&ts, NULL);
                }
                continue;
            }
            if (now - last_report >= 1000) {
                last_report = now;
                int got = atomic_load(&rc_.received);
                fprintf(stderr, "sluice-submit: t=%.0fs sent %d received %d outstanding %d\n", (now - t0) / 1000, sent,
                        got, sent - got);
            }
        }
        job_slot *s = &slots[sent];
        s->t_send = mono_ms();
        rd_kafka_resp_err_t e = rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(o.topic), RD_KAFKA_V_VALUE(s->val, s->len),
                                                  RD_KAFKA_V_KEY(s->id, strlen(s->id)), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(prod, 10);
            continue;
        }
        if (e) {
            fprintf(stderr, "sluice-submit: produce: %s\n", rd_kafka_err2str(e));
            return 1;
        }
        sent++;
        if ((sent & 63) == 0) rd_kafka_poll(prod, 0);
    }
    rd_kafka_flush(prod, 30000);
    double t_sent = mono_ms();

    /* ---- wait for results */
    double deadline = t_sent + o.timeout_s * 1000.0;
    while (atomic_load(&rc_.received) < n && mono_ms() < deadline) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
        double now = mono_ms();
        if (o.rate > 0 && now - last_report >= 1000) {
            last_report = now;
            int got = atomic_load(&rc_.received);
            fprintf(stderr, "sluice-submit: t=%.0fs sent %d received %d outstanding %d\n", (now - t0) / 1000, n, got,
                    n - got);
        }
    }
    double t_end = mono_ms();
    atomic_store(&rc_.stop, 1);
    pthread_join(th, NULL);
    int got = atomic_load(&rc_.received), failed = atomic_load(&rc_.failed);
    for (int i = 0, shown = 0; i < n && got < n; i++) {
        if (slots[i].got) continue;
        if (shown++ < 10) fprintf(stderr, "sluice-submit: no result for %s\n", slots[i].id);
        else {
            fprintf(stderr, "sluice-submit: ... %d jobs without a result in all\n", n - got);
            break;
        }
    }

    if (o.rate > 0 || o.report) {
        double *lat = malloc((size_t)n * sizeof(double)), *eng = malloc((size_t)n * sizeof(double)),
               *add = malloc((size_t)n * sizeof(double));
        int k = 0;
        double last_recv = t0;
        for (int i = 0; i < n; i++) {
            if (!slots[i].got) continue;
            lat[k] = slots[i].t_recv - slots[i].t_send;
            eng[k] = slots[i].engine_ms;
            add[k] = lat[k] - eng[k];
            if (slots[i].t_recv > last_recv) last_recv = slots[i].t_recv;
            k++;
        }
        qsort(lat, (size_t)k, sizeof(double), cmp_d);
        qsort(eng, (size_t)k, sizeof(double), cmp_d);
        qsort(add, (size_t)k, sizeof(double), cmp_d);
        double send_s = (t_sent - t0) / 1000, span_s = (last_recv - t0) / 1000;
        fprintf(stderr,
                "sluice-submit: %d jobs sent in %.2f s (%.0f/s offered), %d results (%d not OK) by %.2f s (%.0f/s)\n"
                "  latency submit->result ms: p50 %.2f p90 %.2f p99 %.2f max %.2f\n"
                "  engine time (Result.timing ttft+decode) ms: p50 %.3f p99 %.3f\n"
                "  added latency (latency - engine) ms: p50 %.2f p99 %.2f\n",
                n, send_s, n / send_s, got, failed, span_s, got / span_s, pct(lat, k, 50), pct(lat, k, 90),
                pct(lat, k, 99), k ? lat[k - 1] : NAN, pct(eng, k, 50), pct(eng, k, 99), pct(add, k, 50), pct(add, k, 99));
        if (o.report) {
            FILE *f = fopen(o.report, "w");
            if (f) {
                fprintf(f,
                        "{\"jobs\": %d, \"rate_offered\": %.1f, \"send_s\": %.3f, \"results\": %d, \"not_ok\": %d,"
                        " \"span_s\": %.3f, \"throughput\": %.1f,\n \"latency_ms\": {\"p50\": %.3f, \"p90\": %.3f,"
                        " \"p99\": %.3f, \"max\": %.3f},\n \"engine_ms\": {\"p50\": %.4f, \"p99\": %.4f},\n"
                        " \"added_ms\": {\"p50\": %.3f, \"p99\": %.3f}}\n",
                        n, o.rate > 0 ? o.rate : n / send_s, send_s, got, failed, span_s, got / span_s, pct(lat, k, 50),
                        pct(lat, k, 90), pct(lat, k, 99), k ? lat[k - 1] : NAN, pct(eng, k, 50), pct(eng, k, 99),
                        pct(add, k, 50), pct(add, k, 99));
                fclose(f);
            }
        }
        free(lat);
        free(eng);
        free(add);
    }
    (void)t_end;
    rd_kafka_consumer_close(cons);
    rd_kafka_destroy(cons);
    rd_kafka_destroy(prod);
    for (int i = 0; i < n; i++) free(slots[i].val);
    free(slots);
    free(ix.table);
    codec_free(codec);
    codec_free(rcodec);
    free(o.args);
    free(o.kafka_kv);
    free(o.chat);
    return got == n && failed == 0 ? 0 : 1;
}
