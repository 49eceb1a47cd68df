/* redis_state.c — see redis_state.h. */
#include "redis_state.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* KEYS[1] = job key, KEYS[2] = result key. ARGV[1] = op, ARGV[2] = worker id, ARGV[3] = incarnation,
 * then per op. A claim is held by (worker, incarnation): a worker id is one live process at a time, so
 * a claim of the same id under another incarnation, or of a worker whose heartbeat names another
 * incarnation, belongs to a process that is gone and is taken at once. `digest` is the hash of the
 * job's payload: a job id is one job; a claim with another digest is a conflict. A claim taken over
 * from a holder that never finished it (gone, or its lease run out) counts a crash; at the max_crashes-th
 * (0: never) the job is `poisoned`: every later claim answers so, and the worker sends it to the DLQ
 * instead of running it again. */
static const char JOB_SCRIPT[] =
    "local key, op, me, inc = KEYS[1], ARGV[1], ARGV[2], ARGV[3]\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "if op == 'claim' then\n"  /* ARGV: lease_ms ttl_ms partition offset prefix digest max_crashes */
    "  local st = redis.call('HMGET', key, 'status', 'worker', 'lease_until', 'incarnation', 'digest', 'crashes')\n"
    "  if st[5] and ARGV[9] ~= '' and st[5] ~= ARGV[9] then return {'conflict', st[5]} end\n"
    "  if st[1] == 'poisoned' then return {'poison', st[6] or '0'} end\n"
    "  if st[1] == 'done' or st[1] == 'failed' then\n"
    "    local r = redis.call('GET', KEYS[2])\n"
    "    if r then return {'done', r} end\n"
    "  end\n"
    "  local lease = tonumber(st[3] or '0') or 0\n"
    /* held by another live worker under a live lease: parked. Not when the holder's heartbeat is gone,
     * or names a later incarnation (the holder restarted); this worker's own earlier incarnation is
     * gone by definition. */
    "  if st[1] == 'running' and st[2] ~= me and lease > now then\n"
    "    local hk = ARGV[8] .. 'worker:' .. st[2]\n"
    "    if redis.call('EXISTS', hk) == 1 then\n"
    "      local hinc = redis.call('HGET', hk, 'incarnation')\n"
    "      if not (hinc and st[4] and hinc ~= st[4]) then return {'parked', st[2]} end\n"
    "    end\n"
    "  end\n"
    /* a takeover: the holder died running it (or hung past its lease); this process's own claim is not one */
    "  if st[1] == 'running' and not (st[2] == me and (not st[4] or st[4] == inc)) then\n"
    "    local n = redis.call('HINCRBY', key, 'crashes', 1)\n"
    "    local mx = tonumber(ARGV[10]) or 0\n"
    "    if mx > 0 and n >= mx then\n"
    "      redis.call('HSET', key, 'status', 'poisoned', 'lease_until', 0, 'finished', now)\n"
    "      redis.call('PEXPIRE', key, ARGV[5])\n"
    "      return {'poison', tostring(n)}\n"
    "    end\n"
    "  end\n"
    "  redis.call('HSET', key, 'status', 'running', 'worker', me, 'incarnation', inc,\n"
    "             'lease_until', now + tonumber(ARGV[4]), 'partition', ARGV[6], 'offset', ARGV[7], 'started', now)\n"
    "  if ARGV[9] ~= '' then redis.call('HSETNX', key, 'digest', ARGV[9]) end\n"
    "  redis.call('HSETNX', key, 'created', now)\n"
    "  redis.call('PEXPIRE', key, ARGV[5])\n"
    "  return {'claimed'}\n"
    "elseif op == 'renew' then\n"  /* ARGV: lease_ms */
    "  local st = redis.call('HMGET', key, 'status', 'worker', 'incarnation')\n"
    "  if st[1] == 'running' and st[2] == me and (not st[3] or st[3] == inc) then\n"
    "    redis.call('HSET', key, 'lease_until', now + tonumber(ARGV[4]))\n"
    "    return {'ok'}\n"
    "  end\n"
    "  return {'lost'}\n"
    "elseif op == 'done' or op == 'failed' then\n"  /* ARGV: result ttl_ms tokens_out digest */
    "  local st = redis.call('HGET', key, 'status')\n"
    "  if (st == 'done' or st == 'failed') and redis.call('EXISTS', KEYS[2]) == 1 then return {'already'} end\n"
    "  redis.call('HSET', key, 'status', op, 'worker', me, 'incarnation', inc, 'finished', now,\n"
    "             'tokens_out', ARGV[6], 'lease_until', 0)\n"
    "  if ARGV[7] ~= '' then redis.call('HSETNX', key, 'digest', ARGV[7]) end\n"
    "  redis.call('HSETNX', key, 'created', now)\n"
    "  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])\n"
    "  redis.call('PEXPIRE', key, ARGV[5])\n"
    "  return {'ok'}\n"
    "elseif op == 'release' then\n"
    "  local st = redis.call('HMGET', key, 'status', 'worker', 'incarnation')\n"
    "  if st[1] == 'running' and st[2] == me and (not st[3] or st[3] == inc) then\n"
    "    redis.call('HSET', key, 'status', 'queued', 'lease_until', 0)\n"
    "  end\n"
    "  return {'ok'}\n"
    "end\n"
    "return redis.error_reply('sluice job script: unknown op ' .. tostring(op))\n";

struct sl_redis {
    redisContext *ctx;
    char host[256];
    int port, db;
    char prefix[64];
    char worker[128];
    char *user, *password;           /* AUTH on every connect when password is set */
    char inc[48];                    /* this process's incarnation: start time in ms + 64 random bits */
    char sha[48];
    int timeout_ms;
    int64_t lease_ms, ttl_ms;
    int64_t max_crashes;             /* the takeovers of a claim that poison the job (0: never) */
    double next_connect;             /* monotonic seconds: no reconnect attempt before */
    uint64_t errors;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void drop(sl_redis *r) {
    if (r->ctx) redisFree(r->ctx);
    r->ctx = NULL;
    r->errors++;
    r->next_connect = now_s() + 1.0;
}

static int connect_now(sl_redis *r, char *err, size_t errlen) {
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "redis %s:%d: %s", r->host, r->port, c ? c->errstr : "cannot allocate context");
        if (c) redisFree(c);
        return -1;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        snprintf(err, errlen, "redis: cannot set timeout");
        redisFree(c);
        return -1;
    }
    redisReply *rep;
    if (r->password[0]) {
        if (r->user[0]) rep = redisCommand(c, "AUTH %s %s", r->user, r->password);
        else rep = redisCommand(c, "AUTH %s", r->password);
        int ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (!ok)
            snprintf(err, errlen, "redis %s:%d: AUTH%s%s failed: %s", r->host, r->port, r->user[0] ? " as " : "",
                     r->user, rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        if (!ok) {
            redisFree(c);
            return -1;
        }
    }
    if (r->db) {
        rep = redisCommand(c, "SELECT %d", r->db);
        int ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep) freeReplyObject(rep);
        if (!ok) {
            snprintf(err, errlen, "redis: SELECT %d failed", r->db);
            redisFree(c);
            return -1;
        }
    }
    rep = redisCommand(c, "SCRIPT LOAD %s", JOB_SCRIPT);
    if (!rep || rep->type != REDIS_REPLY_STRING || rep->len >= (int)sizeof(r->sha)) {
        snprintf(err, errlen, "redis: SCRIPT LOAD failed: %s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        redisFree(c);
        return -1;
    }
    memcpy(r->sha, rep->str, (size_t)rep->len);
    r->sha[rep->len] = 0;
    freeReplyObject(rep);
    r->ctx = c;
    return 0;
}

/* Ensure a live context; 0 when connected. */
static int ensure(sl_redis *r) {
    if (r->ctx) return 0;
    if (now_s() < r->next_connect) return -1;
    char err[256];
    if (connect_now(r, err, sizeof(err)) != 0) {
        r->errors++;
        r->next_connect = now_s() + 1.0;
        return -1;
    }
    fprintf(stderr, "sluice-worker: redis reconnected\n");
    return 0;
}

int redis_open(sl_redis **out, const char *url, const char *user, const char *password, const char *prefix,
               int timeout_ms, const char *worker, int64_t lease_ms, int64_t ttl_ms, char *err, size_t errlen) {
    sl_redis *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "redis: out of memory");
        return -1;
    }
    const char *p = url + (strncmp(url, "redis://", 8) == 0 ? 8 : 0);
    const char *colon = strrchr(p, ':');
    const char *slash = strchr(p, '/');
    size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl == 0 || hl >= sizeof(r->host)) {
        snprintf(err, errlen, "redis.url '%s': bad host", url);
        free(r);
        return -1;
    }
    memcpy(r->host, p, hl);
    r->port = colon ? atoi(colon + 1) : 6379;
    r->db = slash ? atoi(slash + 1) : 0;
    if (r->port <= 0 || r->port > 65535) {
        snprintf(err, errlen, "redis.url '%s': bad port", url);
        free(r);
        return -1;
    }
    snprintf(r->prefix, sizeof(r->prefix), "%s", prefix);
    snprintf(r->worker, sizeof(r->worker), "%s", worker);
    r->user = strdup(user ? user : "");
    r->password = strdup(password ? password : "");
    if (!r->user || !r->password) {
        snprintf(err, errlen, "redis: out of memory");
        redis_close(r);
        return -1;
    }
    uint64_t rnd = 0;
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&rnd, sizeof(rnd), 1, ur) != 1) {
        struct timespec ts;   /* no /dev/urandom: the clock and the pid still differ per process */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        rnd = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)ts.tv_sec << 40);
    }
    if (ur) fclose(ur);
    struct timespec wt;
    clock_gettime(CLOCK_REALTIME, &wt);
    snprintf(r->inc, sizeof(r->inc), "%lld-%016llx", (long long)wt.tv_sec * 1000 + wt.tv_nsec / 1000000,
             (unsigned long long)rnd);
    r->timeout_ms = timeout_ms;
    r->lease_ms = lease_ms;
    r->ttl_ms = ttl_ms;
    if (connect_now(r, err, errlen) != 0) {
        redis_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void redis_close(sl_redis *r) {
    if (!r) return;
    if (r->ctx) redisFree(r->ctx);
    free(r->user);
    if (r->password) memset(r->password, 0, strlen(r->password));
    free(r->password);
    free(r);
}

int redis_connected(const sl_redis *r) { return r->ctx != NULL; }
const char *redis_incarnation(const sl_redis *r) { return r->inc; }
uint64_t redis_errors(const sl_redis *r) { return r->errors; }

// ---------------------------------------------------------------- pipelined script calls

#define MAXARGS 10

typedef struct {
    char key[2][512];
    const char *argv[MAXARGS + 5];
    size_t argl[MAXARGS + 5];
    int argc;
    char num[5][32];
} script_call;

static void call_init(script_call *sc, sl_redis *r, const char *op, const char *id) {
    snprintf(sc->key[0], sizeof(sc->key[0]), "%sjob:%s", r->prefix, id);
    snprintf(sc->key[1], sizeof(sc->key[1]), "%sresult:%s", r->prefix, id);
    sc->argc = 0;
    sc->argv[sc->argc] = "EVALSHA", sc->argl[sc->argc++] = 7;
    sc->argv[sc->argc] = r->sha, sc->argl[sc->argc++] = strlen(r->sha);
    sc->argv[sc->argc] = "2", sc->argl[sc->argc++] = 1;
    sc->argv[sc->argc] = sc->key[0], sc->argl[sc->argc++] = strlen(sc->key[0]);
    sc->argv[sc->argc] = sc->key[1], sc->argl[sc->argc++] = strlen(sc->key[1]);
    sc->argv[sc->argc] = op, sc->argl[sc->argc++] = strlen(op);
    sc->argv[sc->argc] = r->worker, sc->argl[sc->argc++] = strlen(r->worker);
    sc->argv[sc->argc] = r->inc, sc->argl[sc->argc++] = strlen(r->inc);
}

static void call_arg(script_call *sc, const void *p, size_t n) {
    sc->argv[sc->argc] = p;
    sc->argl[sc->argc++] = n;
}

static void call_num(script_call *sc, int slot, int64_t v) {
    int n = snprintf(sc->num[slot], sizeof(sc->num[slot]), "%lld", (long long)v);
    call_arg(sc, sc->num[slot], (size_t)n);
}

static int append(sl_redis *r, script_call *sc) {
    return redisAppendCommandArgv(r->ctx, sc->argc, sc->argv, sc->argl) == REDIS_OK ? 0 : -1;
}

/* Read n replies; handler(i, reply) per reply. On a connection error the context is dropped and the
 * rest are not read. A NOSCRIPT reply (server restarted) drops the context so the next call reloads. */
typedef void (*reply_fn)(void *ud, int i, redisReply *rep);

static int read_replies(sl_redis *r, int n, reply_fn fn, void *ud) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        void *v = NULL;
        if (redisGetReply(r->ctx, &v) != REDIS_OK || !v) {
            fprintf(stderr, "sluice-worker: redis: %s\n", r->ctx->errstr[0] ? r->ctx->errstr : "no reply");
            drop(r);
            return -1;
        }
        redisReply *rep = v;
        if (rep->type == REDIS_REPLY_ERROR) {
            if (strncmp(rep->str, "NOSCRIPT", 8) == 0) rc = -2;
            else fprintf(stderr, "sluice-worker: redis script error: %s\n", rep->str);
            r->errors++;
        } else {
            fn(ud, i, rep);
        }
        freeReplyObject(rep);
    }
    if (rc == -2) drop(r);
    return rc ? -1 : 0;
}

static const char *tag_of(redisReply *rep) {
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || rep->element[0]->type != REDIS_REPLY_STRING)
        return "";
    return rep->element[0]->str;
}

static void claim_reply(void *ud, int i, redisReply *rep) {
    redis_claim *c = (redis_claim *)ud + i;
    const char *t = tag_of(rep);
    if (strcmp(t, "claimed") == 0) {
        c->status = RC_CLAIMED;
    } else if (strcmp(t, "done") == 0 && rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING) {
        c->result = malloc(rep->element[1]->len + 1);
        if (!c->result) return;
        memcpy(c->result, rep->element[1]->str, rep->element[1]->len);
        c->result_len = rep->element[1]->len;
        c->status = RC_DONE;
    } else {   /* answers that name something: the known digest, the crashes counted, the holding worker */
        const int st = strcmp(t, "conflict") == 0 ? RC_CONFLICT
                     : strcmp(t, "poison") == 0   ? RC_POISON
                     : strcmp(t, "parked") == 0   ? RC_PARKED
                                                  : RC_ERR;
        if (st == RC_ERR) return;
        c->status = st;
        if (rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING)
            snprintf(c->holder, sizeof(c->holder), "%s", rep->element[1]->str);
    }
}

void redis_set_max_crashes(sl_redis *r, int64_t n) { r->max_crashes = n; }

int redis_claim_batch(sl_redis *r, redis_claim *c, int n) {
    for (int i = 0; i < n; i++) {
        c[i].status = RC_ERR;
        c[i].result = NULL;
        c[i].result_len = 0;
        c[i].holder[0] = 0;
    }
    if (n == 0) return 0;
    if (ensure(r)) return -1;
    for (int i = 0; i < n; i++) {
        script_call sc;
        call_init(&sc, r, "claim", c[i].id);
        call_num(&sc, 0, r->lease_ms);
        call_num(&sc, 1, r->ttl_ms);
        call_num(&sc, 2, c[i].partition);
        call_num(&sc, 3, c[i].offset);
        call_arg(&sc, r->prefix, strlen(r->prefix));
        call_arg(&sc, c[i].digest ? c[i].digest : "", c[i].digest ? strlen(c[i].digest) : 0);
        call_num(&sc, 4, r->max_crashes);
        if (append(r, &sc)) {
            drop(r);
            return -1;
        }
    }
    return read_replies(r, n, claim_reply, c);
}

static void done_reply(void *ud, int i, redisReply *rep) {
    redis_done *d = (redis_done *)ud + i;
    const char *t = tag_of(rep);
    if (strcmp(t, "ok") == 0) d->status = RC_OK;
    else if (strcmp(t, "already") == 0) d->status = RC_ALREADY;
}

int redis_done_batch(sl_redis *r, redis_done *d, int n) {
    for (int i = 0; i < n; i++) d[i].status = RC_ERR;
    if (n == 0) return 0;
    if (ensure(r)) return -1;
    for (int i = 0; i < n; i++) {
        script_call sc;
        call_init(&sc, r, d[i].failed ? "failed" : "done", d[i].id);
        call_arg(&sc, d[i].result, d[i].result_len);
        call_num(&sc, 0, r->ttl_ms);
        call_num(&sc, 1, d[i].tokens_out);
        call_arg(&sc, d[i].digest ? d[i].digest : "", d[i].digest ? strlen(d[i].digest) : 0);
        if (append(r, &sc)) {
            drop(r);
            return -1;
        }
    }
    return read_replies(r, n, done_reply, d);
}

static void renew_reply(void *ud, int i, redisReply *rep) {
    int *st = ud;
    st[i] = strcmp(tag_of(rep), "ok") == 0 ? RC_OK : RC_LOST;
}

int redis_renew_batch(sl_redis *r, const char *const *ids, int n, int *status) {
    for (int i = 0; i < n; i++) status[i] = RC_ERR;
    if (n == 0) return 0;
    if (ensure(r)) return -1;
    for (int i = 0; i < n; i++) {
        script_call sc;
        call_init(&sc, r, "renew", ids[i]);
        call_num(&sc, 0, r->lease_ms);
        if (append(r, &sc)) {
            drop(r);
            return -1;
        }
    }
    return read_replies(r, n, renew_reply, status);
}

static void ignore_reply(void *ud, int i, redisReply *rep) {
    (void)ud;
    (void)i;
    (void)rep;
}

int redis_release_batch(sl_redis *r, const char *const *ids, int n) {
    if (n == 0) return 0;
    if (ensure(r)) return -1;
    for (int i = 0; i < n; i++) {
        script_call sc;
        call_init(&sc, r, "release", ids[i]);
        if (append(r, &sc)) {
            drop(r);
            return -1;
        }
    }
    return read_replies(r, n, ignore_reply, NULL);
}

int redis_cancel_sweep(sl_redis *r, const char *const *ids, int n, uint8_t *cancelled) {
    memset(cancelled, 0, (size_t)n);
    if (n == 0) return 0;
    if (ensure(r)) return -1;
    const char **argv = malloc(((size_t)n + 1) * sizeof(char *));
    size_t *argl = malloc(((size_t)n + 1) * sizeof(size_t));
    char **keys = calloc((size_t)n, sizeof(char *));
    int rc = -1;
    if (!argv || !argl || !keys) goto out;
    argv[0] = "MGET";
    argl[0] = 4;
    for (int i = 0; i < n; i++) {
        if (asprintf(&keys[i], "%scancel:%s", r->prefix, ids[i]) < 0) {
            keys[i] = NULL;
            goto out;
        }
        argv[i + 1] = keys[i];
        argl[i + 1] = strlen(keys[i]);
    }
    redisReply *rep = redisCommandArgv(r->ctx, n + 1, argv, argl);
    if (!rep) {
        drop(r);
        goto out;
    }
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)n) {
        for (int i = 0; i < n; i++) cancelled[i] = rep->element[i]->type != REDIS_REPLY_NIL;
        rc = 0;
    }
    freeReplyObject(rep);
out:
    if (keys)
        for (int i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(argv);
    free(argl);
    return rc;
}

int redis_heartbeat(sl_redis *r, const char *const *fv, int n_pairs, int64_t ttl_ms) {
    if (ensure(r)) return -1;
    char key[256];
    snprintf(key, sizeof(key), "%sworker:%s", r->prefix, r->worker);
    const char *argv[4 + 2 * 16];
    size_t argl[4 + 2 * 16];
    if (n_pairs > 16) n_pairs = 16;
    argv[0] = "HSET", argl[0] = 4;
    argv[1] = key, argl[1] = strlen(key);
    for (int i = 0; i < 2 * n_pairs; i++) argv[2 + i] = fv[i], argl[2 + i] = strlen(fv[i]);
    argv[2 + 2 * n_pairs] = "incarnation", argl[2 + 2 * n_pairs] = 11;   /* claims name it: see JOB_SCRIPT */
    argv[3 + 2 * n_pairs] = r->inc, argl[3 + 2 * n_pairs] = strlen(r->inc);
    n_pairs++;
    char ttl[32];
    snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
    if (redisAppendCommandArgv(r->ctx, 2 + 2 * n_pairs, argv, argl) != REDIS_OK ||
        redisAppendCommand(r->ctx, "PEXPIRE %s %s", key, ttl) != REDIS_OK) {
        drop(r);
        return -1;
    }
    return read_replies(r, 2, ignore_reply, NULL);
}
