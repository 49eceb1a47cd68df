/* bench_engine.c — `sluice-bench engine`: the engine's decode loop (sl_engine_step + sl_engine_poll, what the worker's
 * engine thread runs) with engine.overlap off and on, in one process.
 *
 * Per batch B: B requests of --prompt random tokens (ignore_eos, --tokens each; sampled at temperature 1 with seeds of
 * their own, so that their tokens differ as real requests' do: a synthetic model routes by token) submitted together
 * and stepped to the end; the time from the step that gave every request its second token to the last FINISH, over
 * the tokens - 2 decode steps between, is one run's ms per step. Rounds alternate off, on, off, on (a fresh engine each), and a
 * row is the median over rounds x --reps runs. The difference is what the host's planning, emitting and polling cost
 * the device between steps when nothing overlaps them; sluice-bench decode's step time (graph replays back to back) is
 * the floor both approach.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine.h"
#include "bench_util.h"

/* One run of B requests: ms per decode step, or -1. */
static double run_once(sl_engine *e, int B, int P, int T, uint64_t seed, uint64_t *overlapped)
{
    const int V = sl_engine_info(e)->vocab_size;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    int *got = calloc((size_t)B, sizeof *got);
    if (!prompt || !got) { free(prompt); free(got); return -1; }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    char err[256];
    for (int i = 0; i < B; i++) {
        for (int k = 0; k < P; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompt[k] = (int32_t)(x % (uint64_t)V);
        }
        sl_sampling s;   /* sampled, so that the rows' tokens, and with them the experts they route to, differ */
        memset(&s, 0, sizeof s);
        s.temperature = 1.0f;
        s.top_p = 1.0f;
        s.repetition_penalty = 1.0f;
        s.seed = seed + (uint64_t)i;
        s.max_tokens = T;
        s.ignore_eos = 1;
        if (sl_engine_submit(e, prompt, P, &s, (uint64_t)i, NULL, err, sizeof err)) {
            fprintf(stderr, "sluice-bench engine: submit: %s\n", err);
            free(prompt); free(got);
            return -1;
        }
    }
    sl_engine_stats s0, s1;
    sl_engine_get_stats(e, &s0);
    int left = B, second = 0;
    double t_a = 0;
    while (left > 0) {
        if (sl_engine_step(e) < 0) { fprintf(stderr, "sluice-bench engine: a step failed\n"); left = -1; break; }
        sl_event ev;
        while (sl_engine_poll(e, &ev)) {
            if (ev.kind == SL_EV_TOKEN && ++got[ev.tag] == 2) second++;
            if (ev.kind == SL_EV_FINISH) left--;
        }
        if (second == B && t_a == 0) t_a = now_ms();
    }
    const double ms = left < 0 || t_a == 0 ? -1 : (now_ms() - t_a) / (T - 2);
    sl_engine_get_stats(e, &s1);
    *overlapped += s1.steps_overlapped - s0.steps_overlapped;
    free(prompt);
    free(got);
    return ms;
}

int bench_engine(int argc, char **argv)
{
    const char *model = NULL, *backend = "cuda", *out = NULL;
    int batches[16] = {1, 16, 64}, nb = 3, P = 32, T = 64, reps = 3, rounds = 2;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--synthetic") && v) { static char m[512]; snprintf(m, sizeof m, "synthetic:%s", v); model = m; i++; }
        else if (!strcmp(a, "--model") && v) { model = v; i++; }
        else if (!strcmp(a, "--backend") && v) { backend = v; i++; }
        else if (!strcmp(a, "--prompt") && v) { P = atoi(v); i++; }
        else if (!strcmp(a, "--tokens") && v) { T = atoi(v); i++; }
        else if (!strcmp(a, "--reps") && v) { reps = atoi(v); i++; }
        else if (!strcmp(a, "--rounds") && v) { rounds = atoi(v); i++; }
        else if (!strcmp(a, "--out") && v) { out = v; i++; }
        else if (!strcmp(a, "--batches") && v) {
            nb = 0;
            for (char *p = (char *)v; *p && nb < 16; p++) {
                batches[nb++] = (int)strtol(p, &p, 10);
                if (!*p) break;
            }
            i++;
        } else {
            fprintf(stderr, "usage: sluice-bench engine (--synthetic SPEC | --model DIR) [--backend cuda|cpu] "
                            "[--batches 1,16,64] [--prompt P] [--tokens T] [--reps N] [--rounds R] [--out FILE]\n"
                            "the engine's decode loop, engine.overlap off and on alternating (R rounds each, N runs a "
                            "batch a round): ms per decode step, medians\n");
            return 2;
        }
    }
    if (!model || P < 1 || T < 3 || reps < 1 || rounds < 1 || nb < 1) {
        fprintf(stderr, "sluice-bench engine: needs --synthetic or --model, --prompt >= 1, --tokens >= 3\n");
        return 2;
    }
    int maxb = 1;
    for (int b = 0; b < nb; b++) {
        if (batches[b] < 1) { fprintf(stderr, "sluice-bench engine: bad batch %d\n", batches[b]); return 2; }
        if (batches[b] > maxb) maxb = batches[b];
    }
    const int runs = rounds * reps;
    double *ms = calloc((size_t)2 * nb * runs, sizeof *ms);
    uint64_t overlapped[2] = {0, 0};
    char gpu_err[512];
    if (!ms) return 1;
    for (int r = 0; r < 2 * rounds; r++) {
        const int on = r % 2;
        sl_engine_opts o;
        memset(&o, 0, sizeof o);
        o.model_path = model;
        o.backend = backend;
        o.max_batch = maxb;
        o.overlap = on ? 1 : -1;
        o.self_check = -1;
        sl_engine *e;
        if (sl_engine_open(&o, &e, gpu_err, sizeof gpu_err)) {
            fprintf(stderr, "sluice-bench engine: %s\n", gpu_err);
            free(ms);
            return 1;
        }
        for (int b = 0; b < nb; b++)   /* warm-up: every batch bucket's graph captured before timing */
            run_once(e, batches[b], P, 4, 99, &overlapped[on]);
        for (int b = 0; b < nb; b++)
            for (int k = 0; k < reps; k++) {
                const double t = run_once(e, batches[b], P, T, (uint64_t)(r * 1000 + b * 10 + k), &overlapped[on]);
                if (t < 0) { sl_engine_close(e); free(ms); return 1; }
                ms[((size_t)on * nb + b) * runs + (r / 2) * reps + k] = t;
            }
        sl_engine_close(e);
    }
    json_t *rows = json_array();
    printf("batch   off ms/step   on ms/step   on/off   tok/s off   tok/s on   (%d runs each, prompt %d, %d tokens)\n",
           runs, P, T);
    for (int b = 0; b < nb; b++) {
        double med[2];
        for (int on = 0; on < 2; on++) {
            double *v = ms + ((size_t)on * nb + b) * runs;
            qsort(v, (size_t)runs, sizeof *v, cmp_d);
            med[on] = runs % 2 ? v[runs / 2] : 0.5 * (v[runs / 2 - 1] + v[runs / 2]);
        }
        printf("%5d %13.3f %12.3f %8.3f %11.0f %10.0f\n", batches[b], med[0], med[1], med[1] / med[0],
               batches[b] * 1e3 / med[0], batches[b] * 1e3 / med[1]);
        json_array_append_new(rows, json_pack("{s:i, s:f, s:f}", "batch", batches[b], "ms_per_step_off", med[0],
                                              "ms_per_step_on", med[1]));
    }
    printf("steps launched behind a running step: %llu with overlap on, %llu off\n",
           (unsigned long long)overlapped[1], (unsigned long long)overlapped[0]);
    if (out) {
        json_t *doc = json_pack("{s:s, s:i, s:i, s:i, s:o}", "model", model, "prompt", P, "tokens", T, "runs", runs,
                                "rows", rows);
        if (json_dump_file(doc, out, JSON_INDENT(1))) fprintf(stderr, "sluice-bench engine: cannot write %s\n", out);
        json_decref(doc);
    } else {
        json_decref(rows);
    }
    free(ms);
    return 0;
}
