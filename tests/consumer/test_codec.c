/* Unit tests (label unit, also under ASan/UBSan): Avro round-trip of every schema on fresh random
 * values, decode of v1 payloads written by python3-avro, framing errors, truncated / trailing / hostile
 * bytes, the config parser, the offset low-water mark (text decoding and stop strings: test_textcodec.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "config.h"
#include "offsets.h"

#include "check.h"

/* written by python3-avro 1.11 from schemas/job.avsc and result.avsc (see tests/consumer/README) */
static const char V1_JOB_TEXT[] =
    "0c6a6f622d3432001848656c6c6f2c20c3a974c3a90e0474310000003f3333733f50000000000000803f02a8e8c8e9970704040a0a0645"
    "4e440004041a000101010502f6a1abfef96202127265706c6965732e61020c74656e616e740861636d6500";
static const char V1_JOB_IDS[] = "026a020a02900306feff070d000200000000000000803f00000000000000803f00000000000000000000";
static const char V1_RESULT[] =
    "0472310608040a0c000002000000bf0000060400000000000000f83f0000000000000240000000000000c03f0277026d02026b027600";

static void test_v1(sl_codec *c) {
    uint8_t buf[512];
    char err[256];
    sl_job j;
    size_t n = unhex(V1_JOB_TEXT, buf);
    CHECK(codec_decode_job(c, buf, n, &j, err, sizeof(err)) == 0);
    CHECK(!strcmp(j.id, "job-42") && j.prompt_is_text && j.prompt_text_len == 12 &&
          !memcmp(j.prompt_text, "Hello, \xc3\xa9t\xc3\xa9", 12));
    CHECK(j.max_tokens == 7 && !strcmp(j.tenant, "t1") && j.temperature == 0.5f && j.top_p == 0.95f && j.top_k == 40);
    CHECK(j.has_seed && j.seed == 123456789012LL && j.n_stop == 2 && !strcmp(j.stop[0], "\n\n") && !strcmp(j.stop[1], "END"));
    CHECK(j.n_stop_ids == 2 && j.stop_ids[0] == 2 && j.stop_ids[1] == 13 && j.ignore_eos && j.logprobs && j.stream);
    CHECK(j.priority == -3 && j.has_deadline && j.deadline_ms == 1700000000123LL && !strcmp(j.reply_topic, "replies.a"));
    CHECK(j.n_meta == 1 && !strcmp(j.meta_k[0], "tenant") && !strcmp(j.meta_v[0], "acme"));
    job_free(&j);
    n = unhex(V1_JOB_IDS, buf);
    CHECK(codec_decode_job(c, buf, n, &j, err, sizeof(err)) == 0);
    CHECK(!j.prompt_is_text && j.n_prompt_ids == 5 && j.prompt_ids[1] == 200 && j.prompt_ids[3] == 65535 &&
          j.prompt_ids[4] == -7 && !j.has_seed && !j.reply_topic && j.max_tokens == 1 && j.top_p == 1.0f);
    job_free(&j);
    sl_result_owned r;
    n = unhex(V1_RESULT, buf);
    CHECK(codec_decode_result(c, buf, n, &r, err, sizeof(err)) == 0);
    CHECK(!strcmp(r.r.id, "r1") && r.r.status == RS_CANCELLED && r.r.finish == RF_CANCELLED && r.r.n_tokens == 2 &&
          r.r.tokens[1] == 6 && !r.r.text && r.r.n_logprobs == 1 && r.r.logprobs[0] == -0.5f && !r.r.error);
    CHECK(r.r.prompt_tokens == 3 && r.r.completion_tokens == 2 && r.r.queue_ms == 1.5 && r.r.ttft_ms == 2.25 &&
          r.r.decode_ms == 0.125 && !strcmp(r.r.worker, "w") && r.r.n_meta == 1 && !strcmp(r.r.meta_v[0], "v"));
    result_owned_free(&r);
}

static char *rand_bytes(size_t n, int allow_nul) {
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        s[i] = (char)(rnd() & 0xff);
        if (!allow_nul && !s[i]) s[i] = 'x';
    }
    s[n] = 0;
    return s;
}

static void test_job_roundtrip(sl_codec *c) {
    char err[256];
    for (int it = 0; it < 300; it++) {
        sl_job a = {0}, b;
        a.id = rand_bytes(1 + rnd() % 40, 0);
        a.prompt_is_text = rnd() & 1;
        if (a.prompt_is_text) {
            a.prompt_text_len = rnd() % 100;
            a.prompt_text = rand_bytes(a.prompt_text_len, 1);
        } else {
            a.n_prompt_ids = (int)(rnd() % 50);
            a.prompt_ids = malloc(((size_t)a.n_prompt_ids + 1) * sizeof(int32_t));
            for (int i = 0; i < a.n_prompt_ids; i++) a.prompt_ids[i] = (int32_t)rnd();
        }
        a.max_tokens = (int32_t)rnd();
        a.tenant = rand_bytes(rnd() % 8, 0);
        a.temperature = (float)(rnd() % 1000) / 100.0f;
        a.top_p = (float)(rnd() % 1000) / 1000.0f;
        a.top_k = (int32_t)rnd();
        a.min_p = (float)(rnd() % 100) / 100.0f;
        a.repetition_penalty = 1.0f + (float)(rnd() % 100) / 50.0f;
        a.has_seed = rnd() & 1;
        a.seed = (int64_t)((uint64_t)rnd() << 32 | rnd());
        a.n_stop = (int)(rnd() % 4);
        a.stop = calloc(5, sizeof(char *));
        a.stop_len = calloc(5, sizeof(size_t));
        for (int i = 0; i < a.n_stop; i++) a.stop_len[i] = rnd() % 6, a.stop[i] = rand_bytes(a.stop_len[i], 1);
        a.n_stop_ids = (int)(rnd() % 4);
        a.stop_ids = malloc(5 * sizeof(int32_t));
        for (int i = 0; i < a.n_stop_ids; i++) a.stop_ids[i] = (int32_t)rnd();
        a.ignore_eos = rnd() & 1, a.logprobs = rnd() & 1, a.stream = rnd() & 1;
        a.priority = (int32_t)rnd();
        a.has_deadline = rnd() & 1;
        a.deadline_ms = (int64_t)rnd() * 1000;
        a.reply_topic = rnd() & 1 ? rand_bytes(1 + rnd() % 10, 0) : NULL;
        a.n_meta = (int)(rnd() % 3);
        a.meta_k = calloc(4, sizeof(char *));
        a.meta_v = calloc(4, sizeof(char *));
        for (int i = 0; i < a.n_meta; i++) {
            char k[16];
            snprintf(k, sizeof(k), "k%d", i);
            a.meta_k[i] = strdup(k);
            a.meta_v[i] = rand_bytes(rnd() % 5, 0);
        }
        uint8_t *buf;
        size_t len;
        int32_t sid = (rnd() & 1) ? (int32_t)(rnd() & 0x7fffffff) : -1;
        CHECK(codec_encode_job(c, &a, sid, &buf, &len, err, sizeof(err)) == 0);
        const uint8_t *pl;
        size_t plen;
        int32_t got_sid;
        CHECK(codec_unframe(buf, len, FRAMING_AUTO, &pl, &plen, &got_sid, err, sizeof(err)) == 0);
        CHECK(got_sid == sid);
        CHECK(codec_decode_job(c, pl, plen, &b, err, sizeof(err)) == 0);
        CHECK(!strcmp(a.id, b.id) && a.prompt_is_text == b.prompt_is_text && a.max_tokens == b.max_tokens);
        if (a.prompt_is_text)
            CHECK(a.prompt_text_len == b.prompt_text_len && !memcmp(a.prompt_text, b.prompt_text, a.prompt_text_len));
        else
            CHECK(a.n_prompt_ids == b.n_prompt_ids &&
                  !memcmp(a.prompt_ids, b.prompt_ids, (size_t)a.n_prompt_ids * sizeof(int32_t)));
        CHECK(!strcmp(a.tenant, b.tenant) && a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k);
        CHECK(a.min_p == b.min_p && a.repetition_penalty == b.repetition_penalty && a.has_seed == b.has_seed);
        if (a.has_seed) CHECK(a.seed == b.seed);
        CHECK(a.n_stop == b.n_stop && a.n_stop_ids == b.n_stop_ids);
        for (int i = 0; i < a.n_stop && i < b.n_stop; i++)
            CHECK(a.stop_len[i] == b.stop_len[i] && !memcmp(a.stop[i], b.stop[i], a.stop_len[i]));
        for (int i = 0; i < a.n_stop_ids && i < b.n_stop_ids; i++) CHECK(a.stop_ids[i] == b.stop_ids[i]);
        CHECK(a.ignore_eos == b.ignore_eos && a.logprobs == b.logprobs && a.stream == b.stream && a.priority == b.priority);
        CHECK(a.has_deadline == b.has_deadline && (!a.has_deadline || a.deadline_ms == b.deadline_ms));
        CHECK((!a.reply_topic && !b.reply_topic) || (a.reply_topic && b.reply_topic && !strcmp(a.reply_topic, b.reply_topic)));
        CHECK(a.n_meta == b.n_meta);
        for (int i = 0; i < a.n_meta && i < b.n_meta; i++) {
            int found = 0;
            for (int k = 0; k < b.n_meta; k++)
                found |= !strcmp(a.meta_k[i], b.meta_k[k]) && !strcmp(a.meta_v[i], b.meta_v[k]);
            CHECK(found);
        }
        /* every strict prefix must fail but the v1 layout of the same job (the bytes before the empty
         * messages and thinking=false, decoded with those defaults: test_chat_codec.c); one extra byte must fail */
        if (it < 40) {
            for (size_t cut = 0; cut < plen; cut++) {
                sl_job x;
                if (cut + 2 == plen) {
                    CHECK(codec_decode_job(c, pl, cut, &x, err, sizeof(err)) == 0 && !strcmp(x.id, a.id) &&
                          x.n_messages == 0 && !x.thinking && x.n_meta == a.n_meta);
                    job_free(&x);
                    continue;
                }
                if (codec_decode_job(c, pl, cut, &x, err, sizeof(err)) == 0) {
                    fprintf(stderr, "prefix %zu/%zu decoded\n", cut, plen);
                    fails++;
                    job_free(&x);
                }
            }
            uint8_t *more = malloc(plen + 1);
            memcpy(more, pl, plen);
            more[plen] = 0;
            sl_job x;
            CHECK(codec_decode_job(c, more, plen + 1, &x, err, sizeof(err)) != 0 && strstr(err, "trailing"));
            free(more);
        }
        free(buf);
        job_free(&a);
        job_free(&b);
    }
}

static void test_result_chunk_roundtrip(sl_codec *c) {
    char err[256];
    for (int it = 0; it < 200; it++) {
        int32_t toks[64];
        float lps[64];
        int n = (int)(rnd() % 64);
        for (int i = 0; i < n; i++) toks[i] = (int32_t)rnd(), lps[i] = -(float)(rnd() % 10000) / 100.0f;
        char *text = rand_bytes(rnd() % 30, 1);
        size_t tl = strlen(text) + (rnd() % 2);   /* sometimes keep an embedded NUL */
        const char *mk[2] = {"a", "b"}, *mv[2] = {"x", "yy"};
        sl_result a = {0};
        a.id = "res-id";
        a.status = (sl_result_status)(rnd() % 4);
        a.finish = (sl_result_finish)(rnd() % 5);
        a.tokens = toks, a.n_tokens = n;
        a.text = rnd() & 1 ? text : NULL, a.text_len = tl;
        a.logprobs = lps, a.n_logprobs = (rnd() & 1) ? n : 0;
        a.error = rnd() & 1 ? "boom" : NULL;
        a.prompt_tokens = (int32_t)rnd(), a.completion_tokens = n, a.cached_tokens = (int32_t)(rnd() % 9);
        a.queue_ms = rnd() / 7.0, a.ttft_ms = rnd() / 3.0, a.decode_ms = rnd() / 11.0;
        a.worker = "w", a.model = "m", a.meta_k = mk, a.meta_v = mv, a.n_meta = (int)(rnd() % 3);
        uint8_t *buf;
        size_t len;
        CHECK(codec_encode_result(c, &a, -1, &buf, &len, err, sizeof(err)) == 0);
        sl_result_owned b;
        CHECK(codec_decode_result(c, buf, len, &b, err, sizeof(err)) == 0);
        CHECK(!strcmp(b.r.id, a.id) && b.r.status == a.status && b.r.finish == a.finish && b.r.n_tokens == n);
        CHECK(!memcmp(b.r.tokens, toks, (size_t)n * sizeof(int32_t)) && b.r.n_logprobs == a.n_logprobs);
        CHECK(!a.n_logprobs || !memcmp(b.r.logprobs, lps, (size_t)n * sizeof(float)));
        CHECK((!a.text && !b.r.text) || (a.text && b.r.text && b.r.text_len == tl && !memcmp(b.r.text, text, tl)));
        CHECK((!a.error && !b.r.error) || (a.error && b.r.error && !strcmp(b.r.error, "boom")));
        CHECK(b.r.prompt_tokens == a.prompt_tokens && b.r.cached_tokens == a.cached_tokens);
        CHECK(b.r.queue_ms == a.queue_ms && b.r.ttft_ms == a.ttft_ms && b.r.decode_ms == a.decode_ms && b.r.n_meta == a.n_meta);
        result_owned_free(&b);
        free(buf);

        sl_chunk ch = {"chunk-id", (int32_t)rnd(), toks, n, rnd() & 1 ? text : NULL, tl, (int)(rnd() & 1)}, d;
        void *mem;
        CHECK(codec_encode_chunk(c, &ch, 5, &buf, &len, err, sizeof(err)) == 0);
        CHECK(len > 5 && buf[0] == 0 && buf[4] == 5);
        CHECK(codec_decode_chunk(c, buf + 5, len - 5, &d, &mem, err, sizeof(err)) == 0);
        CHECK(!strcmp(d.id, "chunk-id") && d.seq == ch.seq && d.n_tokens == n && d.done == ch.done);
        CHECK(!memcmp(d.tokens, toks, (size_t)n * sizeof(int32_t)));
        CHECK((!ch.text && !d.text) || (ch.text && d.text && d.text_len == tl && !memcmp(d.text, text, tl)));
        codec_chunk_mem_free(mem);
        free(buf);
        free(text);
    }
}

static void test_framing_and_hostile(sl_codec *c) {
    char err[256];
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    uint8_t hdr[8] = {0, 0, 0, 0, 42, 9, 9, 9};
    CHECK(codec_unframe(hdr, 0, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) != 0 && strstr(err, "empty"));
    CHECK(codec_unframe(NULL, 0, FRAMING_BARE, &pl, &plen, &sid, err, sizeof(err)) != 0);
    CHECK(codec_unframe(hdr, 3, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) != 0 && strstr(err, "5 bytes"));
    CHECK(codec_unframe(hdr, 8, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) == 0 && sid == 42 && plen == 3);
    uint8_t bare[4] = {2, 'a', 0, 0};
    CHECK(codec_unframe(bare, 4, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) == 0 && sid == -1 && plen == 4);
    CHECK(codec_unframe(bare, 4, FRAMING_CONFLUENT, &pl, &plen, &sid, err, sizeof(err)) != 0 && strstr(err, "magic"));
    uint8_t bigid[5] = {0, 0x80, 0, 0, 1};
    CHECK(codec_unframe(bigid, 5, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) != 0);
    /* a forged string length of 2^40: the capping allocator refuses, decode fails cleanly */
    uint8_t forged[16] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 'a'};
    sl_job j;
    CHECK(codec_decode_job(c, forged, sizeof(forged), &j, err, sizeof(err)) != 0);
    /* a forged array count with nothing behind it */
    uint8_t arr[] = {2, 'x', 2, 0xfe, 0xff, 0xff, 0xff, 0x0f, 1};
    CHECK(codec_decode_job(c, arr, sizeof(arr), &j, err, sizeof(err)) != 0);
    /* random garbage never crashes; whatever decodes is a complete Job */
    uint8_t junk[64];
    int decoded = 0;
    for (int it = 0; it < 20000; it++) {
        size_t n = rnd() % sizeof(junk);
        for (size_t i = 0; i < n; i++) junk[i] = (uint8_t)rnd();
        if (codec_decode_job(c, junk, n, &j, err, sizeof(err)) == 0) {
            decoded++;
            CHECK(j.id != NULL);
            job_free(&j);
        }
    }
    printf("random garbage: %d of 20000 decoded as a Job\n", decoded);
}

static void test_config(void) {
    char err[512];
    cfg c;
    cfg_init(&c);
    const char *path = "/tmp/sluice-test-config.conf";
    FILE *f = fopen(path, "w");
    fprintf(f, "# comment\n\n  kafka.bootstrap.servers = b:1  \nmodel.path=/m\nworker.max_inflight=7\nkafka.linger.ms=3\n");
    fclose(f);
    CHECK(cfg_load_file(&c, path, err, sizeof(err)) == 0);
    CHECK(cfg_set_kv(&c, "worker.max_inflight=9", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) == 0);
    CHECK(!strcmp(cfg_get(&c, "kafka.bootstrap.servers"), "b:1") && cfg_int(&c, "worker.max_inflight") == 9);
    CHECK(!strcmp(cfg_get(&c, "topic.jobs"), "sluice.jobs") && !strcmp(cfg_get(&c, "kafka.group.id"), "sluice"));
    CHECK(!strcmp(cfg_get(&c, "kafka.linger.ms"), "3") && !strcmp(cfg_get(&c, "input.framing"), "auto"));
    CHECK(cfg_set_kv(&c, "no.such.key=1", err, sizeof(err)) != 0 && strstr(err, "unknown key"));
    CHECK(cfg_set_kv(&c, "novalue", err, sizeof(err)) != 0);
    CHECK(cfg_set_kv(&c, "worker.max_inflight=abc", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) != 0 && strstr(err, "worker.max_inflight"));
    CHECK(cfg_set_kv(&c, "worker.max_inflight=4", err, sizeof(err)) == 0);
    CHECK(cfg_set_kv(&c, "input.framing=json", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) != 0 && strstr(err, "auto|confluent|bare"));
    CHECK(cfg_set_kv(&c, "input.framing=bare", err, sizeof(err)) == 0);
    CHECK(cfg_set_kv(&c, "input.schema_ids=1,x", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) != 0 && strstr(err, "schema_ids"));
    CHECK(cfg_set_kv(&c, "input.schema_ids=1,22", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) == 0);
    cfg_free(&c);
    cfg_init(&c);
    CHECK(cfg_set_kv(&c, "kafka.bootstrap.servers=x", err, sizeof(err)) == 0);
    CHECK(cfg_validate(&c, err, sizeof(err)) != 0 && strstr(err, "model.path"));
    CHECK(cfg_load_file(&c, "/nonexistent/sluice.conf", err, sizeof(err)) != 0 && strstr(err, "cannot open"));
    cfg_free(&c);
    remove(path);
}

static void test_offsets(void) {
    for (int it = 0; it < 50; it++) {
        offset_tracker t;
        offsets_init(&t);
        int n = 1 + (int)(rnd() % 700);
        int64_t base = rnd() % 1000, *offs = malloc((size_t)n * sizeof(int64_t));
        int64_t o = base;
        for (int i = 0; i < n; i++) {
            o += 1 + (rnd() % 3 == 0);   /* gaps, as with compaction or control records */
            offs[i] = o;
            CHECK(offsets_add(&t, 3, o) == 0);
        }
        int *order = malloc((size_t)n * sizeof(int));
        uint8_t *done = calloc((size_t)n, 1);
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int k = (int)(rnd() % (unsigned)(i + 1)), tmp = order[i];
            order[i] = order[k];
            order[k] = tmp;
        }
        int64_t last = -1;
        for (int i = 0; i < n; i++) {
            done[order[i]] = 1;
            int64_t s = offsets_done(&t, 3, offs[order[i]]);
            int lw = 0;
            while (lw < n && done[lw]) lw++;
            int64_t want = lw > 0 ? offs[lw - 1] + 1 : -1;
            if (s >= 0) {
                CHECK(s == want && s > last);
                last = s;
            } else {
                CHECK(want == last);
            }
        }
        CHECK(last == offs[n - 1] + 1 && offsets_pending(&t) == 0);
        CHECK(offsets_done(&t, 9, 1) == -1);
        offsets_drop(&t, 3);
        offsets_free(&t);
        free(offs);
        free(order);
        free(done);
    }
}

int main(void) {
    rng_state = (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ull;
    printf("seed %llu\n", (unsigned long long)rng_state);
    codec_install_allocator((size_t)16 << 20);
    sl_codec *c;
    char err[256];
    if (codec_new(&c, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_v1(c);
    test_job_roundtrip(c);
    test_result_chunk_roundtrip(c);
    test_framing_and_hostile(c);
    codec_free(c);
    test_config();
    test_offsets();
    printf("%s (%d failures)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
