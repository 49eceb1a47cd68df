/* sluice-generate — one-off generation from a checkpoint directory (no Kafka, no Redis).
 *
 * Contract (tests and outside checks rely on it):
 *   sluice-generate (--model DIR | --synthetic SPEC) [--backend cpu|cuda] (--tokens 1,2,3 | --prompt TEXT)
 *                   --max-new-tokens N [--chunk C] [--temperature T] [--top-p P] [--top-k K]
 *                   [--min-p P] [--repetition-penalty R] [--seed S] [--ignore-eos] [--stop-ids 1,2]
 *                   [--logprobs] [--quantize-experts nvfp4] [--logits-out FILE] [--threads N] [--devices 0,1]
 *                   [--kv-dtype bf16|fp8] [--index-key-dtype bf16|fp8]
 * --kv-dtype / --index-key-dtype: how the attention's keys / the indexer's keys are stored (engine.kv_dtype,
 * engine.index_key_dtype; default bf16).
 * --synthetic v4-flash[:layers=N,experts=mxfp4|nvfp4,routing=uniform|gate,ratios=a,b,...] runs a V4-Flash-shaped model with
 * seeded random weights (engine/synthetic.h). Default greedy; generation stops after EOS (included) unless --ignore-eos. --chunk C prefills
 * the prompt C tokens per step (default: all at once). The last stdout line is one JSON object:
 *   {"tokens": [...], "logprobs": [...]?, "finish_reason": "stop|length|...", "n_prompt": N,
 *    "text": "..."|null, "backend": "cpu", "timings": {"load_ms", "prefill_ms", "decode_ms", "total_ms",
 *    "decode_tokens_per_s"}}
 * --logits-out writes little-endian float32 rows of vocab floats, one per position fed (the
 * prompt, then every generated token but the last): row t = next-token logits after position t.
 * --prompt TEXT is encoded with the model's tokenizer.json (BOS/EOS as its tokenizer_config says),
 * or as bytes when there is none and vocab >= 256; "text" is the decoded output without special
 * tokens and EOS (decode(skip_special_tokens=True), like the worker's Result.text; null without one).
 * Errors: one line on stderr, exit status 2 for bad arguments, 1 for anything else.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "engine.h"
#include "tokenizer.h"

/* bf16 -> 0, fp8 -> 1; else nonzero return */
static int parse_dtype(const char *v, int *fp8) {
    if (!strcmp(v, "bf16") || !strcmp(v, "fp8")) {
        *fp8 = !strcmp(v, "fp8");
        return 0;
    }
    return 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice-generate (--model DIR | --synthetic SPEC) [--backend cpu|cuda] (--tokens 1,2,3 | --prompt TEXT)\n"
            "                       --max-new-tokens N [--chunk C] [--temperature T] [--top-p P] [--top-k K]\n"
            "                       [--min-p P] [--repetition-penalty R] [--seed S] [--ignore-eos]\n"
            "                       [--stop-ids 1,2] [--logprobs] [--quantize-experts nvfp4]\n"
            "                       [--logits-out FILE] [--threads N] [--devices 0,1]\n"
            "                       [--kv-dtype bf16|fp8] [--index-key-dtype bf16|fp8]\n"
            "SPEC: v4-flash[:layers=N,experts=mxfp4|nvfp4,routing=uniform|gate,ratios=a,b,...,seed=S] (random weights, V4-Flash shapes)\n"
            "Generates from a DeepSeek-V4 checkpoint. Default greedy; stops after EOS unless --ignore-eos.\n"
            "The last line on stdout is a JSON object with \"tokens\" (generated ids), \"finish_reason\", timings.\n");
}

static int die(int code, const char *fmt, const char *a) {
    fprintf(stderr, "sluice-generate: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return code;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* "1,2,3" -> ids; -1 on a malformed list */
static int parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) { free(v); return -1; }
        if (k == cap) {
            cap *= 2;
            int32_t *q = realloc(v, (size_t)cap * sizeof *q);
            if (!q) { free(v); return -1; }
            v = q;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) { free(v); return -1; }
    }
    if (k == 0) { free(v); return -1; }
    *out = v;
    *n = k;
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *model = NULL, *synthetic = NULL, *backend = "cpu", *tokens_arg = NULL, *prompt = NULL, *qexp = NULL;
    const char *logits_out = NULL, *stop_arg = NULL, *devices = NULL;
    int kv_fp8 = 0, index_fp8 = 0;
    long max_new = -1, chunk = 0, top_k = 0, threads = 0;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, rep = 1.0f;
    uint64_t seed = 0;
    int ignore_eos = 0, want_logprobs = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = 1; continue; }
        if (!strcmp(a, "--logprobs")) { want_logprobs = 1; continue; }
        if (strncmp(a, "--", 2)) return die(2, "unexpected argument '%s' (try --help)", a);
        if (i + 1 >= argc) return die(2, "%s needs a value", a);
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--synthetic")) synthetic = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--tokens")) tokens_arg = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--quantize-experts")) qexp = v;
        else if (!strcmp(a, "--kv-dtype")) bad = parse_dtype(v, &kv_fp8);
        else if (!strcmp(a, "--index-key-dtype")) bad = parse_dtype(v, &index_fp8);
        else if (!strcmp(a, "--logits-out")) logits_out = v;
        else if (!strcmp(a, "--stop-ids")) stop_arg = v;
        else if (!strcmp(a, "--devices")) devices = v;   /* cuda: the GPUs the model is split across (engine/shard.h) */
        else if (!strcmp(a, "--max-new-tokens")) bad = parse_long(v, 1, INT_MAX / 2, &max_new);
        else if (!strcmp(a, "--chunk")) bad = parse_long(v, 1, INT_MAX, &chunk);
        else if (!strcmp(a, "--top-k")) bad = parse_long(v, 0, INT_MAX, &top_k);
        else if (!strcmp(a, "--threads")) bad = parse_long(v, 1, 1024, &threads);
        else if (!strcmp(a, "--temperature")) bad = parse_float(v, &temperature) || temperature < 0;
        else if (!strcmp(a, "--top-p")) bad = parse_float(v, &top_p) || !(top_p > 0 && top_p <= 1);
        else if (!strcmp(a, "--min-p")) bad = parse_float(v, &min_p) || !(min_p >= 0 && min_p <= 1);
        else if (!strcmp(a, "--repetition-penalty")) bad = parse_float(v, &rep) || !(rep > 0);
        else if (!strcmp(a, "--seed")) bad = parse_u64(v, &seed);
        else return die(2, "unknown option '%s' (try --help)", a);
        if (bad) {
            fprintf(stderr, "sluice-generate: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!model == !synthetic) return die(2, "%s", "give one of --model DIR or --synthetic SPEC (try --help)");
    char synth_path[512];
    if (synthetic) {
        snprintf(synth_path, sizeof synth_path, "synthetic:%s", synthetic);
        model = synth_path;
    }
    if (max_new < 0) return die(2, "%s", "--max-new-tokens N is required");
    if (!tokens_arg == !prompt) return die(2, "%s", "give exactly one of --tokens or --prompt");
    struct stat sb;
    if (!synthetic && (stat(model, &sb) || !S_ISDIR(sb.st_mode))) return die(1, "model directory '%s' not found", model);

    int32_t *toks = NULL, *stops = NULL;
    int n_toks = 0, n_stops = 0;
    if (tokens_arg && parse_ids(tokens_arg, &toks, &n_toks))
        return die(2, "bad --tokens '%s' (expected comma-separated ids like 1,2,3)", tokens_arg);
    if (stop_arg && parse_ids(stop_arg, &stops, &n_stops)) {
        free(toks);
        return die(2, "bad --stop-ids '%s'", stop_arg);
    }

    double t0 = now_ms();
    sl_engine_opts o = {0};
    o.model_path = model;
    o.backend = backend;
    o.quantize_experts = qexp;
    o.n_threads = (int)threads;
    o.devices = devices;
    o.kv_fp8 = kv_fp8;
    o.index_fp8 = index_fp8;
    o.prefill_chunk = (int)chunk;
    o.max_step_tokens = chunk > 0 ? (int)chunk : INT_MAX / 2;
    sl_engine *e;
    char err[512];
    if (sl_engine_open(&o, &e, err, sizeof err)) { free(toks); free(stops); return die(1, "%s", err); }
    const sl_model_info *info = sl_engine_info(e);
    double t_loaded = now_ms();

    /* tokenizer: dir/tokenizer.json, else bytes when vocab >= 256 (for --prompt and "text") */
    sl_tokenizer *tz = NULL;
    char terr[512];
    if (sl_tokenizer_open_for_model(model, info->vocab_size, &tz, terr, sizeof terr)) tz = NULL;
    if (prompt) {
        size_t n = 0;
        if (!tz) { sl_engine_close(e); free(stops); return die(1, "%s", terr); }
        if (sl_tokenizer_encode(tz, prompt, strlen(prompt), 1, &toks, &n, terr, sizeof terr)) {
            sl_tokenizer_free(tz);
            sl_engine_close(e);
            free(stops);
            return die(2, "cannot tokenize --prompt: %s", terr);
        }
        n_toks = (int)n;
        if (n_toks == 0) { sl_tokenizer_free(tz); sl_engine_close(e); free(toks); free(stops); return die(2, "%s", "empty --prompt"); }
    }

    sl_sampling s = {0};
    s.temperature = temperature;
    s.top_k = (int)top_k;
    s.top_p = top_p;
    s.min_p = min_p;
    s.repetition_penalty = rep;
    s.seed = seed;
    s.max_tokens = (int)max_new;
    s.stop_ids = stops;
    s.n_stop_ids = n_stops;
    s.ignore_eos = ignore_eos;
    s.logprobs = want_logprobs;
    s.all_logits = logits_out != NULL;
    uint64_t id;
    int rc = 1;
    int32_t *out = malloc((size_t)max_new * sizeof *out);
    float *lps = malloc((size_t)max_new * sizeof *lps);
    FILE *lf = NULL;
    if (!out || !lps) { fprintf(stderr, "sluice-generate: out of memory\n"); goto done; }
    if (sl_engine_submit(e, toks, n_toks, &s, 0, &id, err, sizeof err)) {
        fprintf(stderr, "sluice-generate: %s\n", err);
        rc = 2;
        goto done;
    }
    if (logits_out && !(lf = fopen(logits_out, "wb"))) {
        fprintf(stderr, "sluice-generate: cannot write %s: %s\n", logits_out, strerror(errno));
        goto done;
    }

    int n_out = 0, rows = 0, finished = 0;
    sl_finish_reason why = SL_FINISH_ERROR;
    const char *ferr = NULL;
    double t_first = 0.0;
    while (!finished) {
        if (sl_engine_step(e) < 0 && !sl_engine_active(e)) { /* FINISH events follow */ }
        sl_event ev;
        while (sl_engine_poll(e, &ev)) {
            if (ev.kind == SL_EV_TOKEN) {
                if (n_out == 0) t_first = now_ms();
                if (n_out < max_new) { out[n_out] = ev.token; lps[n_out] = ev.logprob; n_out++; }
            } else if (ev.kind == SL_EV_LOGITS && lf) {
                if (ev.position != rows ||
                    fwrite(ev.logits, sizeof(float), (size_t)info->vocab_size, lf) != (size_t)info->vocab_size) {
                    fprintf(stderr, "sluice-generate: writing %s failed (row %d)\n", logits_out, rows);
                    goto done;
                }
                rows++;
            } else if (ev.kind == SL_EV_FINISH) {
                finished = 1;
                why = ev.reason;
                ferr = ev.error;
            }
        }
        if (!finished && !sl_engine_active(e)) break;
    }
    if (!finished || why == SL_FINISH_ERROR) {
        fprintf(stderr, "sluice-generate: generation failed: %s\n", ferr ? ferr : "engine stopped");
        goto done;
    }
    if (lf) {
        if (fclose(lf)) { lf = NULL; fprintf(stderr, "sluice-generate: writing %s failed\n", logits_out); goto done; }
        lf = NULL;
    }
    double t_end = now_ms();
    if (t_first == 0.0) t_first = t_end;
    double dec_ms = t_end - t_first;
    json_t *res = json_object(), *jt = json_array(), *jl = json_array(), *tm = json_object();
    for (int i = 0; i < n_out; i++) {
        json_array_append_new(jt, json_integer(out[i]));
        json_array_append_new(jl, json_real(lps[i]));
    }
    json_object_set_new(res, "tokens", jt);
    if (want_logprobs) json_object_set_new(res, "logprobs", jl);
    else json_decref(jl);
    /* "text": special tokens and EOS give none (decode(skip_special_tokens=True)), as the worker's Result.text */
    char *text = NULL;
    size_t tlen = 0, n_txt = 0;
    int32_t *txt = malloc(((size_t)n_out + 1) * sizeof *txt);
    for (int i = 0; txt && tz && i < n_out; i++) {
        int silent = sl_tokenizer_is_special(tz, out[i]);
        for (int k = 0; k < info->n_eos; k++) silent |= out[i] == info->eos_ids[k];
        if (!silent) txt[n_txt++] = out[i];
    }
    if (tz && txt && sl_tokenizer_decode(tz, txt, n_txt, &text, &tlen) == 0)
        json_object_set_new(res, "text", json_stringn(text, tlen));
    else
        json_object_set_new(res, "text", json_null());
    free(text);
    free(txt);
    json_object_set_new(res, "finish_reason", json_string(sl_finish_reason_name(why)));
    json_object_set_new(res, "n_prompt", json_integer(n_toks));
    json_object_set_new(res, "n_generated", json_integer(n_out));
    json_object_set_new(res, "backend", json_string(info->backend));
    json_object_set_new(tm, "load_ms", json_real(t_loaded - t0));
    json_object_set_new(tm, "prefill_ms", json_real(t_first - t_loaded));
    json_object_set_new(tm, "decode_ms", json_real(dec_ms));
    json_object_set_new(tm, "total_ms", json_real(t_end - t0));
    json_object_set_new(tm, "decode_tokens_per_s", json_real(n_out > 1 && dec_ms > 0 ? (n_out - 1) * 1000.0 / dec_ms : 0.0));
    json_object_set_new(res, "timings", tm);
    char *js = json_dumps(res, JSON_COMPACT | JSON_REAL_PRECISION(7));
    json_decref(res);
    if (!js) { fprintf(stderr, "sluice-generate: out of memory\n"); goto done; }
    printf("%s\n", js);
    free(js);
    rc = 0;
done:
    if (lf) fclose(lf);
    free(out);
    free(lps);
    free(toks);
    free(stops);
    sl_tokenizer_free(tz);
    sl_engine_close(e);
    return rc;
}
