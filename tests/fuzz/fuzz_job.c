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
#include "job_diff.h"
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

static void check_same(const sl_job *a, const sl_job *b)
{
    const char *d = job_diff(a, b, 0);
    if (d) {
        char m[160];
        snprintf(m, sizeof m, "round trip: %s differs", d);
        fail(m);
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
