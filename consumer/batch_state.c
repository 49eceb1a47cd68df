/* batch_state.c — see batch_state.h. */
#include "batch_state.h"

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void batch_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sluice-batch: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

// ---------------------------------------------------------------- connection, commands

static void redis_connect(batch_state *s, const char *url) {
    const char *p = url + (strncmp(url, "redis://", 8) == 0 ? 8 : 0);
    const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
    char host[256];
    size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl == 0 || hl >= sizeof(host)) batch_die("--redis '%s': bad host", url);
    memcpy(host, p, hl);
    host[hl] = 0;
    int port = colon ? atoi(colon + 1) : 6379, db = slash ? atoi(slash + 1) : 0;
    if (port <= 0 || port > 65535) batch_die("--redis '%s': bad port", url);
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) batch_die("redis %s:%d: %s", host, port, c ? c->errstr : "cannot allocate a context");
    redisSetTimeout(c, tv);
    const char *pw = getenv("SLUICE_REDIS_PASSWORD"), *user = getenv("SLUICE_REDIS_USER");
    redisReply *r = NULL;
    if (pw && pw[0]) r = user && user[0] ? redisCommand(c, "AUTH %s %s", user, pw) : redisCommand(c, "AUTH %s", pw);
    if (pw && pw[0] && (!r || r->type == REDIS_REPLY_ERROR))
        batch_die("redis %s:%d: AUTH failed: %s", host, port, r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    if (db) {
        r = redisCommand(c, "SELECT %d", db);
        if (!r || r->type == REDIS_REPLY_ERROR) batch_die("redis: SELECT %d failed", db);
        freeReplyObject(r);
    }
    s->rc = c;
}

void batch_state_open(batch_state *s, const char *url, const char *prefix, const char *id) {
    memset(s, 0, sizeof(*s));
    s->prefix = prefix;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->key, sizeof(s->key), "%sbatch:%s", prefix, id);
    snprintf(s->out_key, sizeof(s->out_key), "%sbatch:%s:out", prefix, id);
    redis_connect(s, url);
}

void batch_state_close(batch_state *s) {
    redisFree(s->rc);
    s->rc = NULL;
}

/* One command; a connection error or an error reply ends the program (every command is safe to redo). */
static redisReply *rcheck(batch_state *s, redisReply *r) {
    if (!r) batch_die("redis: %s (run the command again to resume)", s->rc->errstr);
    if (r->type == REDIS_REPLY_ERROR) batch_die("redis: %s", r->str);
    return r;
}

static redisReply *rcmd(batch_state *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->rc, fmt, ap);
    va_end(ap);
    return rcheck(s, r);
}

static void rdo(batch_state *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->rc, fmt, ap);
    va_end(ap);
    freeReplyObject(rcheck(s, r));
}

char *batch_hget(batch_state *s, const char *field) {
    redisReply *r = rcmd(s, "HGET %s %s", s->key, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

long long batch_hget_ll(batch_state *s, const char *field, long long dflt) {
    char *v = batch_hget(s, field);
    long long n = v ? strtoll(v, NULL, 10) : dflt;
    free(v);
    return n;
}

// ---------------------------------------------------------------- the script

/* KEYS[1] = batch hash, KEYS[2] = out hash. Every outcome and every status change goes through here.
 * 'store' line value counter: the outcome of a line, counted only when it is new (HSETNX), then 'check'.
 * 'check': a batch whose completed + failed reach total is finished (completed, or cancelled when a
 * cancel came first). 'start': validating -> in_progress once submit has sent everything (a cancel that
 * came meanwhile stands). 'cancel': validating | in_progress -> cancelling. 'pos' field offset: a
 * consumer checkpoint, only ever raised. Returns the status (pos: nothing). */
static const char BATCH_SCRIPT[] =
    "local op, t = ARGV[1], redis.call('TIME')[1]\n"
    "local function check()\n"
    "  local c = redis.call('HMGET', KEYS[1], 'completed', 'failed', 'total', 'status')\n"
    "  if c[3] and tonumber(c[1] or '0') + tonumber(c[2] or '0') >= tonumber(c[3]) then\n"
    "    if c[4] == 'in_progress' then\n"
    "      redis.call('HSET', KEYS[1], 'status', 'completed', 'completed_at', t) return 'completed'\n"
    "    elseif c[4] == 'cancelling' then\n"
    "      redis.call('HSET', KEYS[1], 'status', 'cancelled', 'cancelled_at', t) return 'cancelled'\n"
    "    end\n"
    "  end\n"
    "  return c[4] or ''\n"
    "end\n"
    "if op == 'store' then\n"
    "  if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 1 then redis.call('HINCRBY', KEYS[1], ARGV[4], 1) end\n"
    "  return check()\n"
    "elseif op == 'check' then\n"
    "  return check()\n"
    "elseif op == 'start' then\n"
    "  if redis.call('HGET', KEYS[1], 'status') == 'validating' then\n"
    "    redis.call('HSET', KEYS[1], 'status', 'in_progress', 'in_progress_at', t)\n"
    "  end\n"
    "  return check()\n"
    "elseif op == 'cancel' then\n"
    "  local st = redis.call('HGET', KEYS[1], 'status')\n"
    "  if st == 'validating' or st == 'in_progress' then\n"
    "    redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', t)\n"
    "  end\n"
    "  return check()\n"
    "elseif op == 'pos' then\n"
    "  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[2]) or '-1')\n"
    "  if tonumber(ARGV[3]) > cur then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end\n"
    "  return ''\n"
    "end\n"
    "return redis.error_reply('sluice-batch script: unknown op ' .. tostring(op))\n";

/* Run the script; the returned status is copied into st (when given). */
static void script(batch_state *s, char *st, size_t stlen, int argc, const char **argv, const size_t *argl) {
    const char *av[10];
    size_t al[10];
    if (argc > 5) abort();
    av[0] = "EVAL", av[1] = BATCH_SCRIPT, av[2] = "2", av[3] = s->key, av[4] = s->out_key;
    for (int i = 0; i < 5; i++) al[i] = strlen(av[i]);
    for (int i = 0; i < argc; i++) av[5 + i] = argv[i], al[5 + i] = argl ? argl[i] : strlen(argv[i]);
    redisReply *r = rcheck(s, redisCommandArgv(s->rc, 5 + argc, av, al));
    if (st) snprintf(st, stlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

static void script_op(batch_state *s, const char *op, char *st, size_t stlen) {
    const char *av[1] = {op};
    script(s, st, stlen, 1, av, NULL);
}

// ---------------------------------------------------------------- the batch, its ids

void batch_load(batch_state *s) {
    char *st = batch_hget(s, "status"), *res = batch_hget(s, "results_topic"), *dlq = batch_hget(s, "dlq_topic");
    if (!st || !res || !dlq) batch_die("no batch '%s' in Redis (prefix %s)", s->id, s->prefix);
    snprintf(s->topics[0], sizeof(s->topics[0]), "%s", res);
    snprintf(s->topics[1], sizeof(s->topics[1]), "%s", dlq);
    free(st);
    free(res);
    free(dlq);
}

void batch_req_id(const batch_state *s, long line, char *out, size_t n) {
    const char *hex = strncmp(s->id, "batch_", 6) == 0 ? s->id + 6 : s->id;
    snprintf(out, n, "batch_req_%s_%ld", hex, line);
}

void batch_job_id(const batch_state *s, long line, char *out, size_t n) { snprintf(out, n, "%s-%ld", s->id, line); }

long batch_line_of(const batch_state *s, const char *key, size_t len) {
    size_t n = strlen(s->id);
    if (len <= n + 1 || len > n + 12 || memcmp(key, s->id, n) || key[n] != '-') return -1;
    long line = 0;
    for (size_t i = n + 1; i < len; i++) {
        if (key[i] < '0' || key[i] > '9') return -1;
        line = line * 10 + (key[i] - '0');
    }
    return line >= 1 ? line : -1;
}

// ---------------------------------------------------------------- submit

int batch_create(batch_state *s, const char *input_file, const char *digest, int *max_tokens, int ttl_s,
                 const char *jobs_topic, const char *results_topic, const char *dlq_topic) {
    char *known = batch_hget(s, "input_digest");
    int existed = known != NULL;
    if (known) {   /* a resend: same file, same settings, so the same job bytes */
        if (strcmp(known, digest))
            batch_die("batch %s was submitted from another file (digest %s, this one %s)", s->id, known, digest);
        *max_tokens = (int)batch_hget_ll(s, "max_tokens", *max_tokens);
        char *res = batch_hget(s, "results_topic"), *dlq = batch_hget(s, "dlq_topic");
        char *jobs = batch_hget(s, "jobs_topic");
        if (!res || !dlq || !jobs || strcmp(res, results_topic) || strcmp(dlq, dlq_topic) ||
            strcmp(jobs, jobs_topic))
            batch_die("batch %s was submitted with other topics", s->id);
        free(res), free(dlq), free(jobs);
    } else {
        rdo(s, "HSET %s status validating created_at %lld input_file %s input_digest %s max_tokens %d ttl %d "
               "jobs_topic %s results_topic %s dlq_topic %s completed 0 failed 0",
            s->key, (long long)time(NULL), input_file, digest, *max_tokens, ttl_s, jobs_topic, results_topic,
            dlq_topic);
    }
    free(known);
    rdo(s, "EXPIRE %s %d", s->key, ttl_s);
    snprintf(s->topics[0], sizeof(s->topics[0]), "%s", results_topic);
    snprintf(s->topics[1], sizeof(s->topics[1]), "%s", dlq_topic);
    return existed;
}

void batch_record_start(batch_state *s, const char *topic, int partition, int64_t offset) {
    char f[300];
    snprintf(f, sizeof(f), "start:%s:%d", topic, partition);
    rdo(s, "HSETNX %s %s %lld", s->key, f, (long long)offset);
}

void batch_start(batch_state *s, long total, long lines, int ttl_s, char *st, size_t stlen) {
    rdo(s, "HSET %s total %ld lines %ld", s->key, total, lines);
    script_op(s, "start", st, stlen);
    rdo(s, "EXPIRE %s %d", s->out_key, ttl_s);
}

// ---------------------------------------------------------------- outcomes, status

void batch_store_outcome(batch_state *s, long line, char kind, const char *json, char *st, size_t stlen) {
    char field[24];
    snprintf(field, sizeof(field), "%ld", line);
    size_t n = strlen(json);
    char *v = malloc(n + 2);
    if (!v) abort();
    v[0] = kind;
    memcpy(v + 1, json, n + 1);
    const char *av[4] = {"store", field, v, kind == 'o' ? "completed" : "failed"};
    size_t al[4] = {5, strlen(field), n + 1, strlen(av[3])};
    script(s, st, stlen, 4, av, al);
    free(v);
}

void batch_check(batch_state *s, char *st, size_t stlen) { script_op(s, "check", st, stlen); }

void batch_cancel(batch_state *s, char *st, size_t stlen) { script_op(s, "cancel", st, stlen); }

long batch_cancel_jobs(batch_state *s) {
    long lines = batch_hget_ll(s, "lines", 0);
    int ttl = (int)batch_hget_ll(s, "ttl", 86400);   /* as long as the batch */
    uint8_t *have = calloc((size_t)lines + 1, 1);
    if (!have) abort();
    char cursor[32] = "0";
    do {
        redisReply *r = rcmd(s, "HSCAN %s %s COUNT 1000", s->out_key, cursor);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i + 1 < r->element[1]->elements; i += 2) {
            long l = strtol(r->element[1]->element[i]->str, NULL, 10);
            if (l >= 1 && l <= lines) have[l] = 1;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    long n = 0, pending = 0;
    for (long l = 1; l <= lines; l++) {
        if (have[l]) continue;
        char jid[128];
        batch_job_id(s, l, jid, sizeof(jid));
        redisAppendCommand(s->rc, "SET %scancel:%s 1 EX %d", s->prefix, jid, ttl);
        n++;
        if (++pending == 512 || l == lines) {
            for (; pending > 0; pending--) {
                redisReply *r = NULL;
                if (redisGetReply(s->rc, (void **)&r) != REDIS_OK) rcheck(s, NULL);
                freeReplyObject(rcheck(s, r));
            }
        }
    }
    for (; pending > 0; pending--) {
        redisReply *r = NULL;
        if (redisGetReply(s->rc, (void **)&r) != REDIS_OK) rcheck(s, NULL);
        freeReplyObject(rcheck(s, r));
    }
    free(have);
    return n;
}

// ---------------------------------------------------------------- read positions

int64_t batch_resume_offset(batch_state *s, const char *topic, int partition, int64_t no_start) {
    char f[300];
    snprintf(f, sizeof(f), "pos:%s:%d", topic, partition);
    long long pos = batch_hget_ll(s, f, -1);
    snprintf(f, sizeof(f), "start:%s:%d", topic, partition);
    long long start = batch_hget_ll(s, f, no_start);
    return pos > start ? pos : start;
}

void batch_checkpoint(batch_state *s, const char *topic, int partition, int64_t next) {
    char f[300], off[32];
    snprintf(f, sizeof(f), "pos:%s:%d", topic, partition);
    snprintf(off, sizeof(off), "%lld", (long long)next);
    const char *av[3] = {"pos", f, off};
    script(s, NULL, 0, 3, av, NULL);
}

// ---------------------------------------------------------------- the files' content

static int cmp_outcome(const void *a, const void *b) {
    long x = ((const batch_outcome *)a)->line, y = ((const batch_outcome *)b)->line;
    return x < y ? -1 : x > y;
}

batch_outcome *batch_outcomes(batch_state *s, size_t *n_out) {
    batch_outcome *v = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    do {   /* HSCAN in steps: a large batch never makes one huge reply */
        redisReply *r = rcmd(s, "HSCAN %s %s COUNT 1000", s->out_key, cursor);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) batch_die("redis: unexpected HSCAN reply");
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        redisReply *kv = r->element[1];
        for (size_t i = 0; i + 1 < kv->elements; i += 2) {
            if (n == cap) {
                cap = cap ? cap * 2 : 1024;
                v = realloc(v, cap * sizeof(*v));
                if (!v) abort();
            }
            v[n].line = strtol(kv->element[i]->str, NULL, 10);
            v[n++].v = strdup(kv->element[i + 1]->str);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    qsort(v, n, sizeof(*v), cmp_outcome);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && v[i].line == v[k - 1].line) {   /* HSCAN may return a field twice */
            free(v[i].v);
            continue;
        }
        v[k++] = v[i];
    }
    *n_out = k;
    return v;
}

void batch_outcomes_free(batch_outcome *v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i].v);
    free(v);
}

void batch_set_files(batch_state *s, const char *output, const char *errors) {
    rdo(s, "HSET %s output_file %s error_file %s", s->key, output, errors);
}

char *batch_full_result(batch_state *s, const char *job_id, size_t *len) {
    redisReply *r = rcmd(s, "GET %sresult:%s", s->prefix, job_id);
    char *v = NULL;
    if (r->type == REDIS_REPLY_STRING) {
        v = malloc(r->len + 1);
        if (!v) abort();
        memcpy(v, r->str, r->len + 1);
        *len = r->len;
    }
    freeReplyObject(r);
    return v;
}
