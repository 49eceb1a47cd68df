/* codec.c — see codec.h. avro-c generic values; one value per schema reused across calls. */
#include "codec.h"

#include <avro.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_scan.h"
#include "job_resolver.h"
#include "schemas_gen.h"   /* SL_JOB_AVSC, SL_RESULT_AVSC, SL_CHUNK_AVSC (generated from schemas/) */

struct sl_codec {
    avro_schema_t schema[3];
    avro_value_iface_t *iface[3];
    avro_value_t value[3];
    avro_reader_t reader;
};
enum { S_JOB = 0, S_RESULT = 1, S_CHUNK = 2 };

// ---------------------------------------------------------------- capping allocator

static size_t g_max_alloc = (size_t)64 << 20;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (nsize > g_max_alloc) return NULL;   /* avro-c reports "Cannot allocate ..." and fails the read */
    return realloc(ptr, nsize);
}

void codec_install_allocator(size_t max_alloc) {
    g_max_alloc = max_alloc;
    avro_set_allocator(capped_alloc, NULL);
}

// ---------------------------------------------------------------- setup

int codec_new(sl_codec **out, char *err, size_t errlen) {
    static const char *const json[3] = {SL_JOB_AVSC, SL_RESULT_AVSC, SL_CHUNK_AVSC};
    sl_codec *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "codec: out of memory");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        if (avro_schema_from_json_length(json[i], strlen(json[i]), &c->schema[i]) != 0) {
            snprintf(err, errlen, "codec: bad built-in schema %d: %s", i, avro_strerror());
            codec_free(c);
            return -1;
        }
        c->iface[i] = avro_generic_class_from_schema(c->schema[i]);
        if (!c->iface[i] || avro_generic_value_new(c->iface[i], &c->value[i]) != 0) {
            snprintf(err, errlen, "codec: cannot build Avro class: %s", avro_strerror());
            codec_free(c);
            return -1;
        }
    }
    c->reader = avro_reader_memory("", 0);
    if (!c->reader) {
        snprintf(err, errlen, "codec: cannot make Avro reader");
        codec_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void codec_free(sl_codec *c) {
    if (!c) return;
    for (int i = 0; i < 3; i++) {
        if (c->iface[i]) {
            if (c->value[i].self) avro_value_decref(&c->value[i]);
            avro_value_iface_decref(c->iface[i]);
        }
        if (c->schema[i]) avro_schema_decref(c->schema[i]);
    }
    if (c->reader) avro_reader_free(c->reader);
    free(c);
}

// ---------------------------------------------------------------- framing

int codec_unframe(const void *buf, size_t len, int framing, const uint8_t **payload, size_t *plen,
                  int32_t *schema_id, char *err, size_t errlen) {
    const uint8_t *b = buf;
    if (!buf || len == 0) {
        snprintf(err, errlen, "empty message value");
        return -1;
    }
    int confluent = framing == FRAMING_CONFLUENT || (framing == FRAMING_AUTO && b[0] == 0);
    if (!confluent) {
        *payload = b;
        *plen = len;
        *schema_id = -1;
        return 0;
    }
    if (b[0] != 0) {
        snprintf(err, errlen, "framing: expected Confluent magic byte 0, got 0x%02x", b[0]);
        return -1;
    }
    if (len < 5) {
        snprintf(err, errlen, "framing: Confluent header needs 5 bytes, message has %zu", len);
        return -1;
    }
    uint32_t id = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (id > 0x7fffffffu) {
        snprintf(err, errlen, "framing: schema id %u out of range", id);
        return -1;
    }
    *schema_id = (int32_t)id;
    *payload = b + 5;
    *plen = len - 5;
    return 0;
}

// ---------------------------------------------------------------- decode helpers

static char *dup_len(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* avro-c strings: size includes the terminating NUL. */
static int get_str(avro_value_t *v, char **out, size_t *len) {
    const char *s;
    size_t n;
    if (avro_value_get_string(v, &s, &n) != 0) return -1;
    if (n > 0) n--;
    *out = dup_len(s, n);
    if (len) *len = n;
    return *out ? 0 : -1;
}

static int get_int_array(avro_value_t *arr, int32_t **out, int *n) {
    size_t sz;
    *out = NULL;
    *n = 0;
    if (avro_value_get_size(arr, &sz) != 0) return -1;
    *n = (int)sz;
    *out = malloc((sz ? sz : 1) * sizeof(int32_t));
    if (!*out) return -1;
    for (size_t i = 0; i < sz; i++) {
        avro_value_t e;
        if (avro_value_get_by_index(arr, i, &e, NULL) != 0 || avro_value_get_int(&e, &(*out)[i]) != 0)
            return -1;
    }
    return 0;
}

static int field(avro_value_t *rec, const char *name, avro_value_t *f) {
    return avro_value_get_by_name(rec, name, f, NULL);
}

/* Read bare Avro bytes into the codec's value for schema s; checks that every byte is used. */
static int read_value(sl_codec *c, int s, const void *buf, size_t len, char *err, size_t errlen) {
    avro_value_reset(&c->value[s]);
    avro_reader_memory_set_source(c->reader, buf, (int64_t)len);
    if (avro_value_read(c->reader, &c->value[s]) != 0) {
        const char *m = avro_strerror();
        snprintf(err, errlen, "avro: cannot decode %s: %s", s == S_JOB ? "Job" : s == S_RESULT ? "Result" : "TokenChunk",
                 m && m[0] ? m : "truncated or malformed");
        avro_value_reset(&c->value[s]);
        return -1;
    }
    char extra;
    if (avro_read(c->reader, &extra, 1) == 0) {   /* (avro_reader_is_eof only works on files) */
        snprintf(err, errlen, "avro: trailing bytes after the %s record (wrong schema?)",
                 s == S_JOB ? "Job" : s == S_RESULT ? "Result" : "TokenChunk");
        return -1;
    }
    return 0;
}

/* ---- structural pre-check of a Job payload (before avro-c sees it; avro_scan.h says why)
 * kind: 0 ints, 1 strings, 2 map of strings, 3 chat messages (role, content, null or reasoning) */
static int scan_blocks(scan *s, int kind) {
    for (;;) {
        int64_t count, x;
        if (scan_block_count(s, &count)) return -1;
        if (count == 0) return 0;
        for (int64_t i = 0; i < count; i++) {
            if (kind == 0 && scan_long(s, &x, 5)) return -1;
            if (kind >= 1 && scan_string(s)) return -1;
            if (kind >= 2 && scan_string(s)) return -1;
            if (kind == 3 && (scan_union(s, &x, 2) || (x == 1 && scan_string(s)))) return -1;
        }
    }
}

/* 0 for the current layout, 1 for the v1 layout (the bytes end after metadata), -1 with err. */
static int job_prescan(const uint8_t *buf, size_t len, char *err, size_t errlen) {
    scan s = {buf, buf + len, NULL};
    int64_t x, b;
#define STEP(name, expr)          \
    do {                          \
        s.what = name;            \
        if (expr) goto bad;       \
    } while (0)
    STEP("id", scan_string(&s));
    STEP("prompt", scan_union(&s, &b, 2) || (b == 0 ? scan_string(&s) : scan_blocks(&s, 0)));
    STEP("max_tokens", scan_long(&s, &x, 5));
    STEP("tenant", scan_string(&s));
    STEP("temperature", scan_skip(&s, 4));
    STEP("top_p", scan_skip(&s, 4));
    STEP("top_k", scan_long(&s, &x, 5));
    STEP("min_p", scan_skip(&s, 4));
    STEP("repetition_penalty", scan_skip(&s, 4));
    STEP("seed", scan_union(&s, &b, 2) || (b == 1 && scan_long(&s, &x, 10)));
    STEP("stop", scan_blocks(&s, 1));
    STEP("stop_token_ids", scan_blocks(&s, 0));
    STEP("ignore_eos", s.p >= s.end || *s.p++ > 1);
    STEP("logprobs", s.p >= s.end || *s.p++ > 1);
    STEP("stream", s.p >= s.end || *s.p++ > 1);
    STEP("priority", scan_long(&s, &x, 5));
    STEP("deadline_ms", scan_union(&s, &b, 2) || (b == 1 && scan_long(&s, &x, 10)));
    STEP("reply_topic", scan_union(&s, &b, 2) || (b == 1 && scan_string(&s)));
    STEP("metadata", scan_blocks(&s, 2));
    if (s.p == s.end) return 1;
    STEP("messages", scan_blocks(&s, 3));
    STEP("thinking", s.p >= s.end || *s.p++ > 1);
#undef STEP
    if (s.p != s.end) {
        snprintf(err, errlen, "avro: %zu trailing bytes after the Job record (wrong schema?)", (size_t)(s.end - s.p));
        return -1;
    }
    return 0;
bad:
    snprintf(err, errlen, "avro: cannot decode Job: field '%s' is truncated or malformed at byte %zu", s.what,
             (size_t)(s.p - buf));
    return -1;
}

void job_free(sl_job *j) {
    free(j->id);
    free(j->prompt_text);
    free(j->prompt_ids);
    free(j->tenant);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->stop_len);
    free(j->stop_ids);
    free(j->reply_topic);
    for (int i = 0; i < j->n_meta; i++) {
        free(j->meta_k[i]);
        free(j->meta_v[i]);
    }
    free(j->meta_k);
    free(j->meta_v);
    for (int i = 0; i < j->n_messages; i++) {
        free(j->messages[i].role);
        free(j->messages[i].content);
        free(j->messages[i].reasoning_content);
    }
    free(j->messages);
    memset(j, 0, sizeof(*j));
}

/* The encoding of the defaults of the fields added after v1, in order: messages [] and thinking false. */
static const uint8_t JOB_V1_TAIL[2] = {0, 0};
/* Result: content null, reasoning_content null (union branch 0). */
static const uint8_t RESULT_V1_TAIL[2] = {0, 0};

static int job_from_value(sl_codec *c, sl_job *j, char *err, size_t errlen);

/* buf[0..len) + tail in a malloc'd buffer. */
static uint8_t *with_tail(const void *buf, size_t len, const uint8_t *tail, size_t tlen) {
    uint8_t *b = malloc(len + tlen);
    if (!b) return NULL;
    memcpy(b, buf, len);
    memcpy(b + len, tail, tlen);
    return b;
}

int codec_decode_job(sl_codec *c, const void *buf, size_t len, sl_job *j, char *err, size_t errlen) {
    memset(j, 0, sizeof(*j));
    int layout = job_prescan(buf, len, err, errlen);
    if (layout < 0) return -1;
    uint8_t *padded = NULL;
    if (layout == 1) {   /* v1 bytes: read them with the added fields' defaults appended */
        if (!(padded = with_tail(buf, len, JOB_V1_TAIL, sizeof(JOB_V1_TAIL))))
            return snprintf(err, errlen, "avro: out of memory"), -1;
        buf = padded;
        len += sizeof(JOB_V1_TAIL);
    }
    int rc = read_value(c, S_JOB, buf, len, err, errlen);
    free(padded);
    if (rc != 0) return -1;
    return job_from_value(c, j, err, errlen);
}

int codec_decode_job_resolved(sl_codec *c, sl_job_resolver *r, const void *buf, size_t len, sl_job *j, char *err,
                              size_t errlen) {
    memset(j, 0, sizeof(*j));
    if (job_resolver_read(r, buf, len, &c->value[S_JOB], err, errlen)) return -1;
    return job_from_value(c, j, err, errlen);
}

/* The codec's Job value (just read) into j; the value is reset either way. */
static int job_from_value(sl_codec *c, sl_job *j, char *err, size_t errlen) {
    avro_value_t *v = &c->value[S_JOB], f, b;
    int disc;
    int bval;
    if (field(v, "id", &f) || get_str(&f, &j->id, &j->id_len)) goto bad;
    if (field(v, "prompt", &f) || avro_value_get_discriminant(&f, &disc) ||
        avro_value_get_current_branch(&f, &b))
        goto bad;
    j->prompt_is_text = disc == 0;
    if (disc == 0) {
        if (get_str(&b, &j->prompt_text, &j->prompt_text_len)) goto bad;
    } else if (get_int_array(&b, &j->prompt_ids, &j->n_prompt_ids)) {
        goto bad;
    }
    if (field(v, "max_tokens", &f) || avro_value_get_int(&f, &j->max_tokens)) goto bad;
    if (field(v, "tenant", &f) || get_str(&f, &j->tenant, NULL)) goto bad;
    if (field(v, "temperature", &f) || avro_value_get_float(&f, &j->temperature)) goto bad;
    if (field(v, "top_p", &f) || avro_value_get_float(&f, &j->top_p)) goto bad;
    if (field(v, "top_k", &f) || avro_value_get_int(&f, &j->top_k)) goto bad;
    if (field(v, "min_p", &f) || avro_value_get_float(&f, &j->min_p)) goto bad;
    if (field(v, "repetition_penalty", &f) || avro_value_get_float(&f, &j->repetition_penalty)) goto bad;
    if (field(v, "seed", &f) || avro_value_get_discriminant(&f, &disc)) goto bad;
    if (disc == 1) {
        if (avro_value_get_current_branch(&f, &b) || avro_value_get_long(&b, &j->seed)) goto bad;
        j->has_seed = 1;
    }
    if (field(v, "stop", &f)) goto bad;
    size_t n;
    if (avro_value_get_size(&f, &n)) goto bad;
    j->stop = calloc(n ? n : 1, sizeof(char *));
    j->stop_len = calloc(n ? n : 1, sizeof(size_t));
    if (!j->stop || !j->stop_len) goto bad;
    for (size_t i = 0; i < n; i++) {
        avro_value_t e;
        if (avro_value_get_by_index(&f, i, &e, NULL) || get_str(&e, &j->stop[i], &j->stop_len[i])) goto bad;
        j->n_stop = (int)i + 1;
    }
    if (field(v, "stop_token_ids", &f) || get_int_array(&f, &j->stop_ids, &j->n_stop_ids)) goto bad;
    if (field(v, "ignore_eos", &f) || avro_value_get_boolean(&f, &bval)) goto bad;
    j->ignore_eos = bval;
    if (field(v, "logprobs", &f) || avro_value_get_boolean(&f, &bval)) goto bad;
    j->logprobs = bval;
    if (field(v, "stream", &f) || avro_value_get_boolean(&f, &bval)) goto bad;
    j->stream = bval;
    if (field(v, "priority", &f) || avro_value_get_int(&f, &j->priority)) goto bad;
    if (field(v, "deadline_ms", &f) || avro_value_get_discriminant(&f, &disc)) goto bad;
    if (disc == 1) {
        if (avro_value_get_current_branch(&f, &b) || avro_value_get_long(&b, &j->deadline_ms)) goto bad;
        j->has_deadline = 1;
    }
    if (field(v, "reply_topic", &f) || avro_value_get_discriminant(&f, &disc)) goto bad;
    if (disc == 1) {
        if (avro_value_get_current_branch(&f, &b) || get_str(&b, &j->reply_topic, NULL)) goto bad;
    }
    if (field(v, "metadata", &f) || avro_value_get_size(&f, &n)) goto bad;
    j->meta_k = calloc(n ? n : 1, sizeof(char *));
    j->meta_v = calloc(n ? n : 1, sizeof(char *));
    if (!j->meta_k || !j->meta_v) goto bad;
    for (size_t i = 0; i < n; i++) {
        avro_value_t e;
        const char *key;
        if (avro_value_get_by_index(&f, i, &e, &key)) goto bad;
        j->meta_k[i] = strdup(key);
        if (!j->meta_k[i] || get_str(&e, &j->meta_v[i], NULL)) {
            j->n_meta = (int)i + 1;
            goto bad;
        }
        j->n_meta = (int)i + 1;
    }
    if (field(v, "messages", &f) || avro_value_get_size(&f, &n)) goto bad;
    j->messages = calloc(n ? n : 1, sizeof(*j->messages));
    if (!j->messages) goto bad;
    for (size_t i = 0; i < n; i++) {
        avro_value_t e, g;
        sl_job_message *msg = &j->messages[i];
        j->n_messages = (int)i + 1;
        if (avro_value_get_by_index(&f, i, &e, NULL) || field(&e, "role", &g) || get_str(&g, &msg->role, NULL) ||
            field(&e, "content", &g) || get_str(&g, &msg->content, &msg->content_len) ||
            field(&e, "reasoning_content", &g) || avro_value_get_discriminant(&g, &disc))
            goto bad;
        if (disc == 1 && (avro_value_get_current_branch(&g, &b) ||
                          get_str(&b, &msg->reasoning_content, &msg->reasoning_content_len)))
            goto bad;
    }
    if (field(v, "thinking", &f) || avro_value_get_boolean(&f, &bval)) goto bad;
    j->thinking = bval;
    avro_value_reset(v);
    return 0;
bad:
    snprintf(err, errlen, "avro: Job value does not match the schema (or out of memory)");
    avro_value_reset(v);
    job_free(j);
    return -1;
}

// ---------------------------------------------------------------- encode helpers

static int set_str(avro_value_t *f, const char *s, size_t n) {
    /* set_string_len copies `size` bytes including a NUL terminator */
    char stackbuf[256];
    char *tmp = n < sizeof(stackbuf) ? stackbuf : malloc(n + 1);
    if (!tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    int rc = avro_value_set_string_len(f, tmp, n + 1);
    if (tmp != stackbuf) free(tmp);
    return rc;
}

static int set_int_array(avro_value_t *arr, const int32_t *x, int n) {
    for (int i = 0; i < n; i++) {
        avro_value_t e;
        if (avro_value_append(arr, &e, NULL) || avro_value_set_int(&e, x[i])) return -1;
    }
    return 0;
}

static int set_null_or_str(avro_value_t *u, const char *s, size_t n) {
    avro_value_t b;
    if (!s) return avro_value_set_branch(u, 0, &b) || avro_value_set_null(&b);
    return avro_value_set_branch(u, 1, &b) || set_str(&b, s, n);
}

static int set_map(avro_value_t *m, const char *const *k, const char *const *v, int n) {
    for (int i = 0; i < n; i++) {
        avro_value_t e;
        if (avro_value_add(m, k[i], &e, NULL, NULL) || set_str(&e, v[i], strlen(v[i]))) return -1;
    }
    return 0;
}

static int write_value(avro_value_t *v, int32_t schema_id, uint8_t **out, size_t *outlen) {
    size_t sz;
    if (avro_value_sizeof(v, &sz)) return -1;
    size_t hdr = schema_id >= 0 ? 5 : 0;
    uint8_t *buf = malloc(sz + hdr + 1);
    if (!buf) return -1;
    if (hdr) {
        buf[0] = 0;
        buf[1] = (uint8_t)((uint32_t)schema_id >> 24);
        buf[2] = (uint8_t)((uint32_t)schema_id >> 16);
        buf[3] = (uint8_t)((uint32_t)schema_id >> 8);
        buf[4] = (uint8_t)schema_id;
    }
    avro_writer_t w = avro_writer_memory((const char *)buf + hdr, (int64_t)sz);
    if (!w) {
        free(buf);
        return -1;
    }
    int rc = avro_value_write(w, v);
    avro_writer_free(w);
    if (rc) {
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = sz + hdr;
    return 0;
}

int codec_encode_job(sl_codec *c, const sl_job *j, int32_t schema_id, uint8_t **out, size_t *outlen,
                     char *err, size_t errlen) {
    avro_value_t *v = &c->value[S_JOB], f, b;
    avro_value_reset(v);
    if (field(v, "id", &f) || set_str(&f, j->id, strlen(j->id))) goto bad;
    if (field(v, "prompt", &f)) goto bad;
    if (j->prompt_is_text) {
        if (avro_value_set_branch(&f, 0, &b) || set_str(&b, j->prompt_text, j->prompt_text_len)) goto bad;
    } else if (avro_value_set_branch(&f, 1, &b) || set_int_array(&b, j->prompt_ids, j->n_prompt_ids)) {
        goto bad;
    }
    if (field(v, "max_tokens", &f) || avro_value_set_int(&f, j->max_tokens)) goto bad;
    if (field(v, "tenant", &f) || set_str(&f, j->tenant ? j->tenant : "", j->tenant ? strlen(j->tenant) : 0))
        goto bad;
    if (field(v, "temperature", &f) || avro_value_set_float(&f, j->temperature)) goto bad;
    if (field(v, "top_p", &f) || avro_value_set_float(&f, j->top_p)) goto bad;
    if (field(v, "top_k", &f) || avro_value_set_int(&f, j->top_k)) goto bad;
    if (field(v, "min_p", &f) || avro_value_set_float(&f, j->min_p)) goto bad;
    if (field(v, "repetition_penalty", &f) || avro_value_set_float(&f, j->repetition_penalty)) goto bad;
    if (field(v, "seed", &f)) goto bad;
    if (j->has_seed) {
        if (avro_value_set_branch(&f, 1, &b) || avro_value_set_long(&b, j->seed)) goto bad;
    } else if (avro_value_set_branch(&f, 0, &b) || avro_value_set_null(&b)) {
        goto bad;
    }
    if (field(v, "stop", &f)) goto bad;
    for (int i = 0; i < j->n_stop; i++) {
        avro_value_t e;
        if (avro_value_append(&f, &e, NULL) || set_str(&e, j->stop[i], j->stop_len[i])) goto bad;
    }
    if (field(v, "stop_token_ids", &f) || set_int_array(&f, j->stop_ids, j->n_stop_ids)) goto bad;
    if (field(v, "ignore_eos", &f) || avro_value_set_boolean(&f, j->ignore_eos)) goto bad;
    if (field(v, "logprobs", &f) || avro_value_set_boolean(&f, j->logprobs)) goto bad;
    if (field(v, "stream", &f) || avro_value_set_boolean(&f, j->stream)) goto bad;
    if (field(v, "priority", &f) || avro_value_set_int(&f, j->priority)) goto bad;
    if (field(v, "deadline_ms", &f)) goto bad;
    if (j->has_deadline) {
        if (avro_value_set_branch(&f, 1, &b) || avro_value_set_long(&b, j->deadline_ms)) goto bad;
    } else if (avro_value_set_branch(&f, 0, &b) || avro_value_set_null(&b)) {
        goto bad;
    }
    if (field(v, "reply_topic", &f) ||
        set_null_or_str(&f, j->reply_topic, j->reply_topic ? strlen(j->reply_topic) : 0))
        goto bad;
    if (field(v, "metadata", &f) ||
        set_map(&f, (const char *const *)j->meta_k, (const char *const *)j->meta_v, j->n_meta))
        goto bad;
    if (field(v, "messages", &f)) goto bad;
    for (int i = 0; i < j->n_messages; i++) {
        const sl_job_message *msg = &j->messages[i];
        avro_value_t e, g;
        if (avro_value_append(&f, &e, NULL) || field(&e, "role", &g) || set_str(&g, msg->role, strlen(msg->role)) ||
            field(&e, "content", &g) || set_str(&g, msg->content, msg->content_len) ||
            field(&e, "reasoning_content", &g) ||
            set_null_or_str(&g, msg->reasoning_content, msg->reasoning_content_len))
            goto bad;
    }
    if (field(v, "thinking", &f) || avro_value_set_boolean(&f, j->thinking)) goto bad;
    if (write_value(v, schema_id, out, outlen)) goto bad;
    avro_value_reset(v);
    return 0;
bad:
    snprintf(err, errlen, "avro: cannot encode Job: %s", avro_strerror());
    avro_value_reset(v);
    return -1;
}

int codec_encode_result(sl_codec *c, const sl_result *r, int32_t schema_id, uint8_t **out, size_t *outlen,
                        char *err, size_t errlen) {
    avro_value_t *v = &c->value[S_RESULT], f, g;
    avro_value_reset(v);
    if (field(v, "id", &f) || set_str(&f, r->id, strlen(r->id))) goto bad;
    if (field(v, "status", &f) || avro_value_set_enum(&f, (int)r->status)) goto bad;
    if (field(v, "finish_reason", &f) || avro_value_set_enum(&f, (int)r->finish)) goto bad;
    if (field(v, "tokens", &f) || set_int_array(&f, r->tokens, r->n_tokens)) goto bad;
    if (field(v, "text", &f) || set_null_or_str(&f, r->text, r->text_len)) goto bad;
    if (field(v, "logprobs", &f)) goto bad;
    for (int i = 0; i < r->n_logprobs; i++) {
        avro_value_t e;
        if (avro_value_append(&f, &e, NULL) || avro_value_set_float(&e, r->logprobs[i])) goto bad;
    }
    if (field(v, "error", &f) || set_null_or_str(&f, r->error, r->error ? strlen(r->error) : 0)) goto bad;
    if (field(v, "usage", &f)) goto bad;
    if (field(&f, "prompt_tokens", &g) || avro_value_set_int(&g, r->prompt_tokens)) goto bad;
    if (field(&f, "completion_tokens", &g) || avro_value_set_int(&g, r->completion_tokens)) goto bad;
    if (field(&f, "cached_tokens", &g) || avro_value_set_int(&g, r->cached_tokens)) goto bad;
    if (field(v, "timing", &f)) goto bad;
    if (field(&f, "queue_ms", &g) || avro_value_set_double(&g, r->queue_ms)) goto bad;
    if (field(&f, "ttft_ms", &g) || avro_value_set_double(&g, r->ttft_ms)) goto bad;
    if (field(&f, "decode_ms", &g) || avro_value_set_double(&g, r->decode_ms)) goto bad;
    if (field(v, "worker", &f) || set_str(&f, r->worker ? r->worker : "", r->worker ? strlen(r->worker) : 0))
        goto bad;
    if (field(v, "model", &f) || set_str(&f, r->model ? r->model : "", r->model ? strlen(r->model) : 0)) goto bad;
    if (field(v, "metadata", &f) || set_map(&f, r->meta_k, r->meta_v, r->n_meta)) goto bad;
    if (field(v, "content", &f) || set_null_or_str(&f, r->content, r->content_len)) goto bad;
    if (field(v, "reasoning_content", &f) ||
        set_null_or_str(&f, r->reasoning_content, r->reasoning_content_len))
        goto bad;
    if (write_value(v, schema_id, out, outlen)) goto bad;
    avro_value_reset(v);
    return 0;
bad:
    snprintf(err, errlen, "avro: cannot encode Result: %s", avro_strerror());
    avro_value_reset(v);
    return -1;
}

int codec_encode_chunk(sl_codec *c, const sl_chunk *ch, int32_t schema_id, uint8_t **out, size_t *outlen,
                       char *err, size_t errlen) {
    avro_value_t *v = &c->value[S_CHUNK], f;
    avro_value_reset(v);
    if (field(v, "id", &f) || set_str(&f, ch->id, strlen(ch->id))) goto bad;
    if (field(v, "seq", &f) || avro_value_set_int(&f, ch->seq)) goto bad;
    if (field(v, "tokens", &f) || set_int_array(&f, ch->tokens, ch->n_tokens)) goto bad;
    if (field(v, "text", &f) || set_null_or_str(&f, ch->text, ch->text_len)) goto bad;
    if (field(v, "done", &f) || avro_value_set_boolean(&f, ch->done)) goto bad;
    if (write_value(v, schema_id, out, outlen)) goto bad;
    avro_value_reset(v);
    return 0;
bad:
    snprintf(err, errlen, "avro: cannot encode TokenChunk: %s", avro_strerror());
    avro_value_reset(v);
    return -1;
}

// ---------------------------------------------------------------- Result / chunk decode

/* A list of allocations freed together. */
typedef struct {
    void **p;
    int n, cap;
} arena;

static void *arena_keep(arena *a, void *p) {
    if (!p) return NULL;
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        void **q = realloc(a->p, (size_t)cap * sizeof(void *));
        if (!q) {
            free(p);
            return NULL;
        }
        a->p = q;
        a->cap = cap;
    }
    a->p[a->n++] = p;
    return p;
}

static void arena_free(arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
    free(a);
}

static const char *arena_str(arena *a, avro_value_t *v, size_t *len) {
    char *s;
    if (get_str(v, &s, len)) return NULL;
    return arena_keep(a, s);
}

static int arena_null_or_str(arena *a, avro_value_t *u, const char **out, size_t *len) {
    int disc;
    avro_value_t b;
    if (avro_value_get_discriminant(u, &disc) || avro_value_get_current_branch(u, &b)) return -1;
    *out = NULL;
    if (len) *len = 0;
    if (disc == 0) return 0;
    *out = arena_str(a, &b, len);
    return *out ? 0 : -1;
}

static int arena_ints(arena *a, avro_value_t *v, const int32_t **out, int *n) {
    int32_t *x;
    if (get_int_array(v, &x, n)) {
        free(x);
        return -1;
    }
    *out = arena_keep(a, x);
    return *out ? 0 : -1;
}

void result_owned_free(sl_result_owned *r) {
    arena_free(r->mem);
    memset(r, 0, sizeof(*r));
}

int codec_decode_result(sl_codec *c, const void *buf, size_t len, sl_result_owned *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (read_value(c, S_RESULT, buf, len, err, errlen) != 0) {
        /* v1 bytes end before content: read them again with the defaults appended (a v1 record never
         * decodes as the current one, which needs those bytes) */
        uint8_t *padded = with_tail(buf, len, RESULT_V1_TAIL, sizeof(RESULT_V1_TAIL));
        char err1[256];
        int rc = padded ? read_value(c, S_RESULT, padded, len + sizeof(RESULT_V1_TAIL), err1, sizeof(err1)) : -1;
        free(padded);
        if (rc != 0) return -1;   /* err: the current schema's complaint */
    }
    arena *a = calloc(1, sizeof(*a));
    if (!a) goto bad;
    out->mem = a;
    sl_result *r = &out->r;
    avro_value_t *v = &c->value[S_RESULT], f, g;
    int e;
    size_t n;
    if (field(v, "id", &f) || !(r->id = arena_str(a, &f, NULL))) goto bad;
    if (field(v, "status", &f) || avro_value_get_enum(&f, &e)) goto bad;
    r->status = (sl_result_status)e;
    if (field(v, "finish_reason", &f) || avro_value_get_enum(&f, &e)) goto bad;
    r->finish = (sl_result_finish)e;
    if (field(v, "tokens", &f) || arena_ints(a, &f, &r->tokens, &r->n_tokens)) goto bad;
    if (field(v, "text", &f) || arena_null_or_str(a, &f, &r->text, &r->text_len)) goto bad;
    if (field(v, "logprobs", &f) || avro_value_get_size(&f, &n)) goto bad;
    float *lp = arena_keep(a, malloc((n ? n : 1) * sizeof(float)));
    if (!lp) goto bad;
    for (size_t i = 0; i < n; i++) {
        if (avro_value_get_by_index(&f, i, &g, NULL) || avro_value_get_float(&g, &lp[i])) goto bad;
    }
    r->logprobs = lp;
    r->n_logprobs = (int)n;
    if (field(v, "error", &f) || arena_null_or_str(a, &f, &r->error, NULL)) goto bad;
    if (field(v, "usage", &f)) goto bad;
    if (field(&f, "prompt_tokens", &g) || avro_value_get_int(&g, &r->prompt_tokens)) goto bad;
    if (field(&f, "completion_tokens", &g) || avro_value_get_int(&g, &r->completion_tokens)) goto bad;
    if (field(&f, "cached_tokens", &g) || avro_value_get_int(&g, &r->cached_tokens)) goto bad;
    if (field(v, "timing", &f)) goto bad;
    if (field(&f, "queue_ms", &g) || avro_value_get_double(&g, &r->queue_ms)) goto bad;
    if (field(&f, "ttft_ms", &g) || avro_value_get_double(&g, &r->ttft_ms)) goto bad;
    if (field(&f, "decode_ms", &g) || avro_value_get_double(&g, &r->decode_ms)) goto bad;
    if (field(v, "worker", &f) || !(r->worker = arena_str(a, &f, NULL))) goto bad;
    if (field(v, "model", &f) || !(r->model = arena_str(a, &f, NULL))) goto bad;
    if (field(v, "metadata", &f) || avro_value_get_size(&f, &n)) goto bad;
    const char **mk = arena_keep(a, calloc(n ? n : 1, sizeof(char *)));
    const char **mv = arena_keep(a, calloc(n ? n : 1, sizeof(char *)));
    if (!mk || !mv) goto bad;
    for (size_t i = 0; i < n; i++) {
        const char *key;
        if (avro_value_get_by_index(&f, i, &g, &key)) goto bad;
        if (!(mk[i] = arena_keep(a, strdup(key))) || !(mv[i] = arena_str(a, &g, NULL))) goto bad;
    }
    r->meta_k = mk;
    r->meta_v = mv;
    r->n_meta = (int)n;
    if (field(v, "content", &f) || arena_null_or_str(a, &f, &r->content, &r->content_len)) goto bad;
    if (field(v, "reasoning_content", &f) ||
        arena_null_or_str(a, &f, &r->reasoning_content, &r->reasoning_content_len))
        goto bad;
    avro_value_reset(v);
    return 0;
bad:
    snprintf(err, errlen, "avro: Result value does not match the schema (or out of memory)");
    avro_value_reset(&c->value[S_RESULT]);
    result_owned_free(out);
    return -1;
}

int codec_decode_chunk(sl_codec *c, const void *buf, size_t len, sl_chunk *ch, void **mem, char *err,
                       size_t errlen) {
    memset(ch, 0, sizeof(*ch));
    *mem = NULL;
    if (read_value(c, S_CHUNK, buf, len, err, errlen) != 0) return -1;
    arena *a = calloc(1, sizeof(*a));
    if (!a) goto bad;
    avro_value_t *v = &c->value[S_CHUNK], f;
    int b;
    if (field(v, "id", &f) || !(ch->id = arena_str(a, &f, NULL))) goto bad;
    if (field(v, "seq", &f) || avro_value_get_int(&f, &ch->seq)) goto bad;
    if (field(v, "tokens", &f) || arena_ints(a, &f, &ch->tokens, &ch->n_tokens)) goto bad;
    if (field(v, "text", &f) || arena_null_or_str(a, &f, &ch->text, &ch->text_len)) goto bad;
    if (field(v, "done", &f) || avro_value_get_boolean(&f, &b)) goto bad;
    ch->done = b;
    avro_value_reset(v);
    *mem = a;
    return 0;
bad:
    snprintf(err, errlen, "avro: TokenChunk value does not match the schema (or out of memory)");
    avro_value_reset(&c->value[S_CHUNK]);
    arena_free(a);
    return -1;
}

void codec_chunk_mem_free(void *mem) { arena_free(mem); }

const char *result_status_name(sl_result_status s) {
    static const char *const n[] = {"OK", "ERROR", "EXPIRED", "CANCELLED"};
    return (unsigned)s < 4 ? n[s] : "?";
}

const char *result_finish_name(sl_result_finish f) {
    static const char *const n[] = {"STOP", "LENGTH", "ERROR", "EXPIRED", "CANCELLED"};
    return (unsigned)f < 5 ? n[f] : "?";
}
