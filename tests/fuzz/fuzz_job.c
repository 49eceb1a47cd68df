/* fuzz_job.c — libFuzzer target for the worker's job path: the bytes of a Kafka message value go
 * through codec_unframe (auto framing: Confluent or bare), codec_decode_job and the worker's
 * validation (wj_validate, with the test tokenizer for text prompts, stop strings and chat
 * messages), exactly as wj_on_message does. Any input must give a job or an error, never a crash,
 * leak or undefined behaviour. A job that passes validation must survive encode -> unframe ->
 * decode with the same fields (what the worker accepted is what a producer can write); a
 * violation aborts.
 * Model as the harness sets it: vocab 16007 (the test tokenizer's), context 4096.
 */
#include "codec.h"
#include "textcodec.h"
#include "worker.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_TEST_DATA
#define SLUICE_TEST_DATA "tests/data"
#endif

static sl_codec *codec;
static sl_model_info info;
static worker w;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_job: %s\n", what);
    abort();
}

static void setup(void)
{
    if (codec) return;
    char err[512];
    codec_install_allocator((size_t)16 << 20);
    if (codec_new(&codec, err, sizeof err)) fail(err);
    info.vocab_size = 16007;
    info.max_context = 4096;
    info.bos_id = -1;
    w.info = &info;
    int eos = 0;
    if (textcodec_open(SLUICE_TEST_DATA "/tokenizer", info.vocab_size, &eos, 1, &w.tc, w.tc_err, sizeof w.tc_err))
        fail(w.tc_err);
}

static int same_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static int same_opt_str(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* The fields the encoder writes byte for byte (metadata and roles go through strlen, so they are
 * compared as C strings). */
static void check_same(const sl_job *a, const sl_job *b)
{
    if (!same_bytes(a->id, a->id_len, b->id, b->id_len)) fail("round trip: id differs");
    if (a->prompt_is_text != b->prompt_is_text) fail("round trip: prompt kind differs");
    if (a->prompt_is_text ? !same_bytes(a->prompt_text, a->prompt_text_len, b->prompt_text, b->prompt_text_len)
                          : a->n_prompt_ids != b->n_prompt_ids ||
                                (a->n_prompt_ids &&
                                 memcmp(a->prompt_ids, b->prompt_ids, (size_t)a->n_prompt_ids * sizeof(int32_t))))
        fail("round trip: prompt differs");
    if (a->max_tokens != b->max_tokens || a->top_k != b->top_k || a->priority != b->priority)
        fail("round trip: an int field differs");
    if (memcmp(&a->temperature, &b->temperature, sizeof a->temperature) || memcmp(&a->top_p, &b->top_p, sizeof a->top_p) ||
        memcmp(&a->min_p, &b->min_p, sizeof a->min_p) ||
        memcmp(&a->repetition_penalty, &b->repetition_penalty, sizeof a->repetition_penalty))
        fail("round trip: a float field differs");
    if (a->has_seed != b->has_seed || (a->has_seed && a->seed != b->seed)) fail("round trip: seed differs");
    if (a->has_deadline != b->has_deadline || (a->has_deadline && a->deadline_ms != b->deadline_ms))
        fail("round trip: deadline differs");
    if (a->ignore_eos != b->ignore_eos || a->logprobs != b->logprobs || a->stream != b->stream ||
        a->thinking != b->thinking)
        fail("round trip: a flag differs");
    if (!same_opt_str(a->tenant, b->tenant) || !same_opt_str(a->reply_topic, b->reply_topic))
        fail("round trip: tenant or reply_topic differs");
    if (a->n_stop != b->n_stop || a->n_stop_ids != b->n_stop_ids) fail("round trip: stop count differs");
    for (int i = 0; i < a->n_stop; i++)
        if (!same_bytes(a->stop[i], a->stop_len[i], b->stop[i], b->stop_len[i])) fail("round trip: stop differs");
    if (a->n_stop_ids && memcmp(a->stop_ids, b->stop_ids, (size_t)a->n_stop_ids * sizeof(int32_t)))
        fail("round trip: stop_token_ids differ");
    if (a->n_meta != b->n_meta) fail("round trip: metadata count differs");
    for (int i = 0; i < a->n_meta; i++)
        if (strcmp(a->meta_k[i], b->meta_k[i]) || strcmp(a->meta_v[i], b->meta_v[i]))
            fail("round trip: metadata differs");
    if (a->n_messages != b->n_messages) fail("round trip: message count differs");
    for (int i = 0; i < a->n_messages; i++) {
        const sl_job_message *x = &a->messages[i], *y = &b->messages[i];
        if (strcmp(x->role, y->role) || !same_bytes(x->content, x->content_len, y->content, y->content_len) ||
            (x->reasoning_content == NULL) != (y->reasoning_content == NULL) ||
            (x->reasoning_content && !same_bytes(x->reasoning_content, x->reasoning_content_len, y->reasoning_content,
                                                 y->reasoning_content_len)))
            fail("round trip: a message differs");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    const uint8_t *pl;
    size_t plen;
    int32_t sid;
    char err[512];
    if (codec_unframe(data, size, FRAMING_AUTO, &pl, &plen, &sid, err, sizeof err)) return 0;
    if (pl < data || pl + plen != data + size) fail("unframe: payload outside the message");
    sl_job job;
    if (codec_decode_job(codec, pl, plen, &job, err, sizeof err)) return 0;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    int valid = wj_validate(&w, &job, &prompt, &n_prompt, err, sizeof err) == 0;
    if (valid) {
        if (n_prompt < 1 || n_prompt >= info.max_context) fail("validation passed a prompt outside the context");
        for (int i = 0; i < n_prompt; i++)
            if (prompt[i] < 0 || prompt[i] >= info.vocab_size) fail("validation passed an id outside the vocab");
        uint8_t *out;
        size_t outlen;
        if (codec_encode_job(codec, &job, sid, &out, &outlen, err, sizeof err)) fail(err);
        const uint8_t *pl2;
        size_t plen2;
        int32_t sid2;
        sl_job again;
        if (codec_unframe(out, outlen, FRAMING_AUTO, &pl2, &plen2, &sid2, err, sizeof err)) fail(err);
        if (sid2 != sid) fail("round trip: schema id differs");
        if (codec_decode_job(codec, pl2, plen2, &again, err, sizeof err)) fail(err);
        check_same(&job, &again);
        job_free(&again);
        free(out);
    }
    free(prompt);
    job_free(&job);
    return 0;
}
