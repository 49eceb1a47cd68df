/* test_sampling.c — sampler against hand-computed distributions, and the engine's generation
 * semantics on the public fixture: seeds, top_k=1 / temperature->0 == greedy, stop ids, eos
 * (included, then STOP) and ignore_eos, max_tokens, repetition penalty against the fixture rows,
 * submit validation, cancellation, open errors.
 */
#include <unistd.h>

#include "../../engine/sampler.h"
#include "jobs.h"

static int failures = 0;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)
#define NEAR(a, b, t) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= (t))) { \
    fprintf(stderr, "%s:%d: %s = %.9g, want %.9g\n", __FILE__, __LINE__, #a, a_, b_); failures++; } } while (0)

static sl_sampling samp(float t, int k, float p, float minp, float rep) {
    sl_sampling s = greedy_sampling(1);
    s.temperature = t; s.top_k = k; s.top_p = p; s.min_p = minp; s.repetition_penalty = rep;
    return s;
}

/* expected distribution: softmax(l/T) restricted to `keep` (mask), renormalised */
static void expect(const float *l, int V, double T, const int *keep, double *out) {
    double z = 0.0;
    for (int i = 0; i < V; i++) { out[i] = keep[i] ? exp(l[i] / T) : 0.0; z += out[i]; }
    for (int i = 0; i < V; i++) out[i] /= z;
}

static void check_dist(sl_sampler *w, const sl_sampling *s, const float *l, const int32_t *hist, int nh,
                       const double *want) {
    CHECK(sl_sampler_dist(w, s, l, hist, nh) == -1);
    for (int i = 0; i < w->V; i++) NEAR(w->p[i], want[i], 1e-6);
}

static void sampler_unit(void) {
    const float l[5] = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f};   /* p = .0844 .2295 .6236 .0512 .0114 */
    sl_sampler w;
    CHECK(sl_sampler_init(&w, 5) == 0);
    double want[5];
    int all[5] = {1, 1, 1, 1, 1};

    sl_sampling s = samp(1, 0, 1, 0, 1);
    expect(l, 5, 1, all, want);
    check_dist(&w, &s, l, NULL, 0, want);
    NEAR(want[2], 0.6235909, 1e-6);

    s = samp(0.5f, 0, 1, 0, 1);                      /* temperature */
    expect(l, 5, 0.5, all, want);
    check_dist(&w, &s, l, NULL, 0, want);

    int k2[5] = {0, 1, 1, 0, 0};                        /* top_k 2 */
    s = samp(1, 2, 1, 0, 1);
    expect(l, 5, 1, k2, want);
    check_dist(&w, &s, l, NULL, 0, want);
    s = samp(1, 0, 0.7f, 0, 1);                         /* top_p .7: .6236 < .7 <= .853 */
    check_dist(&w, &s, l, NULL, 0, want);
    int k1[5] = {0, 0, 1, 0, 0};
    s = samp(1, 0, 0.6f, 0, 1);                         /* top_p .6: the top token alone */
    expect(l, 5, 1, k1, want);
    check_dist(&w, &s, l, NULL, 0, want);
    int k3[5] = {1, 1, 1, 0, 0};
    s = samp(1, 0, 1, 0.1f, 1);                         /* min_p .1: p >= .0624 */
    expect(l, 5, 1, k3, want);
    check_dist(&w, &s, l, NULL, 0, want);
    s = samp(1, 4, 0.9f, 0, 1);                         /* top_k 4 then top_p .9 of {.6236,.2294,.0844,.0512}/.9886 */
    expect(l, 5, 1, k3, want);
    check_dist(&w, &s, l, NULL, 0, want);

    /* repetition penalty 2 over history {0, 4, 0}: 1 -> .5, -1 -> -2 */
    const int32_t hist[3] = {0, 4, 0};
    const float lp[5] = {0.5f, 2.0f, 3.0f, 0.5f, -2.0f};
    s = samp(1, 0, 1, 0, 2.0f);
    expect(lp, 5, 1, all, want);
    check_dist(&w, &s, l, hist, 3, want);
    const float l2[5] = {3.0f, 2.0f, 0, 0, 0};          /* penalty flips the argmax: 3/2 < 2 */
    s = samp(0, 0, 1, 0, 2.0f);
    CHECK(sl_sampler_dist(&w, &s, l2, hist, 1) == 1);
    s = samp(0, 0, 1, 0, 1);
    CHECK(sl_sampler_dist(&w, &s, l2, hist, 1) == 0);
    const float tie[5] = {1, 3, 3, 0, 0};               /* greedy ties -> lower id */
    CHECK(sl_sampler_dist(&w, &s, tie, NULL, 0) == 1);
    s = samp(1, 1, 1, 0, 1);                            /* top_k 1 is greedy */
    CHECK(sl_sampler_dist(&w, &s, l, NULL, 0) == 2);

    /* logprob = log-softmax(z) of the chosen token (T=1 for greedy, before truncation) */
    sl_rng r;
    sl_rng_seed(&r, 7);
    float lpv;
    s = samp(0, 0, 1, 0, 1);
    CHECK(sl_sample(&w, &s, l, NULL, 0, &r, &lpv) == 2);
    NEAR(lpv, log(0.6235909), 1e-5);
    s = samp(0.5f, 0, 1, 0, 1);
    int32_t t = sl_sample(&w, &s, l, NULL, 0, &r, &lpv);
    expect(l, 5, 0.5, all, want);
    NEAR(lpv, log(want[t]), 1e-5);

    /* draws follow the distribution; same seed = same draws, other seeds differ */
    s = samp(1, 0, 1, 0, 1);
    expect(l, 5, 1, all, want);
    int cnt[5] = {0};
    sl_rng_seed(&r, 12345);
    const int N = 40000;
    for (int i = 0; i < N; i++) cnt[sl_sample(&w, &s, l, NULL, 0, &r, NULL)]++;
    for (int i = 0; i < 5; i++) NEAR((double)cnt[i] / N, want[i], 0.01);
    sl_rng a, b, c;
    sl_rng_seed(&a, 99); sl_rng_seed(&b, 99); sl_rng_seed(&c, 100);
    int same = 1, diff = 0;
    for (int i = 0; i < 64; i++) {
        int x = sl_sample(&w, &s, l, NULL, 0, &a, NULL), y = sl_sample(&w, &s, l, NULL, 0, &b, NULL);
        int z = sl_sample(&w, &s, l, NULL, 0, &c, NULL);
        same &= x == y;
        diff |= x != z;
    }
    CHECK(same && diff);
    for (int i = 0; i < 1000; i++) { double u = sl_rng_uniform(&a); CHECK(u >= 0.0 && u < 1.0); if (!(u >= 0 && u < 1)) break; }

    /* validation */
    char err[128];
    sl_sampling bad = samp(-1, 0, 1, 0, 1);
    CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, -1, 1, 0, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 0, 0, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 1.5f, 0, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 1, 2, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 1, 0, 0); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(NAN, 0, 1, 0, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 1, 0, 1); bad.max_tokens = 0; CHECK(sl_sampling_check(&bad, err, sizeof err) == -1);
    bad = samp(1, 0, 1, 0, 1); CHECK(sl_sampling_check(&bad, err, sizeof err) == 0);
    sl_sampler_free(&w);
}

/* brute force: full sort (p desc, ties -> lower id), top_k, top_p, min_p, renormalise */
static const double *g_p;
static int cmp_ref(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_p[i] != g_p[j]) return g_p[i] > g_p[j] ? -1 : 1;
    return i - j;
}

static void brute(const float *l, int V, const sl_sampling *s, double *out) {
    double *p = malloc((size_t)V * sizeof *p), mx = -INFINITY, z = 0.0;
    int *idx = malloc((size_t)V * sizeof *idx);
    for (int i = 0; i < V; i++) if (l[i] / s->temperature > mx) mx = l[i] / s->temperature;
    for (int i = 0; i < V; i++) { p[i] = exp(l[i] / s->temperature - mx); z += p[i]; }
    for (int i = 0; i < V; i++) { p[i] /= z; idx[i] = i; }
    g_p = p;
    qsort(idx, (size_t)V, sizeof *idx, cmp_ref);
    int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double tot = 0.0, cum = 0.0;
    for (int k = 0; k < n; k++) tot += p[idx[k]];
    for (int k = 0; k < n && s->top_p < 1.0f; k++) {
        cum += p[idx[k]];
        if (cum >= s->top_p * tot) { n = k + 1; break; }
    }
    int m = 1;
    while (m < n && p[idx[m]] >= s->min_p * p[idx[0]]) m++;
    n = m;
    tot = 0.0;
    for (int k = 0; k < n; k++) tot += p[idx[k]];
    for (int i = 0; i < V; i++) out[i] = 0.0;
    for (int k = 0; k < n; k++) out[idx[k]] = p[idx[k]] / tot;
    free(p);
    free(idx);
}

/* the partial-sort sampler equals the brute-force definition on random logits with ties */
static void sampler_vs_brute(void) {
    const int V = 3000;
    float *l = malloc(V * sizeof *l);
    double *want = malloc(V * sizeof *want);
    sl_sampler w;
    CHECK(sl_sampler_init(&w, V) == 0);
    sl_rng r;
    sl_rng_seed(&r, 77);
    const float T[] = {0.3f, 1.0f, 2.5f};
    const int K[] = {0, 1, 5, 40, 2999};
    const float P[] = {1.0f, 0.93f, 0.53f, 0.999f};   /* no exact cumulative ties at the cut */
    const float M[] = {0.0f, 0.05f, 0.3f};
    int cases = 0;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < V; i++) l[i] = (float)(floor(sl_rng_uniform(&r) * 40.0) / 4.0);   /* many ties */
        for (int a = 0; a < 3; a++) for (int b = 0; b < 5; b++) for (int c = 0; c < 4; c++) for (int d = 0; d < 3; d++) {
            sl_sampling s = samp(T[a], K[b], P[c], M[d], 1);
            brute(l, V, &s, want);
            CHECK(sl_sampler_dist(&w, &s, l, NULL, 0) == (K[b] == 1 ? fx_argmax(l, V) : -1));
            if (K[b] == 1) continue;
            double md = 0.0;
            for (int i = 0; i < V; i++) md = fmax(md, fabs(w.p[i] - want[i]));
            if (md > 1e-6) { fprintf(stderr, "T %g k %d p %g min_p %g: max diff %g\n", T[a], K[b], P[c], M[d], md); failures++; }
            cases++;
        }
        sl_sampling s = samp(1.0f, 0, 0.9f, 0, 1);            /* top_k 0 with top_p: threshold path */
        brute(l, V, &s, want);
        sl_sampler_dist(&w, &s, l, NULL, 0);
        for (int i = 0; i < V; i++) NEAR(w.p[i], want[i], 1e-6);
    }
    CHECK(cases > 100);
    sl_sampler_free(&w);
    free(l);
    free(want);
}

/* ------------------------------------------------------------------------------ engine */
static job one(const fx_prompt *p, sl_sampling s) {
    job j;
    memset(&j, 0, sizeof j);
    j.prompt = p->seq;
    j.n_prompt = p->n_prompt;
    j.s = s;
    return j;
}

static int toks_eq(const job *j, const int32_t *t, int n) { return j->n == n && !memcmp(j->toks, t, (size_t)n * 4); }

/* copy of the fixture with eos_token_id = eos (config rewritten, safetensors linked) */
static int eos_copy(const char *src, int eos, char *dst, size_t dstlen) {
    snprintf(dst, dstlen, "/tmp/sluice-eos-XXXXXX");
    if (!mkdtemp(dst)) return -1;
    char a[1500], b[1500];
    snprintf(a, sizeof a, "%s/config.json", src);
    json_t *c = json_load_file(a, 0, NULL);
    if (!c) return -1;
    json_object_set_new(c, "eos_token_id", json_integer(eos));
    snprintf(b, sizeof b, "%s/config.json", dst);
    int rc = json_dump_file(c, b, 0);
    json_decref(c);
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    return rc || symlink(a, b) ? -1 : 0;
}

static void rm_copy(const char *dst) {
    char p[1500];
    snprintf(p, sizeof p, "%s/config.json", dst); unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dst); unlink(p);
    rmdir(dst);
}

static void engine_semantics(const char *dir) {
    fx_fixture f;
    if (fx_load(dir, "tiny-v4-public", &f)) { fprintf(stderr, "no public fixture\n"); failures++; return; }
    const fx_prompt *p = &f.p[0];
    const int32_t *gr = p->seq + p->n_prompt;
    int ng = p->n_greedy, V = f.vocab;
    sl_engine *e = open_engine(dir, 0, 0, 0, 0, NULL);
    if (!e) { failures++; fx_free(&f); return; }
    job j, k;

    sl_sampling s = greedy_sampling(ng);
    s.ignore_eos = 1;
    s.temperature = 1.0f;
    s.seed = 5;
    j = one(p, s); k = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && !run_jobs(e, &k, 1));
    CHECK(toks_eq(&j, k.toks, k.n));                            /* same seed -> same tokens */
    k.s.seed = 6;
    CHECK(!run_jobs(e, &k, 1));
    CHECK(j.n == k.n && memcmp(j.toks, k.toks, (size_t)j.n * 4));  /* another seed -> others */

    s.top_k = 1;                                                 /* top_k 1 == greedy */
    j = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, ng));
    s.top_k = 0;
    s.temperature = 1e-6f;                                       /* temperature -> 0 == greedy */
    j = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, ng));

    s = greedy_sampling(5);                                      /* max_tokens */
    s.ignore_eos = 1;
    j = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, 5) && j.why == SL_FINISH_LENGTH);

    int32_t stop[2] = {9999 % V, gr[4]};                         /* stop ids: first hit ends it */
    int first = 0;
    while (gr[first] != gr[4]) first++;
    s = greedy_sampling(ng);
    s.ignore_eos = 1;
    s.stop_ids = stop;
    s.n_stop_ids = 2;
    j = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, first + 1) && j.why == SL_FINISH_STOP);

    /* repetition penalty 1.5, greedy: each token = argmax of the penalised fixture row, as long
     * as the sequence still follows the fixture (the first differing token is checked too) */
    s = greedy_sampling(ng);
    s.ignore_eos = 1;
    s.repetition_penalty = 1.5f;
    j = one(p, s);
    CHECK(!run_jobs(e, &j, 1) && j.n == ng);
    sl_sampler w;
    CHECK(!sl_sampler_init(&w, V));
    int checked = 0;
    for (int t = 0; t < ng; t++) {
        int want = sl_sampler_dist(&w, &s, p->logits + (size_t)(p->n_prompt - 1 + t) * V, p->seq, p->n_prompt + t);
        CHECK(j.toks[t] == want);
        checked++;
        if (j.toks[t] != gr[t]) break;
    }
    printf("repetition penalty: %d tokens checked against penalised fixture rows%s\n", checked,
           checked < ng ? " (then the sequence leaves the fixture)" : "");
    sl_sampler_free(&w);

    /* submit validation */
    char err[256];
    uint64_t id;
    s = greedy_sampling(4);
    int32_t badtok[2] = {1, V};
    CHECK(sl_engine_submit(e, p->seq, 0, &s, 0, &id, err, sizeof err) == -1);
    CHECK(sl_engine_submit(e, badtok, 2, &s, 0, &id, err, sizeof err) == -1);
    s.max_tokens = 0;
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 0, &id, err, sizeof err) == -1);
    s = greedy_sampling(sl_engine_info(e)->max_context);
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 0, &id, err, sizeof err) == -1);
    s = greedy_sampling(4);
    s.top_p = 0.0f;
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 0, &id, err, sizeof err) == -1);
    s = greedy_sampling(4);
    stop[0] = -3;
    s.stop_ids = stop;
    s.n_stop_ids = 1;
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 0, &id, err, sizeof err) == -1);
    CHECK(sl_engine_active(e) == 0);

    /* cancel a queued request and a running one */
    s = greedy_sampling(20);
    uint64_t id2;
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 7, &id, err, sizeof err) == 0);
    CHECK(sl_engine_submit(e, p->seq, 3, &s, 8, &id2, err, sizeof err) == 0);
    sl_engine_finish(e, id, SL_FINISH_CANCELLED);
    CHECK(sl_engine_step(e) == 1);
    sl_engine_finish(e, id2, SL_FINISH_EXPIRED);
    sl_engine_finish(e, 424242, SL_FINISH_CANCELLED);
    sl_event ev;
    int got_c = 0, got_x = 0;
    while (sl_engine_poll(e, &ev))
        if (ev.kind == SL_EV_FINISH) {
            got_c += ev.req == id && ev.tag == 7 && ev.reason == SL_FINISH_CANCELLED && ev.n_generated == 0;
            got_x += ev.req == id2 && ev.reason == SL_FINISH_EXPIRED && ev.n_generated == 1;
        }
    CHECK(got_c == 1 && got_x == 1 && sl_engine_active(e) == 0);
    sl_engine_close(e);

    /* eos: a copy whose eos is the 7th greedy token; emitted, included, then STOP */
    char cp[64];
    int eos = gr[6], at = 0;
    while (gr[at] != eos) at++;
    if (eos_copy(dir, eos, cp, sizeof cp) == 0 && (e = open_engine(cp, 0, 0, 0, 0, NULL))) {
        CHECK(sl_engine_info(e)->n_eos == 1 && sl_engine_info(e)->eos_ids[0] == eos);
        s = greedy_sampling(ng);
        j = one(p, s);
        CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, at + 1) && j.why == SL_FINISH_STOP);
        s.ignore_eos = 1;
        j = one(p, s);
        CHECK(!run_jobs(e, &j, 1) && toks_eq(&j, gr, ng) && j.why == SL_FINISH_LENGTH);
        sl_engine_close(e);
    } else {
        fprintf(stderr, "eos copy failed\n");
        failures++;
    }
    rm_copy(cp);

    /* open errors */
    sl_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = dir;
    o.backend = "tpu";
    CHECK(sl_engine_open(&o, &e, err, sizeof err) == -1 && strstr(err, "tpu"));
#ifndef SLUICE_HAVE_CUDA_BACKEND
    o.backend = "cuda";
    CHECK(sl_engine_open(&o, &e, err, sizeof err) == -1 && strstr(err, "cuda"));
#endif
    o.backend = "cpu";
    o.model_path = "/nonexistent/model";
    CHECK(sl_engine_open(&o, &e, err, sizeof err) == -1 && err[0]);
    o.model_path = dir;
    o.quantize_experts = "int3";
    CHECK(sl_engine_open(&o, &e, err, sizeof err) == -1 && strstr(err, "int3"));
    fx_free(&f);
}

int main(void) {
    sampler_unit();
    sampler_vs_brute();
    engine_semantics(SLUICE_TEST_DATA "/tiny-v4-public");
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
