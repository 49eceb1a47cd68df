/* config.c — see config.h. The table below is the configuration reference (README mirrors it). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_registry.h"

typedef enum { K_STR, K_INT, K_ENUM } key_type;

typedef struct {
    const char *key;
    const char *def;      /* NULL = required (or optional with no default, see `required`) */
    key_type type;
    int64_t lo, hi;       /* K_INT range */
    const char *choices;  /* K_ENUM: "a|b|c" */
    int required;
    const char *doc;
} key_spec;

static const key_spec KEYS[] = {
    {"kafka.bootstrap.servers", NULL, K_STR, 0, 0, NULL, 1, "Kafka brokers host:port,... (passed to librdkafka)"},
    {"kafka.group.id", "sluice", K_STR, 0, 0, NULL, 0, "consumer group; workers sharing it share the partitions"},
    {"kafka.auto.offset.reset", "earliest", K_STR, 0, 0, NULL, 0, "where a new group starts (a job queue never skips jobs)"},
    {"kafka.startup_timeout_ms", "0", K_INT, 0, 86400000, NULL, 0, "exit 1 when no broker answers this long after start (0 = wait forever)"},
    {"topic.jobs", "sluice.jobs", K_STR, 0, 0, NULL, 0, "input topic (Avro Job)"},
    {"topic.results", "sluice.results", K_STR, 0, 0, NULL, 0, "default result topic (a job's reply_topic overrides it)"},
    {"topic.chunks", "sluice.chunks", K_STR, 0, 0, NULL, 0, "streaming TokenChunk topic (jobs with stream=true)"},
    {"topic.dlq", "sluice.jobs.dlq", K_STR, 0, 0, NULL, 0, "dead-letter topic for undecodable or invalid jobs"},
    {"redis.url", "redis://127.0.0.1:6379", K_STR, 0, 0, NULL, 0, "redis://host:port[/db]"},
    {"redis.user", "", K_STR, 0, 0, NULL, 0, "Redis ACL user (AUTH user password; empty = AUTH password alone)"},
    {"redis.password", "", K_STR, 0, 0, NULL, 0, "Redis password (requirepass or the ACL user's); empty = no AUTH"},
    {"redis.prefix", "sluice:", K_STR, 0, 0, NULL, 0, "key prefix of every Redis key"},
    {"redis.timeout_ms", "500", K_INT, 10, 60000, NULL, 0, "connect and command timeout"},
    {"redis.ttl_s", "86400", K_INT, 1, 31536000, NULL, 0, "TTL of job state and result copies"},
    {"lease.ms", "60000", K_INT, 1000, 86400000, NULL, 0, "claim lease; another worker may take the job after it"},
    {"lease.renew_ms", "10000", K_INT, 100, 86400000, NULL, 0, "lease renewal period for running jobs"},
    {"model.path", NULL, K_STR, 0, 0, NULL, 1, "checkpoint directory (config.json + safetensors)"},
    {"engine.backend", "cpu", K_ENUM, 0, 0, "cpu|cuda", 0, "inference backend"},
    {"engine.threads", "0", K_INT, 0, 1024, NULL, 0, "CPU backend threads (0 = online cores)"},
    {"engine.max_batch", "64", K_INT, 1, 4096, NULL, 0, "max running sequences per engine step"},
    {"engine.prefill_chunk", "0", K_INT, 0, 1 << 20, NULL, 0, "max prompt tokens per sequence per step (0 = whole)"},
    {"engine.max_step_tokens", "0", K_INT, 0, 1 << 24, NULL, 0, "token budget per step (0 = engine default 8192)"},
    {"engine.state_mb", "0", K_INT, 0, 1 << 22, NULL, 0, "memory for per-sequence state (0 = engine default 1 GiB)"},
    {"engine.gpu_memory_fraction", "0.9", K_STR, 0, 0, NULL, 0, "cuda: share of GPU memory the engine may take (0.05-1)"},
    {"engine.self_check", "on", K_ENUM, 0, 0, "on|off", 0, "cuda: check the GPU path against the CPU reference at open"},
    {"engine.deterministic", "off", K_ENUM, 0, 0, "on|off", 0, "cuda: a job's tokens never depend on its batch (slower)"},
    {"engine.overlap", "on", K_ENUM, 0, 0, "on|off", 0, "plan decode step N+1 while step N runs"},
    {"engine.index_key_dtype", "bf16", K_ENUM, 0, 0, "bf16|fp8", 0,
     "how the lightning indexer's keys are stored: fp8 halves the bytes it reads (index_head_dim a multiple of 64)"},
    {"engine.kv_dtype", "bf16", K_ENUM, 0, 0, "bf16|fp8", 0,
     "how the attention's keys are stored: fp8 = DeepSeek's FP8 KV, 592 bytes a V4-Flash key against 1,024 "
     "(head_dim - rope_dim a multiple of 64; cuda: at most 1024, rope_dim a multiple of 8)"},
    {"engine.devices", "all", K_STR, 0, 0, NULL, 0, "cuda: GPUs the model is split across, e.g. 0,1 (all = every visible one)"},
    {"worker.id", "", K_STR, 0, 0, NULL, 0, "worker identity in Redis (default: host name); keep it stable across restarts"},
    {"worker.max_inflight", "256", K_INT, 1, 1 << 20, NULL, 0, "jobs admitted to the engine and not finished before partitions pause"},
    {"worker.max_pending", "20000", K_INT, 1, 1 << 24, NULL, 0, "messages consumed and not yet committed before partitions pause"},
    {"worker.grace_ms", "20000", K_INT, 0, 3600000, NULL, 0, "SIGTERM/SIGINT drain time; jobs still running after it are handed back"},
    {"worker.heartbeat_ms", "5000", K_INT, 100, 3600000, NULL, 0, "period of the sluice:worker:<id> heartbeat (TTL = 3 periods)"},
    {"worker.cancel_sweep_ms", "100", K_INT, 10, 60000, NULL, 0, "period of the MGET sweep of sluice:cancel:<id> keys"},
    {"worker.max_job_crashes", "3", K_INT, 0, 1000000, NULL, 0, "a job whose workers died running it this often goes to the DLQ (0 = never)"},
    {"worker.parked_recheck_ms", "1000", K_INT, 10, 600000, NULL, 0, "how often parked jobs (held by another worker) are re-checked"},
    {"input.framing", "auto", K_ENUM, 0, 0, "auto|confluent|bare", 0, "job value framing; auto: first byte 0 = Confluent"},
    {"input.schema_ids", "", K_STR, 0, 0, NULL, 0, "comma list of accepted Confluent schema ids (empty = any)"},
    {"schema.registry.url", "", K_STR, 0, 0, NULL, 0, "Schema Registry http://host:port[/path]: framed jobs' writer schemas (empty = none)"},
    {"schema.registry.timeout_ms", "1000", K_INT, 50, 60000, NULL, 0, "per request to the schema registry (3 attempts)"},
    {"input.max_bytes", "1048576", K_INT, 16, 1 << 28, NULL, 0, "larger job messages go to the DLQ undecoded"},
    {"job.max_tokens_limit", "0", K_INT, 0, 1 << 24, NULL, 0, "upper bound for max_tokens (0 = the model context)"},
    {"output.result_schema_id", "0", K_INT, 0, 2147483647, NULL, 0, "schema id written in Confluent-framed results"},
    {"output.chunk_schema_id", "0", K_INT, 0, 2147483647, NULL, 0, "schema id written in Confluent-framed chunks"},
    {"metrics.port", "0", K_INT, 0, 65535, NULL, 0, "HTTP port for /metrics and /healthz (0 = off)"},
    {"metrics.bind", "127.0.0.1", K_STR, 0, 0, NULL, 0, "address the metrics endpoint listens on"},
    {"log.level", "info", K_ENUM, 0, 0, "error|warn|info|debug", 0, "log verbosity (stderr)"},
};
#define N_KEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

static const key_spec *spec_of(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].key, key) == 0) return &KEYS[i];
    return NULL;
}

void cfg_init(cfg *c) { memset(c, 0, sizeof(*c)); }

void cfg_free(cfg *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].value);
    }
    free(c->e);
    memset(c, 0, sizeof(*c));
}

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

int cfg_set(cfg *c, const char *key, const char *value, char *err, size_t errlen) {
    if (!key[0]) {
        snprintf(err, errlen, "config: empty key");
        return -1;
    }
    if (strncmp(key, "kafka.", 6) != 0 && !spec_of(key)) {
        snprintf(err, errlen, "config: unknown key '%s' (see sluice-worker --help)", key);
        return -1;
    }
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->e[i].key, key) == 0) {
            char *v = strdup(value);
            if (!v) goto oom;
            free(c->e[i].value);
            c->e[i].value = v;
            return 0;
        }
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        cfg_entry *e = realloc(c->e, (size_t)cap * sizeof(*e));
        if (!e) goto oom;
        c->e = e;
        c->cap = cap;
    }
    c->e[c->n].key = strdup(key);
    c->e[c->n].value = strdup(value);
    if (!c->e[c->n].key || !c->e[c->n].value) {
        free(c->e[c->n].key);
        free(c->e[c->n].value);
        goto oom;
    }
    c->n++;
    return 0;
oom:
    snprintf(err, errlen, "config: out of memory");
    return -1;
}

int cfg_set_kv(cfg *c, const char *kv, char *err, size_t errlen) {
    const char *eq = strchr(kv, '=');
    if (!eq) {
        snprintf(err, errlen, "config: '%s' is not key=value", kv);
        return -1;
    }
    char buf[1024];
    size_t klen = (size_t)(eq - kv);
    if (klen >= sizeof(buf)) {
        snprintf(err, errlen, "config: key too long");
        return -1;
    }
    memcpy(buf, kv, klen);
    buf[klen] = 0;
    char *val = strdup(eq + 1);
    if (!val) {
        snprintf(err, errlen, "config: out of memory");
        return -1;
    }
    int rc = cfg_set(c, trim(buf), trim(val), err, errlen);
    free(val);
    return rc;
}

int cfg_load_file(cfg *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            snprintf(err, errlen, "config: %s:%d: line too long", path, lineno);
            rc = -1;
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char e2[512];
        if (cfg_set_kv(c, s, e2, sizeof(e2)) != 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, e2);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

static int parse_int(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

int cfg_validate(const cfg *c, char *err, size_t errlen) {
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        const char *v = cfg_get(c, k->key);
        if (k->required && (!v || !v[0])) {
            snprintf(err, errlen, "config: %s is required (%s)", k->key, k->doc);
            return -1;
        }
        if (!v) continue;
        if (k->type == K_INT) {
            int64_t x;
            if (parse_int(v, &x) != 0 || x < k->lo || x > k->hi) {
                snprintf(err, errlen, "config: %s='%s' must be an integer in [%lld, %lld]", k->key, v,
                         (long long)k->lo, (long long)k->hi);
                return -1;
            }
        } else if (k->type == K_ENUM) {
            const char *p = k->choices;
            int ok = 0;
            size_t vl = strlen(v);
            while (*p) {
                const char *bar = strchr(p, '|');
                size_t l = bar ? (size_t)(bar - p) : strlen(p);
                if (l == vl && strncmp(p, v, l) == 0) ok = 1;
                p += l + (bar ? 1 : 0);
            }
            if (!ok) {
                snprintf(err, errlen, "config: %s='%s' must be one of %s", k->key, v, k->choices);
                return -1;
            }
        }
    }
    const char *ids = cfg_get(c, "input.schema_ids");
    for (const char *p = ids; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 2147483647L || (*end && *end != ',')) {
            snprintf(err, errlen, "config: input.schema_ids='%s' must be a comma list of ids", ids);
            return -1;
        }
        p = *end ? end + 1 : end;
    }
    const char *reg = cfg_get(c, "schema.registry.url");
    char rerr[400];
    if (reg[0] && registry_check_url(reg, rerr, sizeof(rerr))) {
        snprintf(err, errlen, "config: schema.registry.url: %s", rerr);
        return -1;
    }
    const char *url = cfg_get(c, "redis.url");
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(err, errlen, "config: redis.url='%s' must look like redis://host:port[/db]", url);
        return -1;
    }
    if (strchr(url, '@')) {
        snprintf(err, errlen, "config: redis.url must not hold credentials; set redis.user and redis.password");
        return -1;
    }
    if (cfg_get(c, "redis.user")[0] && !cfg_get(c, "redis.password")[0]) {
        snprintf(err, errlen, "config: redis.user needs redis.password");
        return -1;
    }
    return 0;
}

const char *cfg_get(const cfg *c, const char *key) {
    for (int i = c->n - 1; i >= 0; i--)
        if (strcmp(c->e[i].key, key) == 0) return c->e[i].value;
    const key_spec *k = spec_of(key);
    return k ? k->def : NULL;
}

int64_t cfg_int(const cfg *c, const char *key) {
    const char *v = cfg_get(c, key);
    int64_t x = 0;
    if (!v || parse_int(v, &x) != 0) return 0;
    return x;
}

void cfg_print_reference(void *stream) {
    FILE *f = stream;
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        fprintf(f, "  %-26s %-24s %s\n", k->key, k->required ? "(required)" : (k->def[0] ? k->def : "\"\""),
                k->doc);
    }
    fprintf(f, "  %-26s %-24s %s\n", "kafka.*", "", "any librdkafka property, passed as is to consumer and producer");
    fprintf(f, "  %-26s %-24s %s\n", "kafka.consumer.*", "", "librdkafka property for the consumer only");
    fprintf(f, "  %-26s %-24s %s\n", "kafka.producer.*", "", "librdkafka property for the producer only");
}
