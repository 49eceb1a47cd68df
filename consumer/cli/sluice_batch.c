/* sluice-batch — run an OpenAI Batch API input file through sluice workers.
 *
 *   sluice-batch submit  --brokers B [--redis URL] FILE.jsonl        prints the batch id
 *   sluice-batch collect --brokers B [--redis URL] ID --output OUT.jsonl --errors ERR.jsonl
 *   sluice-batch status  --brokers B [--redis URL] ID                 prints the batch as JSON
 *   sluice-batch cancel  --brokers B [--redis URL] ID
 *
 * submit: every line of the file (batch_request.h) becomes one Job with id "<batch id>-<line number>",
 * key = that id, so submitting the same file again under the same batch id (--batch-id) sends the same
 * jobs and the workers' dedupe (one job id, one job) makes it harmless. A line that is not a request
 * (not JSON, no custom_id, another url) or whose body is not valid is an error line at once; the rest
 * of the batch runs.
 *
 * Where the outcomes come from: every Job ends either as a Result on the result topic or, when a worker
 * refuses it (validation, size), as its own copy on the DLQ topic. submit records both topics' end
 * offsets before it sends the first job, so collect reads from there and picks the batch's ids by key.
 *
 * The batch's state (its status and counts, every line's outcome, the read positions) is in Redis:
 * batch_state.h has the keys and why an outcome read twice counts once.
 *
 * Crash safety of collect: an outcome is stored as it is read, and a consumer position is checkpointed
 * only after every message below it is stored. The output files are written only from the stored
 * outcomes, once the batch is finished, to FILE.partial, fsync'd and renamed: a collect killed at any
 * point is simply run again; it resumes from the checkpoint and writes the files whole. status reads to
 * the topics' current end the same way, so the counts it prints are live; cancel sets the workers'
 * cancel:<job id> key of every job not yet finished (their sweep stops running jobs; a queued job is
 * stopped as soon as a worker starts it) and the batch becomes cancelled once every job has its Result.
 *
 * Exit status: 0 on success, 1 on a failure (Kafka, Redis, a batch not finished by --timeout), 2 on bad
 * usage. Redis credentials come from SLUICE_REDIS_PASSWORD (and SLUICE_REDIS_USER), never the command line.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batch_request.h"
#include "batch_state.h"
#include "codec.h"

typedef struct {
    const char *cmd, *brokers, *redis_url, *prefix, *topic, *results, *dlq, *batch_id, *file, *output, *errors;
    int max_tokens, timeout_s, ttl_s, schema_id;
    char **kafka_kv;
    int n_kafka_kv;
} opts;

typedef struct {
    const opts *o;
    batch_state s;                   /* its keys and the Redis connection */
    sl_codec *codec;
} batch;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice-batch submit  --brokers B [--redis URL] [options] FILE.jsonl   (prints the batch id)\n"
            "       sluice-batch collect --brokers B [--redis URL] ID --output OUT.jsonl --errors ERR.jsonl\n"
            "       sluice-batch status  --brokers B [--redis URL] ID\n"
            "       sluice-batch cancel  --brokers B [--redis URL] ID\n"
            "  --redis URL          redis://host:port[/db] (redis://127.0.0.1:6379); credentials from the\n"
            "                       environment: SLUICE_REDIS_PASSWORD, SLUICE_REDIS_USER\n"
            "  --prefix P           Redis key prefix, the workers' redis.prefix (sluice:)\n"
            "  -X key=value         librdkafka property\n"
            " submit:\n"
            "  --topic T            job topic (sluice.jobs)\n"
            "  --results T          result topic (sluice.results); another name is set as the jobs' reply_topic\n"
            "  --dlq T              the workers' dead-letter topic (sluice.jobs.dlq)\n"
            "  --max-tokens N       for requests without max_tokens / max_completion_tokens (2048)\n"
            "  --batch-id ID        submit under this id; the same file again under an existing id resends its\n"
            "                       jobs (after a submit that failed half way): the workers run each job once\n"
            "  --ttl S              how long the batch's Redis keys live (604800 = 7 days)\n"
            " collect:\n"
            "  --output F --errors F  the output and error files (written when the batch is finished)\n"
            "  --timeout S          give up after S seconds (0 = wait as long as it takes)\n");
}

static int bad(const char *what, const char *v) {
    fprintf(stderr, "sluice-batch: bad %s '%s' (try --help)\n", what, v ? v : "");
    return 2;
}

static int valid_batch_id(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof(*o));
    o->redis_url = "redis://127.0.0.1:6379";
    o->prefix = "sluice:";
    o->topic = "sluice.jobs";
    o->results = "sluice.results";
    o->dlq = "sluice.jobs.dlq";
    o->max_tokens = 2048;
    o->ttl_s = 7 * 86400;
    o->schema_id = 1;
    o->kafka_kv = calloc((size_t)argc, sizeof(char *));
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        int takes = !strcmp(a, "--brokers") || !strcmp(a, "--redis") || !strcmp(a, "--prefix") ||
                    !strcmp(a, "--topic") || !strcmp(a, "--results") || !strcmp(a, "--dlq") ||
                    !strcmp(a, "--max-tokens") || !strcmp(a, "--batch-id") || !strcmp(a, "--ttl") ||
                    !strcmp(a, "--output") || !strcmp(a, "--errors") || !strcmp(a, "--timeout") || !strcmp(a, "-X");
        if (takes && !v) return bad("argument (missing value)", a);
        if (takes) i++;
        if (!strcmp(a, "--brokers")) o->brokers = v;
        else if (!strcmp(a, "--redis")) o->redis_url = v;
        else if (!strcmp(a, "--prefix")) o->prefix = v;
        else if (!strcmp(a, "--topic")) o->topic = v;
        else if (!strcmp(a, "--results")) o->results = v;
        else if (!strcmp(a, "--dlq")) o->dlq = v;
        else if (!strcmp(a, "--batch-id")) o->batch_id = v;
        else if (!strcmp(a, "--output")) o->output = v;
        else if (!strcmp(a, "--errors")) o->errors = v;
        else if (!strcmp(a, "--max-tokens")) {
            o->max_tokens = (int)strtol(v, &end, 10);
            if (*end || o->max_tokens < 1) return bad("--max-tokens", v);
        } else if (!strcmp(a, "--ttl")) {
            o->ttl_s = (int)strtol(v, &end, 10);
            if (*end || o->ttl_s < 60) return bad("--ttl (at least 60)", v);
        } else if (!strcmp(a, "--timeout")) {
            o->timeout_s = (int)strtol(v, &end, 10);
            if (*end || o->timeout_s < 0) return bad("--timeout", v);
        } else if (!strcmp(a, "-X")) {
            if (!strchr(v, '=')) return bad("-X (want key=value)", v);
            o->kafka_kv[o->n_kafka_kv++] = (char *)v;
        } else if (a[0] == '-') {
            return bad("option", a);
        } else if (!o->cmd) {
            o->cmd = a;
        } else if (!arg) {
            arg = a;
        } else {
            return bad("argument (one FILE or ID)", a);
        }
    }
    if (!o->cmd) return bad("usage: a command (submit, collect, status, cancel)", "");
    int submit = !strcmp(o->cmd, "submit");
    if (!submit && strcmp(o->cmd, "collect") && strcmp(o->cmd, "status") && strcmp(o->cmd, "cancel"))
        return bad("command", o->cmd);
    if (!o->brokers) return bad("usage: --brokers is required", "");
    if (!arg) return bad(submit ? "usage: the input FILE is missing" : "usage: the batch ID is missing", "");
    if (submit) o->file = arg;
    else o->batch_id = arg;
    if (o->batch_id && !valid_batch_id(o->batch_id)) return bad("batch id (1-64 of A-Z a-z 0-9 _ -)", o->batch_id);
    if (!strcmp(o->cmd, "collect") && (!o->output || !o->errors))
        return bad("usage: collect needs --output and --errors", "");
    if (strlen(o->prefix) > 64) return bad("--prefix (at most 64 bytes)", o->prefix);
    return 0;
}

// ---------------------------------------------------------------- Kafka

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    if (strcmp(fac, "CONFWARN") != 0 && level <= 4) fprintf(stderr, "sluice-batch: librdkafka %s: %s\n", fac, buf);
}

static rd_kafka_conf_t *base_conf(const opts *o) {
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(c, log_cb);
    char err[256];
    if (rd_kafka_conf_set(c, "bootstrap.servers", o->brokers, err, sizeof(err)) != RD_KAFKA_CONF_OK) batch_die("%s", err);
    for (int i = 0; i < o->n_kafka_kv; i++) {
        char *kv = strdup(o->kafka_kv[i]), *eq = strchr(kv, '=');
        *eq = 0;
        if (rd_kafka_conf_set(c, kv, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK) batch_die("-X %s: %s", o->kafka_kv[i], err);
        free(kv);
    }
    return c;
}

static int partition_count(rd_kafka_t *rk, const char *topic) {
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, 10000);
    if (!e && md->topic_cnt == 1) e = md->topics[0].err;
    int n = !e && md->topic_cnt == 1 ? md->topics[0].partition_cnt : 0;
    if (md) rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    if (e || n <= 0) batch_die("no metadata for topic %s: %s", topic, rd_kafka_err2str(e ? e : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    return n;
}

/* submit: remember where the result and DLQ topics end now (kept from a first submit on a resend). */
static void record_start_offsets(batch *b, rd_kafka_t *rk) {
    for (int k = 0; k < 2; k++) {
        int n = partition_count(rk, b->s.topics[k]);
        for (int p = 0; p < n; p++) {
            int64_t lo, hi;
            rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, b->s.topics[k], p, &lo, &hi, 10000);
            if (e) batch_die("end offset of %s[%d]: %s", b->s.topics[k], p, rd_kafka_err2str(e));
            batch_record_start(&b->s, b->s.topics[k], p, hi);
        }
    }
}

// ---------------------------------------------------------------- submit

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    if (m->err) {
        (*(int *)opaque)++;
        fprintf(stderr, "sluice-batch: job %.*s not delivered: %s\n", (int)m->key_len, (const char *)m->key,
                rd_kafka_err2str(m->err));
    }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* Stop the batch's jobs that have no outcome yet. */
static void cancel_jobs(batch *b) {
    long n = batch_cancel_jobs(&b->s);
    fprintf(stderr, "sluice-batch: batch %s: %ld unfinished jobs cancelled\n", b->s.id, n);
}

static void fresh_batch_id(char *out, size_t n) {
    uint8_t r[16];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, sizeof(r), 1, f) != 1) batch_die("cannot read /dev/urandom for a batch id");
    fclose(f);
    size_t k = (size_t)snprintf(out, n, "batch_");
    for (int i = 0; i < 16 && k + 2 < n; i++) k += (size_t)snprintf(out + k, n - k, "%02x", r[i]);
}

static int cmd_submit(const opts *o) {
    FILE *in = fopen(o->file, "r");
    if (!in) {
        fprintf(stderr, "sluice-batch: cannot open %s: %s\n", o->file, strerror(errno));
        return 2;
    }
    /* the file's digest: a resend under an existing batch id must be the same file */
    uint64_t digest = 0xcbf29ce484222325ull;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), in)) > 0) digest = fnv1a(digest, buf, got);
    if (ferror(in)) batch_die("cannot read %s: %s", o->file, strerror(errno));
    rewind(in);
    char dhex[20];
    snprintf(dhex, sizeof(dhex), "%016" PRIx64, digest);

    batch b = {.o = o};
    char id[72];
    if (o->batch_id) snprintf(id, sizeof(id), "%s", o->batch_id);
    else fresh_batch_id(id, sizeof(id));
    batch_state_open(&b.s, o->redis_url, o->prefix, id);
    int max_tokens = o->max_tokens;   /* a resend takes the batch's: same file, same settings, same job bytes */
    if (batch_create(&b.s, o->file, dhex, &max_tokens, o->ttl_s, o->topic, o->results, o->dlq))
        fprintf(stderr, "sluice-batch: batch %s exists: sending its jobs again\n", id);

    char err[512];
    int failed_dr = 0;
    rd_kafka_conf_t *pc = base_conf(o);
    rd_kafka_conf_set(pc, "linger.ms", "5", NULL, 0);
    rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
    rd_kafka_conf_set_opaque(pc, &failed_dr);
    rd_kafka_t *prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof(err));
    if (!prod) batch_die("%s", err);
    record_start_offsets(&b, prod);   /* before the first job: its Result comes after these offsets */
    codec_install_allocator((size_t)256 << 20);
    if (codec_new(&b.codec, err, sizeof(err))) batch_die("%s", err);

    json_t *seen = json_object();   /* custom_ids so far: a repeated one is an error line */
    char *line = NULL;
    size_t lcap = 0;
    long lineno = 0, total = 0, jobs = 0, bad_lines = 0;
    char st[32];
    for (;;) {
        ssize_t len = getline(&line, &lcap, in);
        if (len < 0) break;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        int blank = 1;
        for (ssize_t i = 0; i < len && blank; i++) blank = isspace((unsigned char)line[i]);
        if (blank) continue;
        total++;
        batch_request q;
        char rid[128], jid[128];
        batch_req_id(&b.s, lineno, rid, sizeof(rid));
        batch_job_id(&b.s, lineno, jid, sizeof(jid));
        int rc = batch_parse_line(line, (size_t)len, max_tokens, &q);
        if (rc == 0 && json_object_get(seen, q.custom_id)) {   /* every custom_id names one line of the files */
            snprintf(q.code, sizeof(q.code), "duplicate_custom_id");
            snprintf(q.message, sizeof(q.message), "custom_id: '%.400s' is used by an earlier line", q.custom_id);
            snprintf(q.param, sizeof(q.param), "custom_id");
            q.status_code = 0;
            rc = -1;
        }
        if (q.custom_id) json_object_set_new(seen, q.custom_id, json_true());
        if (rc != 0) {
            char *el = batch_error_line(rid, q.custom_id, q.status_code, NULL, q.code, q.message, q.param);
            batch_store_outcome(&b.s, lineno, 'e', el, st, sizeof(st));
            free(el);
            bad_lines++;
            batch_request_free(&q);
            continue;
        }
        q.job.id = strdup(jid);
        q.job.id_len = strlen(jid);
        if (strcmp(o->results, "sluice.results")) q.job.reply_topic = strdup(o->results);
        uint8_t *val;
        size_t vlen;
        if (codec_encode_job(b.codec, &q.job, o->schema_id, &val, &vlen, err, sizeof(err))) batch_die("line %ld: %s", lineno, err);
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(o->topic), RD_KAFKA_V_VALUE(val, vlen),
                                                      RD_KAFKA_V_KEY(jid, strlen(jid)),
                                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(prod, 50);
                continue;
            }
            if (e) batch_die("produce to %s: %s", o->topic, rd_kafka_err2str(e));
            break;
        }
        rd_kafka_poll(prod, 0);
        jobs++;
        batch_request_free(&q);
    }
    free(line);
    fclose(in);
    json_decref(seen);
    if (rd_kafka_flush(prod, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR || rd_kafka_outq_len(prod) > 0)
        batch_die("not every job was delivered in 60 s; send them again: sluice-batch submit --batch-id %s ... %s", id, o->file);
    if (failed_dr) batch_die("%d jobs not delivered; send them again: sluice-batch submit --batch-id %s ... %s", failed_dr, id,
                       o->file);
    rd_kafka_destroy(prod);
    codec_free(b.codec);
    batch_start(&b.s, total, lineno, o->ttl_s, st, sizeof(st));
    if (!strcmp(st, "cancelling")) cancel_jobs(&b);   /* cancelled while it was being sent: stop what was sent */
    fprintf(stderr, "sluice-batch: batch %s: %ld requests, %ld jobs sent, %ld invalid lines (in the error file)\n", id,
            total, jobs, bad_lines);
    printf("%s\n", id);
    batch_state_close(&b.s);
    return 0;
}

// ---------------------------------------------------------------- reading outcomes

typedef struct {
    char *topic;
    int partition;
    int64_t next;                    /* every message below it is stored */
    int dirty, eof;
} part_pos;

typedef struct {
    rd_kafka_t *rk;
    part_pos *p;
    int n;
} reader;

static void reader_open(batch *b, reader *rd) {
    rd_kafka_conf_t *c = base_conf(b->o);
    char err[256], gid[64];
    snprintf(gid, sizeof(gid), "sluice-batch-%d", (int)getpid());
    rd_kafka_conf_set(c, "group.id", gid, NULL, 0);
    rd_kafka_conf_set(c, "enable.auto.commit", "false", NULL, 0);
    rd_kafka_conf_set(c, "enable.auto.offset.store", "false", NULL, 0);
    rd_kafka_conf_set(c, "enable.partition.eof", "true", NULL, 0);
    rd_kafka_conf_set(c, "fetch.wait.max.ms", "100", NULL, 0);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
    if (!rk) batch_die("%s", err);
    memset(rd, 0, sizeof(*rd));
    rd->rk = rk;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
    for (int k = 0; k < 2; k++) {
        int n = partition_count(rk, b->s.topics[k]);
        rd->p = realloc(rd->p, (size_t)(rd->n + n) * sizeof(part_pos));
        if (!rd->p) abort();
        for (int p = 0; p < n; p++) {
            part_pos *pp = &rd->p[rd->n++];
            *pp = (part_pos){.topic = b->s.topics[k], .partition = p,
                             .next = batch_resume_offset(&b->s, b->s.topics[k], p, RD_KAFKA_OFFSET_BEGINNING)};
            rd_kafka_topic_partition_list_add(l, b->s.topics[k], p)->offset = pp->next;
        }
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) batch_die("assign: %s", rd_kafka_err2str(e));
}

static void reader_checkpoint(batch *b, reader *rd) {
    for (int i = 0; i < rd->n; i++) {
        part_pos *p = &rd->p[i];
        if (!p->dirty || p->next < 0) continue;
        batch_checkpoint(&b->s, p->topic, p->partition, p->next);
        p->dirty = 0;
    }
}

static void reader_close(reader *rd) {
    rd_kafka_consumer_close(rd->rk);
    rd_kafka_destroy(rd->rk);
    free(rd->p);
}

static const char *header(const rd_kafka_message_t *m, const char *name, char *buf, size_t n) {
    rd_kafka_headers_t *h = NULL;
    const void *v;
    size_t len;
    if (rd_kafka_message_headers(m, &h) || rd_kafka_header_get_last(h, name, &v, &len)) return NULL;
    snprintf(buf, n, "%.*s", (int)len, (const char *)v);
    return buf;
}

/* A Result of one of the batch's jobs -> its outcome. */
static void take_result(batch *b, long line, const rd_kafka_message_t *m, char *st, size_t stlen) {
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    char err[256], rid[128];
    sl_result_owned r;
    if (codec_unframe(m->payload, m->len, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) ||
        codec_decode_result(b->codec, pl, plen, &r, err, sizeof(err))) {
        fprintf(stderr, "sluice-batch: undecodable result at %s[%d]@%lld: %s\n", rd_kafka_topic_name(m->rkt),
                (int)m->partition, (long long)m->offset, err);
        return;
    }
    /* a Result too large for Kafka comes as an ERROR naming the Redis key of the whole one */
    if (r.r.status == RS_ERROR && r.r.error && strstr(r.r.error, "the full result is in Redis at")) {
        size_t flen;
        char *full = batch_full_result(&b->s, r.r.id, &flen);
        sl_result_owned f;
        if (full && codec_decode_result(b->codec, full, flen, &f, err, sizeof(err)) == 0) {
            result_owned_free(&r);
            r = f;
        }
        free(full);
    }
    batch_req_id(&b->s, line, rid, sizeof(rid));
    const char *cid = batch_meta(r.r.meta_k, r.r.meta_v, r.r.n_meta, "batch.custom_id");
    char *out;
    if (r.r.status == RS_OK) {
        out = batch_output_line(rid, &r.r, (int64_t)time(NULL));
    } else if (r.r.status == RS_CANCELLED) {
        out = batch_error_line(rid, cid, 0, NULL, "batch_cancelled", "the batch was cancelled before this request "
                               "finished", NULL);
    } else if (r.r.status == RS_EXPIRED) {
        out = batch_error_line(rid, cid, 0, NULL, "batch_expired", "the request passed its deadline", NULL);
    } else {
        out = batch_error_line(rid, cid, 500, r.r.id, "server_error", r.r.error ? r.r.error : "the worker failed",
                               NULL);
    }
    batch_store_outcome(&b->s, line, r.r.status == RS_OK ? 'o' : 'e', out, st, stlen);
    free(out);
    result_owned_free(&r);
}

/* A job the workers refused (its copy on the DLQ) -> an error line with the worker's message. */
static void take_dlq(batch *b, long line, const rd_kafka_message_t *m, char *st, size_t stlen) {
    char cls[64] = "", msg[1024] = "", rid[128], jid[128], err[256];
    header(m, "sluice.error.class", cls, sizeof(cls));
    header(m, "sluice.error", msg, sizeof(msg));
    if (!strcmp(cls, "conflict")) return;   /* the first job under this id stands: its Result comes */
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    sl_job j;
    memset(&j, 0, sizeof(j));
    const char *cid = NULL;
    if (m->payload && codec_unframe(m->payload, m->len, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) == 0 &&
        codec_decode_job(b->codec, pl, plen, &j, err, sizeof(err)) == 0)
        cid = batch_meta((const char *const *)j.meta_k, (const char *const *)j.meta_v, j.n_meta, "batch.custom_id");
    batch_req_id(&b->s, line, rid, sizeof(rid));
    batch_job_id(&b->s, line, jid, sizeof(jid));
    const char *code = !strcmp(cls, "size") ? "request_too_large" : "invalid_request";
    char *out = batch_error_line(rid, cid, 400, jid, code, msg[0] ? msg : "refused by the worker", NULL);
    batch_store_outcome(&b->s, line, 'e', out, st, stlen);
    free(out);
    job_free(&j);
}

static int finished(const char *st) { return !strcmp(st, "completed") || !strcmp(st, "cancelled"); }

/* Read the batch's outcomes. to_end: stop once every partition is read to its end (status); else until
 * the batch is finished or the deadline (monotonic s; 0 = none) passes. Returns the batch status. */
static void advance(batch *b, int to_end, double deadline, char *st, size_t stlen) {
    reader rd;
    reader_open(b, &rd);
    double last_cp = mono_s(), last_check = 0, t0 = mono_s();
    int waiting_note = 0;
    st[0] = 0;
    for (;;) {
        double now = mono_s();
        if (now - last_check >= 1.0) {   /* status: another process (cancel, status) may have moved it */
            batch_check(&b->s, st, stlen);
            last_check = now;
            if (!strcmp(st, "validating") && !waiting_note && now - t0 > 5) {
                fprintf(stderr, "sluice-batch: batch %s is still being submitted (status validating)\n", b->s.id);
                waiting_note = 1;
            }
        }
        if (finished(st)) break;
        if (deadline > 0 && now > deadline) break;
        if (now - last_cp >= 0.5) {
            reader_checkpoint(b, &rd);
            last_cp = now;
        }
        if (to_end) {
            int all = 1;
            for (int i = 0; i < rd.n && all; i++) all = rd.p[i].eof;
            if (all) break;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rd.rk, 200);
        if (!m) continue;
        const char *topic = rd_kafka_topic_name(m->rkt);
        part_pos *pp = NULL;
        for (int i = 0; i < rd.n && !pp; i++)
            if (rd.p[i].partition == m->partition && !strcmp(rd.p[i].topic, topic)) pp = &rd.p[i];
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (pp) pp->eof = 1;
        } else if (m->err) {
            fprintf(stderr, "sluice-batch: consumer: %s\n", rd_kafka_message_errstr(m));
        } else if (pp) {
            long line = m->key ? batch_line_of(&b->s, m->key, m->key_len) : -1;
            if (line > 0) {
                if (!strcmp(topic, b->s.topics[1])) take_dlq(b, line, m, st, stlen);
                else take_result(b, line, m, st, stlen);
                last_check = mono_s();   /* storing it returned the status */
            }
            pp->next = m->offset + 1;
            pp->dirty = 1;
            pp->eof = 0;
        }
        rd_kafka_message_destroy(m);
    }
    reader_checkpoint(b, &rd);
    reader_close(&rd);
}

// ---------------------------------------------------------------- collect, status, cancel

static FILE *open_partial(const char *path, char *tmp, size_t n) {
    snprintf(tmp, n, "%s.partial", path);
    FILE *f = fopen(tmp, "w");
    if (!f) batch_die("cannot write %s: %s", tmp, strerror(errno));
    return f;
}

static void commit_file(FILE *f, const char *tmp, const char *path) {
    if (fflush(f) || fsync(fileno(f)) || fclose(f)) batch_die("cannot write %s: %s", tmp, strerror(errno));
    if (rename(tmp, path)) batch_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}

/* Both files from the stored outcomes, in input line order. */
static void write_files(batch *b, long *n_out, long *n_err) {
    size_t n;
    batch_outcome *v = batch_outcomes(&b->s, &n);
    char t_out[4096], t_err[4096];
    FILE *fo = open_partial(b->o->output, t_out, sizeof(t_out)), *fe = open_partial(b->o->errors, t_err, sizeof(t_err));
    *n_out = *n_err = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = v[i].v[0] == 'o';
        fprintf(ok ? fo : fe, "%s\n", v[i].v + 1);
        ++*(ok ? n_out : n_err);
    }
    commit_file(fo, t_out, b->o->output);
    commit_file(fe, t_err, b->o->errors);
    batch_outcomes_free(v, n);
    batch_set_files(&b->s, b->o->output, b->o->errors);
}

static json_t *field_int(batch *b, const char *f) {
    char *s = batch_hget(&b->s, f);
    json_t *v = s ? json_integer(strtoll(s, NULL, 10)) : json_null();
    free(s);
    return v;
}

static void print_status(batch *b) {
    json_t *o = json_object(), *counts = json_object();
    char *st = batch_hget(&b->s, "status"), *in = batch_hget(&b->s, "input_file");
    char *of = batch_hget(&b->s, "output_file"), *ef = batch_hget(&b->s, "error_file");
    json_object_set_new(o, "id", json_string(b->s.id));
    json_object_set_new(o, "object", json_string("batch"));
    json_object_set_new(o, "status", json_string(st ? st : ""));
    json_object_set_new(o, "input_file", in ? json_string(in) : json_null());
    json_object_set_new(o, "output_file", of ? json_string(of) : json_null());
    json_object_set_new(o, "error_file", ef ? json_string(ef) : json_null());
    static const char *const times[] = {"created_at", "in_progress_at", "completed_at", "cancelling_at", "cancelled_at"};
    for (size_t i = 0; i < sizeof(times) / sizeof(*times); i++) json_object_set_new(o, times[i], field_int(b, times[i]));
    json_object_set_new(counts, "total", field_int(b, "total"));
    json_object_set_new(counts, "completed", field_int(b, "completed"));
    json_object_set_new(counts, "failed", field_int(b, "failed"));
    json_object_set_new(o, "request_counts", counts);
    char *s = json_dumps(o, JSON_COMPACT);
    printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(o);
    free(st), free(in), free(of), free(ef);
}

static int cmd_collect(batch *b) {
    char st[32];
    double deadline = b->o->timeout_s > 0 ? mono_s() + b->o->timeout_s : 0;
    advance(b, 0, deadline, st, sizeof(st));
    if (!finished(st)) {
        fprintf(stderr, "sluice-batch: batch %s not finished after %d s (status %s, %lld of %lld done); run collect "
                "again to go on\n", b->s.id, b->o->timeout_s, st,
                batch_hget_ll(&b->s, "completed", 0) + batch_hget_ll(&b->s, "failed", 0),
                batch_hget_ll(&b->s, "total", 0));
        return 1;
    }
    long n_out, n_err;
    write_files(b, &n_out, &n_err);
    fprintf(stderr, "sluice-batch: batch %s %s: %ld lines in %s, %ld in %s\n", b->s.id, st, n_out, b->o->output, n_err,
            b->o->errors);
    return 0;
}

static int cmd_status(batch *b) {
    char st[32];
    advance(b, 1, mono_s() + 30, st, sizeof(st));
    print_status(b);
    return 0;
}

static int cmd_cancel(batch *b) {
    char st[32];
    batch_cancel(&b->s, st, sizeof(st));
    if (!strcmp(st, "completed")) {
        fprintf(stderr, "sluice-batch: batch %s is already completed: nothing to cancel\n", b->s.id);
        return 1;
    }
    if (strcmp(st, "validating")) cancel_jobs(b);   /* still being submitted: submit cancels its jobs at its end */
    print_status(b);
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        free(o.kafka_kv);
        return rc;
    }
    if (!strcmp(o.cmd, "submit")) {
        rc = cmd_submit(&o);
    } else {
        batch b = {.o = &o};
        batch_state_open(&b.s, o.redis_url, o.prefix, o.batch_id);
        batch_load(&b.s);
        char err[256];
        codec_install_allocator((size_t)256 << 20);
        if (codec_new(&b.codec, err, sizeof(err))) batch_die("%s", err);
        rc = !strcmp(o.cmd, "collect") ? cmd_collect(&b) : !strcmp(o.cmd, "status") ? cmd_status(&b) : cmd_cancel(&b);
        codec_free(b.codec);
        batch_state_close(&b.s);
    }
    free(o.kafka_kv);
    return rc;
}
