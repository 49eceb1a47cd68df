/* test_engine.c — the scheduler behind engine.h, on every fixture under tests/data.
 *
 * Per fixture: each prompt alone (greedy, ignore_eos, all_logits) gives the fixture's greedy
 * tokens and rows within 1e-4; all prompts at once with chunked prefill and a small step token
 * budget give bit-identical tokens and rows; a state budget that fits one request forces
 * preemption and still gives identical tokens and rows. Seeded sampling: all prompts sampled
 * concurrently give the same tokens as each alone. Overlap (step N+1 launched before step N is collected) gives the
 * same tokens, logprobs and finishes as without, with requests stopping on a stop id while the next step is in flight;
 * a step that fails while another is launched fails every request with that failure and holds no state.
 */
#include "jobs.h"
#include "../../engine/sampler.h"
#include "../../engine/state.h"
#include "../../engine/weights.h"

#define TOL 1e-4

static int failures = 0;
#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); failures++; } while (0)

static void make_jobs(const fx_fixture *f, job *jobs, sl_sampling s) {
    memset(jobs, 0, sizeof(job) * FX_MAX_PROMPTS);
    for (int k = 0; k < f->n; k++) {
        jobs[k].prompt = f->p[k].seq;
        jobs[k].n_prompt = f->p[k].n_prompt;
        jobs[k].s = s;
    }
}

static void same_as(const char *what, const fx_fixture *f, job *a, job *b, int V) {
    for (int k = 0; k < f->n; k++) {
        if (a[k].n != b[k].n || memcmp(a[k].toks, b[k].toks, (size_t)a[k].n * sizeof(int32_t)) || a[k].why != b[k].why)
            FAIL("%s %s prompt %d: tokens differ from alone", f->name, what, k);
        if (a[k].s.all_logits &&
            (a[k].n_rows != b[k].n_rows || memcmp(a[k].rows, b[k].rows, (size_t)a[k].n_rows * V * sizeof(float))))
            FAIL("%s %s prompt %d: logits rows differ from alone", f->name, what, k);
        if (a[k].s.logprobs && memcmp(a[k].lp, b[k].lp, (size_t)a[k].n * sizeof(float)))
            FAIL("%s %s prompt %d: logprobs differ from alone", f->name, what, k);
    }
}

/* The same mixed requests with overlap off and on: greedy ones that stop on a stop id (their own greedy token halfway,
 * so they stop while the next step is launched), seeded ones with short and long limits, two that wait for a batch
 * slot. Tokens, logprobs and finishes equal; the overlapped run overlaps steps; no state is left. */
static void overlap(const fx_fixture *f, const char *dir) {
    enum { N = 2 * FX_MAX_PROMPTS };
    static job runs[2][N];
    int32_t stop[FX_MAX_PROMPTS];
    int n = 0;
    for (int k = 0; k < f->n && n + 2 <= N; k++) {
        const fx_prompt *p = &f->p[k];
        sl_sampling g = greedy_sampling(p->n_greedy);
        g.logprobs = 1;
        g.ignore_eos = 1;
        if (p->n_greedy >= 4) {
            stop[k] = p->seq[p->n_prompt + p->n_greedy / 2];
            g.stop_ids = &stop[k];
            g.n_stop_ids = 1;
        }
        sl_sampling s = g;
        s.stop_ids = NULL;
        s.n_stop_ids = 0;
        s.temperature = 0.8f;
        s.top_k = 40;
        s.seed = 77 + (uint64_t)k;
        s.max_tokens = 1 + k % 5 * 3;
        const sl_sampling both[2] = {g, s};
        for (int v = 0; v < 2; v++, n++)
            for (int o = 0; o < 2; o++) {
                memset(&runs[o][n], 0, sizeof runs[o][n]);
                runs[o][n].prompt = p->seq;
                runs[o][n].n_prompt = p->n_prompt;
                runs[o][n].s = both[v];
            }
    }
    sl_engine_stats st[2];
    for (int o = 0; o < 2; o++) {
        sl_engine *e = open_engine_overlap(dir, 4, n - 2 > 1 ? n - 2 : 1, 0, 0, NULL, o ? 1 : -1);
        if (!e) { failures++; return; }
        if (run_jobs(e, runs[o], n)) failures++;
        sl_engine_get_stats(e, &st[o]);
        sl_engine_close(e);
        if (st[o].state_bytes_used) FAIL("%s overlap %d: %zu state bytes held at the end", f->name, o, st[o].state_bytes_used);
    }
    int stopped = 0;
    for (int i = 0; i < n; i++) {
        const job *a = &runs[0][i], *b = &runs[1][i];
        if (a->n != b->n || memcmp(a->toks, b->toks, (size_t)a->n * sizeof(int32_t)) || a->why != b->why ||
            memcmp(a->lp, b->lp, (size_t)a->n * sizeof(float)))
            FAIL("%s request %d: overlap changes its tokens (%d vs %d, finish %d vs %d)", f->name, i, a->n, b->n,
                 a->why, b->why);
        stopped += a->why == SL_FINISH_STOP;
    }
    if (st[0].steps_overlapped || !st[1].steps_overlapped)
        FAIL("%s: overlapped steps %llu off, %llu on", f->name, (unsigned long long)st[0].steps_overlapped,
             (unsigned long long)st[1].steps_overlapped);
    if (!stopped) FAIL("%s: no request stopped on its stop id", f->name);
    printf("%s: overlap: %d requests, %d stopped on a stop id, %llu of %llu steps overlapped, tokens equal\n", f->name,
           n, stopped, (unsigned long long)st[1].steps_overlapped, (unsigned long long)st[1].steps);
}

/* A step that fails while the one before it is launched and not collected (SLUICE_FAIL_STEP, read at open; the
 * injected fault stays, as a dead device's would): every request finishes with ERROR naming the injected failure (not
 * a backend left holding the launched step), no state is held, and the engine closes. */
static void fault_with_flight(const fx_fixture *f, const char *dir) {
    setenv("SLUICE_FAIL_STEP", "5", 1);   /* a prefill step, then decode steps 2, 3, 4 launched: 5 fails */
    sl_engine *e = open_engine(dir, 0, 8, 0, 0, NULL);
    unsetenv("SLUICE_FAIL_STEP");
    if (!e) { failures++; return; }
    char err[256];
    sl_sampling g = greedy_sampling(12);
    g.ignore_eos = 1;
    for (int k = 0; k < f->n; k++)
        if (sl_engine_submit(e, f->p[k].seq, f->p[k].n_prompt, &g, (uint64_t)k, NULL, err, sizeof err)) {
            FAIL("%s: submit: %s", f->name, err);
            sl_engine_close(e);
            return;
        }
    int errors = 0, injected = 0, failed_steps = 0;
    for (int guard = 0; sl_engine_active(e) && guard < 100; guard++) {
        failed_steps += sl_engine_step(e) < 0;
        sl_event ev;
        while (sl_engine_poll(e, &ev))
            if (ev.kind == SL_EV_FINISH && ev.reason == SL_FINISH_ERROR) {
                errors++;
                injected += ev.error && strstr(ev.error, "injected") != NULL;
            }
    }
    sl_engine_stats st;
    sl_engine_get_stats(e, &st);
    if (errors != f->n || injected != f->n || failed_steps != 1 || st.state_bytes_used || !st.steps_overlapped ||
        sl_engine_active(e))
        FAIL("%s: a step failed behind a launched one: %d of %d requests failed (%d naming the injected fault) in %d "
             "failed steps, %zu state bytes held, %llu steps overlapped before it", f->name, errors, f->n, injected,
             failed_steps, st.state_bytes_used, (unsigned long long)st.steps_overlapped);
    else
        printf("%s: a step failed behind a launched one: %d requests failed with the injected fault, no state held\n",
               f->name, errors);
    sl_engine_close(e);
}

static void test_fixture(const char *dir, const char *name) {
    fx_fixture f;
    if (fx_load(dir, name, &f)) { FAIL("%s: cannot read oracle", name); return; }
    int V = f.vocab, maxgen = 0, maxlen = 0;
    for (int k = 0; k < f.n; k++) {
        if (f.p[k].n_greedy > maxgen) maxgen = f.p[k].n_greedy;
        if (f.p[k].n_prompt + f.p[k].n_greedy > maxlen) maxlen = f.p[k].n_prompt + f.p[k].n_greedy;
    }
    job alone[FX_MAX_PROMPTS], all[FX_MAX_PROMPTS];

    /* 1. each prompt alone, whole prefill */
    sl_engine *e = open_engine(dir, 0, 0, 0, 0, NULL);
    if (!e) { failures++; fx_free(&f); return; }
    sl_sampling g = greedy_sampling(maxgen);
    g.ignore_eos = 1;
    g.all_logits = 1;
    g.logprobs = 1;
    make_jobs(&f, alone, g);
    double md = 0.0;
    for (int k = 0; k < f.n; k++) {
        alone[k].s.max_tokens = f.p[k].n_greedy;
        if (run_jobs(e, &alone[k], 1)) { failures++; continue; }
        const fx_prompt *p = &f.p[k];
        if (alone[k].n != p->n_greedy || memcmp(alone[k].toks, p->seq + p->n_prompt, (size_t)p->n_greedy * 4))
            FAIL("%s prompt %d: engine greedy tokens differ from the fixture", name, k);
        if (alone[k].n_rows != p->rows) FAIL("%s prompt %d: %d logits rows, want %d", name, k, alone[k].n_rows, p->rows);
        double d = fx_maxdiff(alone[k].rows, p->logits, (alone[k].n_rows < p->rows ? alone[k].n_rows : p->rows) * V);
        if (!(d <= md)) md = d;
        if (alone[k].why != SL_FINISH_LENGTH) FAIL("%s prompt %d: finish %d, want LENGTH", name, k, alone[k].why);
    }
    if (!(md <= TOL)) FAIL("%s: engine rows max abs diff %.3g", name, md);
    printf("%s: engine greedy max abs diff %.3g\n", name, md);
    sl_engine_close(e);

    /* 2. all at once: chunked prefill (3), step budget 7 tokens, batch 8 */
    if ((e = open_engine(dir, 3, 8, 7, 0, NULL))) {
        make_jobs(&f, all, g);
        for (int k = 0; k < f.n; k++) all[k].s.max_tokens = f.p[k].n_greedy;
        if (run_jobs(e, all, f.n)) failures++;
        else same_as("concurrent chunk 3", &f, all, alone, V);
        free_jobs(all, f.n);
        sl_engine_close(e);
    } else failures++;

    /* 3. preemption: room for the longest request and a little more */
    {
        v4_weights w;
        v4_state_pool pool;
        char err[256];
        size_t budget = 0;
        if (!v4_weights_load(dir, &w, err, sizeof err)) {
            if (!v4_pool_init(&pool, &w.cfg, 1, err, sizeof err))
                budget = v4_pool_bytes_for(&pool, maxlen) + pool.fixed_floats * sizeof(float) +
                         pool.page_floats * sizeof(float);
            v4_pool_free(&pool);
            v4_weights_free(&w);
        }
        if (!budget) { FAIL("%s: cannot size the state pool", name); goto sampling; }
        if ((e = open_engine(dir, 4, 8, 0, budget, NULL))) {
            make_jobs(&f, all, g);
            for (int k = 0; k < f.n; k++) all[k].s.max_tokens = f.p[k].n_greedy;
            if (run_jobs(e, all, f.n)) failures++;
            else same_as("preempted", &f, all, alone, V);
            sl_engine_stats st;
            sl_engine_get_stats(e, &st);
            printf("%s: tiny state (%zu bytes): %llu preemptions, %llu tokens fed for %llu generated\n", name, budget,
                   (unsigned long long)st.preemptions, (unsigned long long)st.tokens_fed,
                   (unsigned long long)st.tokens_generated);
            /* whether the budget forces preemption depends on the prompt lengths; it does here */
            if (!strcmp(name, "tiny-v4-public") && st.preemptions == 0)
                FAIL("%s: expected preemptions with a tiny state budget", name);
            if (st.state_bytes_used != 0) FAIL("%s: %zu state bytes still held after all finished", name, st.state_bytes_used);
            free_jobs(all, f.n);
            sl_engine_close(e);
        } else failures++;
    }

sampling:
    /* 4. seeded sampling: concurrent == alone */
    if ((e = open_engine(dir, 5, 8, 0, 0, NULL))) {
        sl_sampling s = greedy_sampling(maxgen);
        s.temperature = 0.9f;
        s.top_p = 0.95f;
        s.top_k = 50;
        s.ignore_eos = 1;
        s.logprobs = 1;
        free_jobs(alone, f.n);
        make_jobs(&f, alone, s);
        for (int k = 0; k < f.n; k++) {
            alone[k].s.seed = 1000 + (uint64_t)k;
            if (run_jobs(e, &alone[k], 1)) failures++;
        }
        make_jobs(&f, all, s);
        for (int k = 0; k < f.n; k++) all[k].s.seed = 1000 + (uint64_t)k;
        if (run_jobs(e, all, f.n)) failures++;
        else same_as("sampled concurrent", &f, all, alone, V);
        sl_engine_close(e);
    } else failures++;
    free_jobs(alone, f.n);
    overlap(&f, dir);
    fault_with_flight(&f, dir);
    fx_free(&f);
}

/* Scheduler stress on the public fixture: random prompts, lengths, chunk sizes, step budgets, a
 * small state pool and random cancellations. Every request gets exactly one FINISH, after all its
 * tokens; uncancelled greedy requests give the tokens they give alone; all state is returned. */
static void stress(const char *dir) {
    enum { NR = 24 };
    static int32_t prompts[NR][48];
    int np[NR], mt[NR], seen_fin[NR], ntok[NR], cancelled[NR];
    int32_t toks[NR][32];
    uint64_t ids[NR];
    sl_rng r = {12345};
    for (int i = 0; i < NR; i++) {
        np[i] = 1 + (int)(sl_rng_next(&r) % 40);
        mt[i] = 1 + (int)(sl_rng_next(&r) % 24);
        for (int k = 0; k < np[i]; k++) prompts[i][k] = (int32_t)(sl_rng_next(&r) % 256);
    }
    /* alone */
    int32_t want[NR][32];
    sl_engine *e = open_engine(dir, 0, 0, 0, 0, NULL);
    if (!e) { failures++; return; }
    for (int i = 0; i < NR; i++) {
        job j;
        memset(&j, 0, sizeof j);
        j.prompt = prompts[i];
        j.n_prompt = np[i];
        j.s = greedy_sampling(mt[i]);
        j.s.ignore_eos = 1;
        if (run_jobs(e, &j, 1) || j.n != mt[i]) { FAIL("stress: alone run %d failed", i); sl_engine_close(e); return; }
        memcpy(want[i], j.toks, (size_t)j.n * sizeof(int32_t));
    }
    /* state budgets that admit two or three requests and then run out of pages as they grow */
    v4_state_pool probe;
    char err[256];
    size_t fixed = 0, page = 0;
    v4_weights w;
    if (!v4_weights_load(dir, &w, err, sizeof err)) {
        if (!v4_pool_init(&probe, &w.cfg, 1, err, sizeof err)) {
            fixed = probe.fixed_floats * sizeof(float);
            page = probe.page_floats * sizeof(float);
            v4_pool_free(&probe);
        }
        v4_weights_free(&w);
    }
    sl_engine_close(e);
    if (!fixed) { FAIL("stress: cannot size the pool"); return; }
    const size_t budgets[3] = {2 * fixed + 3 * page, 2 * fixed + 4 * page, 3 * fixed + 5 * page};
    uint64_t preempted = 0, overlapped = 0;
    for (int round = 0; round < 3; round++) {
        int chunk = 1 + (int)(sl_rng_next(&r) % 9), budget = 1 + (int)(sl_rng_next(&r) % 40);
        size_t bytes = budgets[round];
        if (!(e = open_engine(dir, chunk, 2 + (int)(sl_rng_next(&r) % 6), budget, bytes, NULL))) { failures++; return; }
        memset(seen_fin, 0, sizeof seen_fin);
        memset(ntok, 0, sizeof ntok);
        memset(cancelled, 0, sizeof cancelled);
        int submitted = 0, done = 0;
        for (int step = 0; done < NR && step < 20000; step++) {
            if (submitted < NR && sl_rng_next(&r) % 3 == 0) {
                sl_sampling s = greedy_sampling(mt[submitted]);
                s.ignore_eos = 1;
                if (sl_engine_submit(e, prompts[submitted], np[submitted], &s, (uint64_t)submitted, &ids[submitted], err, sizeof err))
                    { FAIL("stress submit: %s", err); break; }
                submitted++;
            }
            if (submitted > 0 && sl_rng_next(&r) % 17 == 0) {
                int v = (int)(sl_rng_next(&r) % (uint64_t)submitted);
                if (!seen_fin[v]) cancelled[v] = 1;
                sl_engine_finish(e, ids[v], SL_FINISH_CANCELLED);
            }
            if (sl_engine_step(e) < 0) { FAIL("stress: step failed"); break; }
            sl_event ev;
            while (sl_engine_poll(e, &ev)) {
                int i = (int)ev.tag;
                if (seen_fin[i]) FAIL("stress: event after FINISH for %d", i);
                if (ev.kind == SL_EV_TOKEN && ntok[i] < 32) toks[i][ntok[i]++] = ev.token;
                if (ev.kind == SL_EV_FINISH) {
                    seen_fin[i] = 1;
                    done++;
                    if (ev.n_generated != ntok[i]) FAIL("stress: %d generated %d, %d TOKEN events", i, ev.n_generated, ntok[i]);
                    if (!cancelled[i] && (ev.reason != SL_FINISH_LENGTH || ntok[i] != mt[i]))
                        FAIL("stress: %d finished %d with %d tokens, want LENGTH %d", i, ev.reason, ntok[i], mt[i]);
                    if (memcmp(toks[i], want[i], (size_t)ntok[i] * sizeof(int32_t)))
                        FAIL("stress round %d: request %d tokens differ from alone", round, i);
                }
            }
            if (submitted == NR && done < NR && sl_engine_active(e) == 0) FAIL("stress: requests lost");
        }
        sl_engine_stats st;
        sl_engine_get_stats(e, &st);
        if (done != NR || st.state_bytes_used != 0 || sl_engine_active(e))
            FAIL("stress round %d: %d/%d finished, %zu state bytes held", round, done, NR, st.state_bytes_used);
        printf("stress round %d (chunk %d, step budget %d, state %zu B): %llu steps (%llu overlapped), %llu preemptions\n",
               round, chunk, budget, bytes, (unsigned long long)st.steps, (unsigned long long)st.steps_overlapped,
               (unsigned long long)st.preemptions);
        overlapped += st.steps_overlapped;
        preempted += st.preemptions;
        sl_engine_close(e);
    }
    if (!preempted) FAIL("stress: no preemption happened");
    if (!overlapped) FAIL("stress: no step overlapped another (cancels of launched requests untested)");
}

int main(int argc, char **argv) {
    char names[FX_MAX][256];
    int nf = fx_list(SLUICE_TEST_DATA, names, FX_MAX), tested = 0;
    for (int i = 0; i < nf; i++) {
        if (!fx_selected(SLUICE_TEST_DATA, names[i], argc > 1 ? argv[1] : NULL)) continue;
        char dir[1400];
        if (snprintf(dir, sizeof dir, "%s/%s", SLUICE_TEST_DATA, names[i]) >= (int)sizeof dir) continue;
        test_fixture(dir, names[i]);
        tested++;
    }
    if (!tested && !(argc > 1 && !strcmp(argv[1], "slow"))) { fprintf(stderr, "no fixtures\n"); return 1; }
    if (argc > 1 && !strcmp(argv[1], "fast")) stress(SLUICE_TEST_DATA "/tiny-v4-public");
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
