/* Unit tests (label unit, also under ASan/UBSan) of chat jobs in the consumer:
 * - Job and Result schema evolution: bytes written by python3-avro with the v1 schemas (schemas/v1/) and
 *   with the current ones decode here; the C encoder writes exactly what python3-avro writes; random chat
 *   jobs round-trip; every strict prefix of one fails except its v1 layout; hostile message bytes fail
 *   before avro-c sees them;
 * - textcodec_encode_messages: DeepSeek-V4's chat prompt, tokenized without a second BOS, and its errors;
 * - textcodec_chat_answer: content / reasoning_content split at `</think>` as text and as a special token.
 * usage: test_chat_codec DATA_DIR (tests/data) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "codec.h"
#include "textcodec.h"

#include "check.h"

/* Written by python3-avro 1.11 (Debian) from schemas/job.avsc: id "chat-1", prompt "", max_tokens 9,
 * metadata {k: v}, messages [system "Be brief.", user "Hi é", assistant "Hello" (reasoning "greet"),
 * user "2+2?"], thinking true; the other fields their defaults. */
static const char V2_JOB[] =
    "0c636861742d3100001200000000000000803f00000000000000803f00000000000000000002026b027600080c73797374656d1242"
    "652062726965662e0008757365720a486920c3a90012617373697374616e740a48656c6c6f020a6772656574087573657208322b"
    "323f000001";
/* The same job with prompt "plain" and without messages/thinking, from schemas/v1/job.avsc. */
static const char V1_JOB[] =
    "0c636861742d31000a706c61696e1200000000000000803f00000000000000803f00000000000000000002026b027600";
/* Result id r9, OK/STOP, tokens [1, 2], text "why</think>4", usage 3/2/0, timing 1/2/3, worker w, model m:
 * from schemas/v1/result.avsc, and from schemas/result.avsc with content "4", reasoning_content "why". */
static const char V1_RESULT[] =
    "04723900000402040002187768793c2f7468696e6b3e340000060400000000000000f03f00000000000000400000000000000840"
    "0277026d00";
static const char V2_RESULT[] =
    "04723900000402040002187768793c2f7468696e6b3e340000060400000000000000f03f00000000000000400000000000000840"
    "0277026d000202340206776879";

static void test_python_bytes(sl_codec *c) {
    uint8_t buf[512];
    char err[256];
    sl_job j;
    size_t n = unhex(V2_JOB, buf);
    CHECK(codec_decode_job(c, buf, n, &j, err, sizeof(err)) == 0);
    CHECK(!strcmp(j.id, "chat-1") && j.prompt_is_text && j.prompt_text_len == 0 && j.max_tokens == 9);
    CHECK(j.n_meta == 1 && !strcmp(j.meta_k[0], "k") && j.thinking == 1 && j.n_messages == 4);
    if (j.n_messages == 4) {
        CHECK(!strcmp(j.messages[0].role, "system") && j.messages[0].content_len == 9 &&
              !strcmp(j.messages[0].content, "Be brief.") && !j.messages[0].reasoning_content);
        CHECK(!strcmp(j.messages[1].role, "user") && j.messages[1].content_len == 5 &&
              !memcmp(j.messages[1].content, "Hi \xc3\xa9", 5));
        CHECK(!strcmp(j.messages[2].role, "assistant") && !strcmp(j.messages[2].content, "Hello") &&
              j.messages[2].reasoning_content && j.messages[2].reasoning_content_len == 5 &&
              !strcmp(j.messages[2].reasoning_content, "greet"));
        CHECK(!strcmp(j.messages[3].content, "2+2?") && !j.messages[3].reasoning_content);
    }
    /* encoding the decoded job gives python3-avro's bytes back */
    uint8_t *out;
    size_t outlen;
    CHECK(codec_encode_job(c, &j, -1, &out, &outlen, err, sizeof(err)) == 0 && outlen == n && !memcmp(out, buf, n));
    free(out);
    job_free(&j);

    /* a v1 producer's job: the added fields take their defaults */
    n = unhex(V1_JOB, buf);
    CHECK(codec_decode_job(c, buf, n, &j, err, sizeof(err)) == 0);
    CHECK(!strcmp(j.id, "chat-1") && j.prompt_text_len == 5 && !strcmp(j.prompt_text, "plain") && j.n_meta == 1 &&
          j.n_messages == 0 && j.thinking == 0);
    job_free(&j);
    /* ... also behind Confluent framing, and with one byte too many it is neither layout */
    uint8_t framed[600] = {0, 0, 0, 0, 7};
    memcpy(framed + 5, buf, n);
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    CHECK(codec_unframe(framed, n + 5, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof(err)) == 0 && sid == 7);
    CHECK(codec_decode_job(c, pl, plen, &j, err, sizeof(err)) == 0 && j.n_messages == 0);
    job_free(&j);
    buf[n] = 0;
    CHECK(codec_decode_job(c, buf, n + 1, &j, err, sizeof(err)) != 0);

    /* Results */
    sl_result_owned r;
    n = unhex(V1_RESULT, buf);
    CHECK(codec_decode_result(c, buf, n, &r, err, sizeof(err)) == 0);
    CHECK(!strcmp(r.r.id, "r9") && r.r.text_len == 12 && !r.r.content && !r.r.reasoning_content &&
          !strcmp(r.r.model, "m") && r.r.decode_ms == 3.0);
    result_owned_free(&r);
    n = unhex(V2_RESULT, buf);
    CHECK(codec_decode_result(c, buf, n, &r, err, sizeof(err)) == 0);
    CHECK(r.r.content && r.r.content_len == 1 && !strcmp(r.r.content, "4") && r.r.reasoning_content &&
          r.r.reasoning_content_len == 3 && !strcmp(r.r.reasoning_content, "why") && r.r.n_tokens == 2);
    CHECK(codec_encode_result(c, &r.r, -1, &out, &outlen, err, sizeof(err)) == 0 && outlen == n &&
          !memcmp(out, buf, n));
    free(out);
    result_owned_free(&r);
    /* a Result that is neither layout still fails */
    CHECK(codec_decode_result(c, buf, n - 1, &r, err, sizeof(err)) != 0);
    buf[n] = 0;
    CHECK(codec_decode_result(c, buf, n + 1, &r, err, sizeof(err)) != 0);
}

static char *rand_str(size_t n) {
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)(rnd() & 0xff);
    s[n] = 0;
    return s;
}

static void test_roundtrip(sl_codec *c) {
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool"};
    char err[256];
    for (int it = 0; it < 200; it++) {
        sl_job a = {0}, b;
        a.id = strdup("chat-rt");
        a.prompt_is_text = 1;
        a.prompt_text = strdup("");
        a.max_tokens = 1 + (int)(rnd() % 100);
        a.thinking = rnd() & 1;
        a.n_messages = 1 + (int)(rnd() % 6);
        a.messages = calloc((size_t)a.n_messages, sizeof(*a.messages));
        for (int i = 0; i < a.n_messages; i++) {
            sl_job_message *m = &a.messages[i];
            m->role = strdup(roles[rnd() % 5]);
            m->content_len = rnd() % 50;
            m->content = rand_str(m->content_len);   /* any bytes, U+0000 included */
            if (rnd() & 1) {
                m->reasoning_content_len = rnd() % 20;
                m->reasoning_content = rand_str(m->reasoning_content_len);
            }
        }
        uint8_t *buf;
        size_t len;
        CHECK(codec_encode_job(c, &a, -1, &buf, &len, err, sizeof(err)) == 0);
        CHECK(codec_decode_job(c, buf, len, &b, err, sizeof(err)) == 0);
        CHECK(b.thinking == a.thinking && b.n_messages == a.n_messages && b.prompt_is_text && b.prompt_text_len == 0);
        for (int i = 0; i < a.n_messages && i < b.n_messages; i++) {
            sl_job_message *x = &a.messages[i], *y = &b.messages[i];
            CHECK(!strcmp(x->role, y->role) && x->content_len == y->content_len &&
                  !memcmp(x->content, y->content, x->content_len));
            CHECK(!x->reasoning_content == !y->reasoning_content);
            if (x->reasoning_content && y->reasoning_content)
                CHECK(x->reasoning_content_len == y->reasoning_content_len &&
                      !memcmp(x->reasoning_content, y->reasoning_content, x->reasoning_content_len));
        }
        job_free(&b);
        /* strict prefixes fail, except the one that ends where the v1 layout ends (after metadata) */
        if (it < 30) {
            size_t v1_end = 0;
            for (size_t cut = 0; cut < len; cut++) {
                sl_job x;
                if (codec_decode_job(c, buf, cut, &x, err, sizeof(err)) == 0) {
                    CHECK(v1_end == 0 && x.n_messages == 0 && !x.thinking && !strcmp(x.id, "chat-rt"));
                    v1_end = cut;
                    job_free(&x);
                }
            }
            CHECK(v1_end > 0 && buf[v1_end] == 2 * a.n_messages);   /* the messages block count (zigzag) */
        }
        free(buf);
        job_free(&a);
    }
}

static void test_hostile(sl_codec *c) {
    uint8_t buf[512];
    char err[256];
    sl_job j;
    size_t n = unhex(V2_JOB, buf);
    /* the messages count is the byte after metadata's end: V1 part + 0 */
    size_t at = strlen(V1_JOB) / 2 - 5;   /* V1_JOB has "plain" (5 more bytes) where V2_JOB has "" */
    CHECK(buf[at] == 8);                  /* 4 messages */
    uint8_t bad[512];
    memcpy(bad, buf, n);
    bad[at] = 0x7e;                       /* 63 messages: more than the bytes left */
    CHECK(codec_decode_job(c, bad, n, &j, err, sizeof(err)) != 0 && strstr(err, "'messages'"));
    memcpy(bad, buf, n);
    bad[n - 1] = 2;                       /* thinking byte not 0/1 */
    CHECK(codec_decode_job(c, bad, n, &j, err, sizeof(err)) != 0 && strstr(err, "'thinking'"));
    memcpy(bad, buf, n);
    bad[at + 1] = 0xff;                   /* the first role's length, forged: negative */
    CHECK(codec_decode_job(c, bad, n, &j, err, sizeof(err)) != 0 && strstr(err, "'messages'"));
    /* reasoning_content union branch 2 does not exist: the system message's branch byte */
    memcpy(bad, buf, n);
    size_t rc_at = at + 1 + 1 + 6 + 1 + 9;   /* count, len+"system", len+"Be brief." */
    CHECK(bad[rc_at] == 0);
    bad[rc_at] = 4;
    CHECK(codec_decode_job(c, bad, n, &j, err, sizeof(err)) != 0 && strstr(err, "'messages'"));
    /* a 2 GB role length */
    memcpy(bad, buf, n);
    uint8_t big[] = {0xfe, 0xff, 0xff, 0xff, 0x0f};
    memcpy(bad + at + 1, big, 5);
    CHECK(codec_decode_job(c, bad, n, &j, err, sizeof(err)) != 0);
}

// ---------------------------------------------------------------- textcodec

static sl_textcodec *bytes_codec(void) {
    sl_textcodec *tc;
    char err[256];
    int eos[1] = {2};
    CHECK(textcodec_open("/nonexistent-model-dir", 256, eos, 1, &tc, err, sizeof(err)) == 0);
    return tc;
}

static void test_encode_messages(const char *data) {
    char err[256];
    sl_textcodec *tc = bytes_codec();
    sl_job_message m[3] = {{"system", "Be brief.", 9, NULL, 0}, {"user", "Hi", 2, NULL, 0}, {"user", "x", 1, NULL, 0}};
    int32_t *ids;
    int n;
    const char *want = SL_CHAT_BOS "Be brief." SL_CHAT_USER "Hi" SL_CHAT_ASSISTANT SL_CHAT_THINK_START;
    CHECK(textcodec_encode_messages(tc, m, 2, 1, &ids, &n, err, sizeof(err)) == 0);
    CHECK(n == (int)strlen(want));   /* byte ids: the rendered text, BOS once (as text) */
    for (int i = 0; i < n && i < (int)strlen(want); i++) CHECK(ids[i] == (uint8_t)want[i]);
    free(ids);

    /* errors name the message */
    m[2] = (sl_job_message){"assistant", "ok", 2, NULL, 0};
    CHECK(textcodec_encode_messages(tc, m, 3, 0, &ids, &n, err, sizeof(err)) != 0 && strstr(err, "messages[2]") &&
          strstr(err, "last message") && !ids);
    m[2] = (sl_job_message){"tool", "ok", 2, NULL, 0};
    CHECK(textcodec_encode_messages(tc, m, 3, 0, &ids, &n, err, sizeof(err)) != 0 &&
          strstr(err, "messages[2]: role 'tool'"));
    m[2] = (sl_job_message){"user", "\xff", 1, NULL, 0};
    CHECK(textcodec_encode_messages(tc, m, 3, 0, &ids, &n, err, sizeof(err)) != 0 &&
          strstr(err, "messages[2]: content is not valid UTF-8"));
    m[2] = (sl_job_message){"user", "a", 1, "\xc3", 1};
    CHECK(textcodec_encode_messages(tc, m, 3, 0, &ids, &n, err, sizeof(err)) != 0 &&
          strstr(err, "messages[2]: reasoning_content is not valid UTF-8"));
    m[2] = (sl_job_message){"developer", "", 0, NULL, 0};
    CHECK(textcodec_encode_messages(tc, m, 3, 0, &ids, &n, err, sizeof(err)) != 0 &&
          strstr(err, "messages[2]: a developer message needs content"));
    textcodec_close(tc);

    /* a tokenizer.json: the chat markers are its special tokens, BOS appears once */
    char path[1100];
    snprintf(path, sizeof(path), "%s/tokenizer/tokenizer.json", data);
    sl_tokenizer *tok;
    CHECK(sl_tokenizer_load(path, &tok, err, sizeof(err)) == 0);
    sl_textcodec t2 = {"tokenizer.json", tok, sl_tokenizer_n_ids(tok), {1}, 1, -1};
    CHECK(textcodec_encode_messages(&t2, m, 2, 0, &ids, &n, err, sizeof(err)) == 0);
    int32_t user = sl_tokenizer_token_id(tok, SL_CHAT_USER, strlen(SL_CHAT_USER));
    int32_t asst = sl_tokenizer_token_id(tok, SL_CHAT_ASSISTANT, strlen(SL_CHAT_ASSISTANT));
    int bos = 0, users = 0, assts = 0;
    for (int i = 0; i < n; i++) bos += ids[i] == 0, users += ids[i] == user, assts += ids[i] == asst;
    CHECK(n > 5 && ids[0] == 0 && bos == 1 && users == 1 && assts == 1 && user == 2 && asst == 3);
    free(ids);
    sl_tokenizer_free(tok);
}

static void check_answer(const sl_textcodec *tc, int thinking, const int32_t *toks, int nt, const char *text,
                         const char *want_reason, const char *want_content) {
    sl_chat_answer a;
    textcodec_chat_answer(tc, thinking, toks, nt, text, strlen(text), &a);
    CHECK(!a.reasoning == !want_reason && !a.content == !want_content);
    if (a.reasoning && want_reason)
        CHECK(a.reasoning_len == strlen(want_reason) && !memcmp(a.reasoning, want_reason, a.reasoning_len));
    if (a.content && want_content)
        CHECK(a.content_len == strlen(want_content) && !memcmp(a.content, want_content, a.content_len));
}

/* tokens: ids of s (the byte tokenizer: bytes) */
static int bytes_of(const char *s, int32_t *ids) {
    int n = 0;
    for (; *s; s++) ids[n++] = (uint8_t)*s;
    return n;
}

static void test_answer(const char *data) {
    sl_textcodec *tc = bytes_codec();
    int32_t ids[256];
    const char *t = "Think: 2+2 is 4.</think>It is 4.";
    int n = bytes_of(t, ids);
    check_answer(tc, 1, ids, n, t, "Think: 2+2 is 4.", "It is 4.");
    check_answer(tc, 0, ids, n, t, NULL, t);                       /* thinking off: all of it is content */
    check_answer(tc, 1, ids, 0, "still thinking", "still thinking", NULL);   /* max_tokens before </think> */
    check_answer(tc, 1, ids, 0, "a</think>b</think>c", "a", "b</think>c");   /* the first one ends thinking */
    check_answer(tc, 1, ids, 0, "</think>", "", "");
    check_answer(tc, 1, ids, 0, "", "", NULL);
    check_answer(tc, 0, ids, 0, "", NULL, "");
    textcodec_close(tc);

    /* `</think>` as a special token (decodes to no text): split where the token is */
    char path[1100], err[256];
    snprintf(path, sizeof(path), "%s/tokenizer/tokenizer.json", data);
    json_t *j = json_load_file(path, 0, NULL);
    CHECK(j != NULL);
    if (!j) return;
    json_array_append_new(json_object_get(j, "added_tokens"),
                          json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 16100, "content", "</think>",
                                    "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
    char *js = json_dumps(j, 0);
    json_decref(j);
    sl_tokenizer *tok;
    CHECK(sl_tokenizer_load_json(js, strlen(js), &tok, err, sizeof(err)) == 0);
    free(js);
    sl_textcodec t2 = {"tokenizer.json", tok, 16200, {1}, 1, -1};
    t2.think_end_id = sl_tokenizer_token_id(tok, "</think>", 8);
    CHECK(t2.think_end_id == 16100 && textcodec_silent(&t2, 16100));
    int32_t *a, *b;
    size_t na, nb;
    const char *reason = "r\xc3\xa9sum\xc3\xa9 of it", *answer = " The answer.";
    CHECK(sl_tokenizer_encode(tok, reason, strlen(reason), 0, &a, &na, err, sizeof(err)) == 0);
    CHECK(sl_tokenizer_encode(tok, answer, strlen(answer), 0, &b, &nb, err, sizeof(err)) == 0);
    int32_t all[128];
    int k = 0;
    for (size_t i = 0; i < na; i++) all[k++] = a[i];
    all[k++] = 16100;
    for (size_t i = 0; i < nb; i++) all[k++] = b[i];
    sl_textdec d;
    textdec_init(&d, &t2);
    for (int i = 0; i < k; i++) textdec_push(&d, all[i]);
    textdec_finish(&d);
    CHECK(d.len == 26 && !strcmp(d.text, "r\xc3\xa9sum\xc3\xa9 of it The answer."));   /* the marker gives no text */
    check_answer(&t2, 1, all, k, d.text, reason, answer);
    check_answer(&t2, 1, all, (int)na, reason, reason, NULL);
    /* the text was cut (a stop string) inside the reasoning: all of it is reasoning, content empty */
    check_answer(&t2, 1, all, k, "r\xc3\xa9s", "r\xc3\xa9s", "");
    textdec_free(&d);
    free(a);
    free(b);
    sl_tokenizer_free(tok);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat_codec DATA_DIR\n");
        return 2;
    }
    rng_state = (uint64_t)time(NULL);
    fprintf(stderr, "seed %llu\n", (unsigned long long)rng_state);
    codec_install_allocator((size_t)64 << 20);
    sl_codec *c;
    char err[256];
    if (codec_new(&c, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_python_bytes(c);
    test_roundtrip(c);
    test_hostile(c);
    codec_free(c);
    test_encode_messages(argv[1]);
    test_answer(argv[1]);
    if (fails) {
        fprintf(stderr, "%d checks failed\n", fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
