/* fuzz_job_resolver.c — libFuzzer target for the Schema Registry path: a writer schema (JSON text a
 * registry serves, so as hostile as the registry) goes through job_resolver_new, and Avro bytes written
 * with it through codec_decode_job_resolved, exactly as the worker does for a framed job whose schema id
 * the registry resolves. Any input must give a resolver or an error, then a job or an error, never a
 * crash, leak or undefined behaviour (avro-c's resolved reader frees memory twice on some incompatible
 * pairs: the resolver's own check must keep those from it).
 *
 * Input: a 2-byte big-endian length L, then L bytes of writer schema, then the Avro bytes (an L beyond
 * the input takes the rest as the schema, with no Avro bytes).
 *
 * What must hold, else abort:
 *   - a refused schema or a failed decode says why, and leaves nothing to free;
 *   - a decode makes avro-c allocate no more than a few bytes per byte of the message for each byte of
 *     the writer schema (an item of the writer's may be as large as its schema, and take one byte):
 *     a count the bytes do not pay for must not reach avro-c;
 *   - a decoded job has what the codec promises (codec.h): every string present and NUL-terminated at
 *     its length, flags 0 or 1, counts not negative, and no more items and string bytes than the Avro
 *     bytes hold (the reader's defaults are all empty, so everything in a job came from those bytes);
 *   - the same bytes decode again to the same job (a registry's resolver is reused for every message);
 *   - a decoded job survives codec_encode_job -> codec_decode_job, and decodes the same through a
 *     resolver of the worker's own schema (what the resolver accepted is a job the worker can write);
 *   - where the writer schema is the worker's (schemas/job.avsc) or the earlier one (schemas/v1), the
 *     built-in decoder reads the bytes to the same job.
 */
#include "codec.h"
#include "job_diff.h"
#include "job_resolver.h"
#include "schemas_gen.h"   /* SL_JOB_AVSC */

#include <avro.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_SCHEMAS
#define SLUICE_SCHEMAS "schemas"
#endif

/* avro-c's allocator here: a cap on one allocation as codec_install_allocator sets (fuzz_job's 16 MiB), and
 * a count of the bytes it hands out. */
enum { MAX_ALLOC = 16 << 20 };
static size_t avro_allocated;

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (nsize > MAX_ALLOC) return NULL;
    void *p = realloc(ptr, nsize);
    if (p && nsize > osize) avro_allocated += nsize - (ptr ? osize : 0);
    return p;
}

static sl_codec *codec;
static sl_job_resolver *self;                /* writer = the worker's own Job schema */
static avro_schema_t builtin[2];             /* schemas/job.avsc, schemas/v1/job.avsc */

static _Noreturn void fail(const char *what)
{
    fprintf(stderr, "fuzz_job_resolver: %s\n", what);
    abort();
}

static avro_schema_t schema_file(const char *path)
{
    static char text[16384];
    FILE *f = fopen(path, "rb");
    if (!f) fail(path);
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    avro_schema_t s;
    if (n == sizeof text || avro_schema_from_json_length(text, n, &s)) fail(path);
    return s;
}

static void setup(void)
{
    if (codec) return;
    char err[512];
    avro_set_allocator(counting_alloc, NULL);
    if (codec_new(&codec, err, sizeof err)) fail(err);
    if (job_resolver_new(SL_JOB_AVSC, strlen(SL_JOB_AVSC), &self, err, sizeof err)) fail(err);
    if (avro_schema_from_json_length(SL_JOB_AVSC, strlen(SL_JOB_AVSC), &builtin[0])) fail("built-in Job schema");
    builtin[1] = schema_file(SLUICE_SCHEMAS "/v1/job.avsc");
}

// ---------------------------------------------------------------- what a decoded job must be

/* A string of the job: present and NUL-terminated at n. Adds its bytes to *total. */
static void check_str(const char *s, size_t n, size_t *total, const char *what)
{
    if (!s) fail(what);
    if (s[n] != 0) fail(what);
    *total += n;
}

static void check_flag(int x, const char *what)
{
    if (x != 0 && x != 1) fail(what);
}

static void check_job(const sl_job *j, size_t len)
{
    size_t bytes = 0, items = 0;
    check_str(j->id, j->id_len, &bytes, "id missing or not terminated at id_len");
    check_flag(j->prompt_is_text, "prompt_is_text not 0/1");
    if (j->prompt_is_text) {
        check_str(j->prompt_text, j->prompt_text_len, &bytes, "prompt text missing or not terminated");
        if (j->prompt_ids || j->n_prompt_ids) fail("a text prompt with ids");
    } else {
        if (j->prompt_text) fail("an id prompt with text");
        if (j->n_prompt_ids < 0 || (j->n_prompt_ids && !j->prompt_ids)) fail("prompt ids");
        items += (size_t)j->n_prompt_ids;
    }
    check_str(j->tenant, strlen(j->tenant ? j->tenant : ""), &bytes, "tenant missing");
    check_flag(j->has_seed, "has_seed not 0/1");
    check_flag(j->has_deadline, "has_deadline not 0/1");
    if ((!j->has_seed && j->seed) || (!j->has_deadline && j->deadline_ms)) fail("a value behind a null");
    if (j->n_stop < 0 || (j->n_stop && (!j->stop || !j->stop_len))) fail("stop arrays");
    for (int i = 0; i < j->n_stop; i++) check_str(j->stop[i], j->stop_len[i], &bytes, "stop string");
    items += (size_t)j->n_stop;
    if (j->n_stop_ids < 0 || (j->n_stop_ids && !j->stop_ids)) fail("stop ids");
    items += (size_t)j->n_stop_ids;
    check_flag(j->ignore_eos, "ignore_eos not 0/1");
    check_flag(j->logprobs, "logprobs not 0/1");
    check_flag(j->stream, "stream not 0/1");
    check_flag(j->thinking, "thinking not 0/1");
    if (j->reply_topic) bytes += strlen(j->reply_topic);
    if (j->n_meta < 0 || (j->n_meta && (!j->meta_k || !j->meta_v))) fail("metadata arrays");
    for (int i = 0; i < j->n_meta; i++) {
        check_str(j->meta_k[i], strlen(j->meta_k[i] ? j->meta_k[i] : ""), &bytes, "metadata key");
        check_str(j->meta_v[i], strlen(j->meta_v[i] ? j->meta_v[i] : ""), &bytes, "metadata value");
    }
    items += (size_t)j->n_meta;
    if (j->n_messages < 0 || (j->n_messages && !j->messages)) fail("messages array");
    for (int i = 0; i < j->n_messages; i++) {
        const sl_job_message *m = &j->messages[i];
        check_str(m->role, strlen(m->role ? m->role : ""), &bytes, "message role");
        check_str(m->content, m->content_len, &bytes, "message content");
        if (m->reasoning_content)
            check_str(m->reasoning_content, m->reasoning_content_len, &bytes, "message reasoning");
        else if (m->reasoning_content_len)
            fail("a reasoning length without reasoning");
    }
    items += (size_t)j->n_messages;
    /* each item and each string's length takes a byte or more of the writer's encoding */
    if (items + bytes > len) fail("the job holds more than the Avro bytes do");
}

/* a and b the same job (job_diff.h), else fail naming the field and how they were made. */
static void check_same(const sl_job *a, const sl_job *b, int ids_as_c, const char *how)
{
    const char *d = job_diff(a, b, ids_as_c);
    if (d) {
        char m[160];
        snprintf(m, sizeof m, "%s: %s differs", how, d);
        fail(m);
    }
}

static void check_empty(const sl_job *j, const char *err)
{
    static const sl_job zero;
    if (!err[0]) fail("a failed decode with no error text");
    if (memcmp(j, &zero, sizeof zero)) fail("a failed decode left a job behind");
}

// ---------------------------------------------------------------- the target

/* Which built-in layout the writer schema is (0 current, 1 v1), or -1. */
static int builtin_layout(const char *json, size_t len)
{
    avro_schema_t w;
    if (avro_schema_from_json_length(json, len, &w)) return -1;
    int k = avro_schema_equal(w, builtin[0]) ? 0 : avro_schema_equal(w, builtin[1]) ? 1 : -1;
    avro_schema_decref(w);
    return k;
}

static void check_decoded(sl_job_resolver *r, const char *schema, size_t slen, const uint8_t *buf, size_t len,
                          sl_job *job)
{
    char err[512];
    check_job(job, len);

    sl_job again;   /* the resolver reused */
    if (codec_decode_job_resolved(codec, r, buf, len, &again, err, sizeof err)) fail(err);
    check_same(job, &again, 0, "decoding twice");
    job_free(&again);

    if (builtin_layout(schema, slen) >= 0) {
        if (codec_decode_job(codec, buf, len, &again, err, sizeof err)) fail(err);
        check_same(job, &again, 0, "built-in decoder");
        job_free(&again);
    }

    uint8_t *out;
    size_t outlen;
    if (codec_encode_job(codec, job, -1, &out, &outlen, err, sizeof err)) fail(err);
    if (codec_decode_job(codec, out, outlen, &again, err, sizeof err)) fail(err);
    check_same(job, &again, 1, "encode -> decode");
    job_free(&again);
    if (codec_decode_job_resolved(codec, self, out, outlen, &again, err, sizeof err)) fail(err);
    check_same(job, &again, 1, "encode -> resolve with the worker's schema");
    job_free(&again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 2) return 0;
    size_t slen = (size_t)data[0] << 8 | data[1];
    if (slen > size - 2) slen = size - 2;
    /* the schema in a buffer of its own size, so that an over-read shows */
    char *schema = malloc(slen ? slen : 1);
    if (!schema) fail("out of memory");
    memcpy(schema, data + 2, slen);
    const uint8_t *buf = data + 2 + slen;
    size_t len = size - 2 - slen;

    char err[512] = "";
    sl_job_resolver *r = NULL;
    if (job_resolver_new(schema, slen, &r, err, sizeof err)) {
        if (r) fail("a refused schema gave a resolver");
        if (!err[0]) fail("a refused schema with no error text");
        free(schema);
        return 0;
    }
    if (!r) fail("no resolver and no error");
    sl_job job;
    err[0] = 0;
    avro_allocated = 0;
    int rc = codec_decode_job_resolved(codec, r, buf, len, &job, err, sizeof err);
    if (avro_allocated > 4 * (len + 1) * (slen + 64) + (64 << 10))
        fail("avro-c allocated out of proportion to the message");
    if (rc == 0) {
        check_decoded(r, schema, slen, buf, len, &job);
        job_free(&job);
    } else {
        check_empty(&job, err);
    }
    job_resolver_free(r);
    free(schema);
    return 0;
}
