/* Unit tests (label unit, also under ASan/UBSan) of Avro schema resolution into the worker's Job schema
 * (consumer/job_resolver.c): Jobs written with schemas/v1/job.avsc, with the current schema, and with an
 * evolved schema (tests/consumer/schemas/job_v3.avsc: fields in another order, a field the worker does
 * not know, seed as a plain long, messages without reasoning_content) decode with the reader's
 * defaults; incompatible writer schemas are refused with a line naming the field; truncated, trailing
 * and hostile bytes (forged lengths, counts of items that take no bytes) are errors.
 *
 *   test_consumer_job_resolver ROOT   (the repository: schemas/ and tests/consumer/schemas/)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "job_resolver.h"

#include "check.h"

/* python3-avro 1.11: schemas/v1/job.avsc (as in test_codec.c) */
static const char V1_JOB_TEXT[] =
    "0c6a6f622d3432001848656c6c6f2c20c3a974c3a90e0474310000003f3333733f50000000000000803f02a8e8c8e9970704040a0a0645"
    "4e440004041a000101010502f6a1abfef96202127265706c6965732e61020c74656e616e740861636d6500";
/* python3-avro 1.11: job_v3.avsc, {"max_tokens": 9, "prompt": "Hi there", "id": "v3-a", "priority_class":
 * "interactive", "seed": 1234567890123, "temperature": 0.25, "stop": ["\n"], "metadata": {"k": "v"},
 * "messages": [], "top_k": 5} and {"max_tokens": 3, "prompt": "", "id": "v3-b", "priority_class": "batch",
 * "seed": 7, ..., "messages": [{"content": "hello", "role": "user"}], "top_k": 0} */
static const char V3_JOB_A[] =
    "12001048692074686572650876332d6116696e7465726163746976659693d89fee470000803e02020a0002026b027600000a";
static const char V3_JOB_B[] = "0600000876332d620a62617463680e000000000000020a68656c6c6f08757365720000";

static char *slurp(const char *root, const char *rel) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    static char buf[8][16384];
    static int k;
    char *b = buf[k++ % 8];
    size_t n = fread(b, 1, sizeof(buf[0]) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

static sl_job_resolver *resolver(const char *json) {
    sl_job_resolver *r = NULL;
    char err[512];
    if (job_resolver_new(json, strlen(json), &r, err, sizeof(err))) fprintf(stderr, "resolver: %s\n", err);
    CHECK(r != NULL);
    return r;
}

/* The error job_resolver_new gives json (empty when it resolves). */
static const char *refusal(const char *json) {
    static char err[512];
    sl_job_resolver *r = NULL;
    err[0] = 0;
    CHECK(job_resolver_new(json, strlen(json), &r, err, sizeof(err)) == -1 && !r && err[0]);
    job_resolver_free(r);
    return err;
}

/* v1 bytes through the v1 schema: what the built-in decoder reads, plus the added fields' defaults */
static void test_v1(sl_codec *c, const char *root) {
    sl_job_resolver *r = resolver(slurp(root, "schemas/v1/job.avsc"));
    uint8_t buf[512];
    char err[256];
    sl_job a, b;
    size_t n = unhex(V1_JOB_TEXT, buf);
    CHECK(codec_decode_job(c, buf, n, &a, err, sizeof(err)) == 0);
    CHECK(codec_decode_job_resolved(c, r, buf, n, &b, err, sizeof(err)) == 0);
    CHECK(!strcmp(b.id, "job-42") && b.prompt_is_text && b.prompt_text_len == a.prompt_text_len &&
          !memcmp(b.prompt_text, a.prompt_text, a.prompt_text_len));
    CHECK(b.max_tokens == 7 && !strcmp(b.tenant, "t1") && b.temperature == 0.5f && b.top_p == 0.95f && b.top_k == 40);
    CHECK(b.has_seed && b.seed == 123456789012LL && b.n_stop == 2 && !strcmp(b.stop[1], "END"));
    CHECK(b.n_stop_ids == 2 && b.stop_ids[1] == 13 && b.ignore_eos && b.logprobs && b.stream && b.priority == -3);
    CHECK(b.has_deadline && b.deadline_ms == 1700000000123LL && !strcmp(b.reply_topic, "replies.a"));
    CHECK(b.n_meta == 1 && !strcmp(b.meta_k[0], "tenant") && !strcmp(b.meta_v[0], "acme"));
    CHECK(b.n_messages == 0 && !b.thinking);
    job_free(&a);
    job_free(&b);
    /* one byte short, one byte more */
    CHECK(codec_decode_job_resolved(c, r, buf, n - 1, &b, err, sizeof(err)) == -1 && strstr(err, "truncated"));
    buf[n] = 0;
    CHECK(codec_decode_job_resolved(c, r, buf, n + 1, &b, err, sizeof(err)) == -1 && strstr(err, "trailing"));
    /* a forged string length (the id's) is refused before avro-c allocates it */
    uint8_t forged[] = {0xfe, 0xff, 0xff, 0xff, 0x0f, 'a'};
    CHECK(codec_decode_job_resolved(c, r, forged, sizeof(forged), &b, err, sizeof(err)) == -1);
    /* the resolver is reused after errors */
    n = unhex(V1_JOB_TEXT, buf);
    CHECK(codec_decode_job_resolved(c, r, buf, n, &b, err, sizeof(err)) == 0 && b.max_tokens == 7);
    job_free(&b);
    job_resolver_free(r);
}

/* the current schema as the writer: every field as encoded, chat messages included */
static void test_current(sl_codec *c, const char *root) {
    sl_job_resolver *r = resolver(slurp(root, "schemas/job.avsc"));
    char *stop[] = {"x\0y"};
    size_t stop_len[] = {3};
    sl_job_message msg[2] = {{"system", "be brief", 8, NULL, 0}, {"user", "hi", 2, "think", 5}};
    sl_job j = {.id = "cur-1", .prompt_is_text = 1, .prompt_text = "", .max_tokens = 4, .tenant = "t",
                .temperature = 0.5f, .top_p = 0.9f, .min_p = 0.1f, .repetition_penalty = 1.1f, .top_k = 3,
                .stop = stop, .stop_len = stop_len, .n_stop = 1, .messages = msg, .n_messages = 2, .thinking = 1};
    uint8_t *buf;
    size_t n;
    char err[256];
    sl_job b;
    CHECK(codec_encode_job(c, &j, -1, &buf, &n, err, sizeof(err)) == 0);
    CHECK(codec_decode_job_resolved(c, r, buf, n, &b, err, sizeof(err)) == 0);
    CHECK(!strcmp(b.id, "cur-1") && b.prompt_is_text && b.prompt_text_len == 0 && b.max_tokens == 4);
    CHECK(b.temperature == 0.5f && b.top_p == 0.9f && b.min_p == 0.1f && b.repetition_penalty == 1.1f && b.top_k == 3);
    CHECK(b.n_stop == 1 && b.stop_len[0] == 3 && !memcmp(b.stop[0], "x\0y", 3));
    CHECK(b.n_messages == 2 && !strcmp(b.messages[0].role, "system") && !b.messages[0].reasoning_content &&
          !strcmp(b.messages[1].content, "hi") && !strcmp(b.messages[1].reasoning_content, "think") && b.thinking);
    job_free(&b);
    free(buf);
    job_resolver_free(r);
}

/* an evolved writer schema: reordered fields, a field the worker skips, long seed into [null, long],
 * messages without reasoning_content; the rest from the reader's defaults */
static void test_evolved(sl_codec *c, const char *root) {
    sl_job_resolver *r = resolver(slurp(root, "tests/consumer/schemas/job_v3.avsc"));
    uint8_t buf[256];
    char err[256];
    sl_job b;
    size_t n = unhex(V3_JOB_A, buf);
    CHECK(codec_decode_job_resolved(c, r, buf, n, &b, err, sizeof(err)) == 0);
    CHECK(!strcmp(b.id, "v3-a") && b.prompt_is_text && !strcmp(b.prompt_text, "Hi there") && b.max_tokens == 9);
    CHECK(b.has_seed && b.seed == 1234567890123LL && b.temperature == 0.25f && b.top_k == 5);
    CHECK(b.n_stop == 1 && !strcmp(b.stop[0], "\n") && b.n_meta == 1 && !strcmp(b.meta_v[0], "v"));
    /* defaults: tenant "", top_p 1, min_p 0, repetition_penalty 1, no stop ids, flags false, no deadline */
    CHECK(!strcmp(b.tenant, "") && b.top_p == 1.0f && b.min_p == 0.0f && b.repetition_penalty == 1.0f);
    CHECK(b.n_stop_ids == 0 && !b.ignore_eos && !b.logprobs && !b.stream && b.priority == 0 && !b.has_deadline);
    CHECK(!b.reply_topic && b.n_messages == 0 && !b.thinking);
    job_free(&b);
    n = unhex(V3_JOB_B, buf);
    CHECK(codec_decode_job_resolved(c, r, buf, n, &b, err, sizeof(err)) == 0);
    CHECK(!strcmp(b.id, "v3-b") && b.prompt_text_len == 0 && b.n_messages == 1 && !strcmp(b.messages[0].role, "user") &&
          !strcmp(b.messages[0].content, "hello") && !b.messages[0].reasoning_content && b.seed == 7);
    job_free(&b);
    job_resolver_free(r);
}

static void test_incompatible(const char *root) {
    const char *e = refusal(slurp(root, "tests/consumer/schemas/job_prompt_int.avsc"));
    CHECK(strstr(e, "field 'prompt'") && strstr(e, "matches no branch"));
    e = refusal("{\"type\": \"record\", \"name\": \"Job\", \"fields\": [{\"name\": \"id\", \"type\": \"string\"}, "
                "{\"name\": \"prompt\", \"type\": \"string\"}]}");
    CHECK(strstr(e, "lacks field 'max_tokens'"));
    /* long does not narrow to int (avro-c's own resolver frees memory twice on this pair) */
    e = refusal("{\"type\": \"record\", \"name\": \"Job\", \"fields\": [{\"name\": \"id\", \"type\": \"string\"}, "
                "{\"name\": \"prompt\", \"type\": \"string\"}, {\"name\": \"max_tokens\", \"type\": \"long\"}]}");
    CHECK(strstr(e, "field 'max_tokens'") && strstr(e, "writer type long does not resolve to reader type int"));
    /* a writer union branch (null) the reader's string cannot take */
    e = refusal("{\"type\": \"record\", \"name\": \"Job\", \"fields\": [{\"name\": \"id\", \"type\": [\"null\", "
                "\"string\"]}, {\"name\": \"prompt\", \"type\": \"string\"}, {\"name\": \"max_tokens\", \"type\": \"int\"}]}");
    CHECK(strstr(e, "field 'id'") && strstr(e, "null"));
    /* nested: a message role of the wrong type */
    e = refusal("{\"type\": \"record\", \"name\": \"Job\", \"fields\": [{\"name\": \"id\", \"type\": \"string\"}, "
                "{\"name\": \"prompt\", \"type\": \"string\"}, {\"name\": \"max_tokens\", \"type\": \"int\"}, "
                "{\"name\": \"messages\", \"type\": {\"type\": \"array\", \"items\": {\"type\": \"record\", \"name\": "
                "\"Message\", \"fields\": [{\"name\": \"role\", \"type\": \"int\"}, {\"name\": \"content\", \"type\": "
                "\"string\"}]}}}]}");
    CHECK(strstr(e, "field 'messages[].role'"));
    e = refusal("{\"type\": \"record\", \"name\": \"Result\", \"fields\": []}");
    CHECK(strstr(e, "not the reader's record Job"));
    e = refusal("{\"type\": \"record\", \"name\": ");
    CHECK(strstr(e, "does not parse"));
    e = refusal("\"string\"");
    CHECK(strstr(e, "not the reader's record Job"));
}

/* A writer schema may have values that take no bytes (null). Each block of an array may claim as many
 * items as the message has bytes left, so the message may claim no more in all: a few headers each
 * claiming the rest would otherwise have avro-c build arrays of items quadratic in the message. */
static void test_zero_size_items(sl_codec *c) {
    sl_job_resolver *r = resolver("{\"type\": \"record\", \"name\": \"Job\", \"fields\": [{\"name\": \"id\", "
                                  "\"type\": \"string\"}, {\"name\": \"nulls\", \"type\": {\"type\": \"array\", "
                                  "\"items\": \"null\"}}, {\"name\": \"prompt\", \"type\": \"string\"}, "
                                  "{\"name\": \"max_tokens\", \"type\": \"int\"}]}");
    char err[256];
    sl_job b;
    /* id "z", three nulls, prompt "abc", max_tokens 1 */
    const uint8_t ok[] = {0x02, 'z', 0x06, 0x00, 0x06, 'a', 'b', 'c', 0x02};
    CHECK(codec_decode_job_resolved(c, r, ok, sizeof(ok), &b, err, sizeof(err)) == 0);
    CHECK(!strcmp(b.id, "z") && !strcmp(b.prompt_text, "abc") && b.max_tokens == 1);
    job_free(&b);
    /* id "z", 40 blocks each claiming the bytes after its header (900 nulls in 45 bytes), prompt "",
     * max_tokens 1 */
    uint8_t hostile[64];
    size_t n = 0;
    enum { BLOCKS = 40 };
    hostile[n++] = 0x02;
    hostile[n++] = 'z';
    for (int i = 0; i < BLOCKS; i++) hostile[n++] = (uint8_t)(2 * (BLOCKS - 1 - i + 3));
    hostile[n++] = 0x00;
    hostile[n++] = 0x00;
    hostile[n++] = 0x02;
    CHECK(codec_decode_job_resolved(c, r, hostile, n, &b, err, sizeof(err)) == -1 &&
          strstr(err, "more array and map items than the message has bytes"));
    job_resolver_free(r);
}

/* Items capped by the message's bytes may still each be a record of many null fields: the values in all are
 * capped too (a few per byte). A message whose items are 600 such fields each is refused; one record of them
 * (a wide schema, few values) still decodes. */
static void test_wide_empty_records(sl_codec *c) {
    char schema[40000];
    size_t n = (size_t)snprintf(schema, sizeof(schema), "{\"type\": \"record\", \"name\": \"Job\", \"fields\": ["
                                "{\"name\": \"id\", \"type\": \"string\"}, {\"name\": \"wide\", \"type\": "
                                "{\"type\": \"array\", \"items\": {\"type\": \"record\", \"name\": \"E\", "
                                "\"fields\": [");
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(schema + n, sizeof(schema) - n, "%s{\"name\": \"f%d\", \"type\": \"null\"}",
                              i ? ", " : "", i);
    snprintf(schema + n, sizeof(schema) - n, "]}}}, {\"name\": \"prompt\", \"type\": \"string\"}, "
             "{\"name\": \"max_tokens\", \"type\": \"int\"}]}");
    sl_job_resolver *r = resolver(schema);
    char err[256];
    sl_job b;
    const uint8_t one[] = {0x02, 'z', 0x02, 0x00, 0x06, 'a', 'b', 'c', 0x02};   /* one item: 601 values */
    CHECK(codec_decode_job_resolved(c, r, one, sizeof(one), &b, err, sizeof(err)) == 0);
    if (!fails) job_free(&b);
    /* 40 items (within the 46 bytes, so the item cap passes), a 40-byte prompt: 24,000 values */
    uint8_t hostile[64] = {0x02, 'z', 2 * 40, 0x00, 2 * 40};
    size_t len = 5;
    for (int i = 0; i < 40; i++) hostile[len++] = 'a';
    hostile[len++] = 0x02;
    CHECK(codec_decode_job_resolved(c, r, hostile, len, &b, err, sizeof(err)) == -1 &&
          strstr(err, "more values than the message's bytes allow"));
    job_resolver_free(r);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_consumer_job_resolver ROOT\n");
        return 2;
    }
    codec_install_allocator((size_t)64 << 20);
    sl_codec *c;
    char err[256];
    if (codec_new(&c, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_v1(c, argv[1]);
    test_current(c, argv[1]);
    test_evolved(c, argv[1]);
    test_incompatible(argv[1]);
    test_zero_size_items(c);
    test_wide_empty_records(c);
    codec_free(c);
    if (fails) {
        fprintf(stderr, "%d checks failed\n", fails);
        return 1;
    }
    printf("job resolver: ok\n");
    return 0;
}
