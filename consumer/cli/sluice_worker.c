/* sluice-worker — Kafka jobs in, Avro, Redis state, engine, results out. See README.md and worker.h.
 *
 *   sluice-worker [--config FILE] [--set key=value]...
 *
 * Exit status: 0 after a clean drain (SIGTERM/SIGINT), 1 on a fatal start-up error (bad config,
 * unreachable Redis, model that fails to load, Kafka client setup, no broker answering within
 * kafka.startup_timeout_ms) or when the engine fails a step (a GPU fault: the results already produced go out, every
 * unfinished job is handed back for another worker), 2 on bad usage.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "shard.h"
#include "worker.h"

static volatile sig_atomic_t g_stop;
static int g_wake_fd = -1;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
    if (g_wake_fd >= 0) {
        char b = 's';
        if (write(g_wake_fd, &b, 1) < 0) { /* nothing to do in a signal handler */
        }
    }
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "sluice-worker: shutdown did not finish in time (Kafka unreachable?); exiting\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) { /* nothing to do */
    }
    _exit(1);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice-worker [--config FILE] [--set key=value]...\n"
            "Consumes Avro Jobs from Kafka, runs them on the engine, produces Avro Results.\n"
            "The config file has key=value lines ('#' comments); --set overrides it. Keys:\n");
    cfg_print_reference(f);
}

static int fail(const char *msg) {
    fprintf(stderr, "sluice-worker: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    cfg c;
    cfg_init(&c);
    char err[1024];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            cfg_free(&c);
            return 0;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            if (cfg_load_file(&c, argv[++i], err, sizeof(err))) return cfg_free(&c), fail(err);
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (cfg_set_kv(&c, argv[++i], err, sizeof(err))) return cfg_free(&c), fail(err);
        } else {
            fprintf(stderr, "sluice-worker: unknown argument '%s' (try --help)\n", argv[i]);
            cfg_free(&c);
            return 2;
        }
    }
    if (cfg_validate(&c, err, sizeof(err))) return cfg_free(&c), fail(err);

    worker w;
    memset(&w, 0, sizeof(w));
    w.cfg = &c;
    w.wake_rd = w.wake_wr = -1;
    pthread_mutex_init(&w.m.mu, NULL);
    const char *lvl = cfg_get(&c, "log.level");
    w.verbose = !strcmp(lvl, "error") ? L_ERROR : !strcmp(lvl, "warn") ? L_WARN : !strcmp(lvl, "info") ? L_INFO : L_DEBUG;
    snprintf(w.worker_id, sizeof(w.worker_id), "%s", cfg_get(&c, "worker.id"));
    if (!w.worker_id[0] && gethostname(w.worker_id, sizeof(w.worker_id) - 1) != 0) snprintf(w.worker_id, 8, "worker");
    const char *fr = cfg_get(&c, "input.framing");
    w.framing = !strcmp(fr, "confluent") ? FRAMING_CONFLUENT : !strcmp(fr, "bare") ? FRAMING_BARE : FRAMING_AUTO;
    for (const char *p = cfg_get(&c, "input.schema_ids"); *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        w.schema_ids = realloc(w.schema_ids, (size_t)(w.n_schema_ids + 1) * sizeof(int32_t));
        if (!w.schema_ids) return fail("out of memory");
        w.schema_ids[w.n_schema_ids++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    w.max_bytes = cfg_int(&c, "input.max_bytes");
    w.max_inflight = cfg_int(&c, "worker.max_inflight");
    w.max_pending = cfg_int(&c, "worker.max_pending");
    w.max_tokens_limit = (int)cfg_int(&c, "job.max_tokens_limit");
    w.topic_jobs = cfg_get(&c, "topic.jobs");
    w.topic_results = cfg_get(&c, "topic.results");
    w.topic_chunks = cfg_get(&c, "topic.chunks");
    w.topic_dlq = cfg_get(&c, "topic.dlq");
    w.result_schema_id = (int32_t)cfg_int(&c, "output.result_schema_id");
    w.chunk_schema_id = (int32_t)cfg_int(&c, "output.chunk_schema_id");
    offsets_init(&w.offs);

    /* /healthz and /readyz answer while the model loads */
    metrics_server *ms = NULL;
    if (cfg_int(&c, "metrics.port") > 0) {
        ms = metrics_start(&w, cfg_get(&c, "metrics.bind"), (int)cfg_int(&c, "metrics.port"), err, sizeof(err));
        if (!ms) return fail(err);
    }

    /* avro-c: no single allocation may exceed a few times the largest accepted message */
    size_t cap = (size_t)w.max_bytes * 4 + ((size_t)1 << 20);
    codec_install_allocator(cap);
    if (codec_new(&w.codec, err, sizeof(err))) return fail(err);
    const char *reg_url = cfg_get(&c, "schema.registry.url");
    if (reg_url[0] && registry_new(reg_url, (int)cfg_int(&c, "schema.registry.timeout_ms"), &w.registry, err, sizeof(err)))
        return fail(err);

    sl_engine_opts eo = {0};
    eo.model_path = cfg_get(&c, "model.path");
    eo.backend = cfg_get(&c, "engine.backend");
    eo.n_threads = (int)cfg_int(&c, "engine.threads");
    eo.max_batch = (int)cfg_int(&c, "engine.max_batch");
    eo.prefill_chunk = (int)cfg_int(&c, "engine.prefill_chunk");
    eo.max_step_tokens = (int)cfg_int(&c, "engine.max_step_tokens");
    eo.state_bytes = (size_t)cfg_int(&c, "engine.state_mb") << 20;
    eo.self_check = strcmp(cfg_get(&c, "engine.self_check"), "off") ? 0 : -1;
    eo.deterministic = !strcmp(cfg_get(&c, "engine.deterministic"), "on");
    eo.overlap = !strcmp(cfg_get(&c, "engine.overlap"), "on") ? 1 : -1;
    eo.index_fp8 = !strcmp(cfg_get(&c, "engine.index_key_dtype"), "fp8");
    eo.kv_fp8 = !strcmp(cfg_get(&c, "engine.kv_dtype"), "fp8");
    eo.devices = cfg_get(&c, "engine.devices");
    {
        int dv[SL_MAX_RANKS];
        if (sl_parse_devices(eo.devices, dv, err, sizeof(err)) < 0) return fail(err);
    }
    {
        char *end;
        const char *f = cfg_get(&c, "engine.gpu_memory_fraction");
        eo.gpu_memory_fraction = strtod(f, &end);
        if (*end || !(eo.gpu_memory_fraction > 0.05 && eo.gpu_memory_fraction <= 1.0)) {
            snprintf(err, sizeof(err), "engine.gpu_memory_fraction '%s' must be a number in (0.05, 1]", f);
            return fail(err);
        }
    }
    char eerr[512];
    if (sl_engine_open(&eo, &w.engine, eerr, sizeof(eerr))) {
        snprintf(err, sizeof(err), "model %s: %s", eo.model_path, eerr);
        return fail(err);
    }
    w.info = sl_engine_info(w.engine);
    int tcr = textcodec_open(eo.model_path, w.info->vocab_size, w.info->eos_ids, w.info->n_eos, &w.tc, w.tc_err,
                             sizeof(w.tc_err));
    if (tcr < 0) {
        snprintf(err, sizeof(err), "model %s: %s", eo.model_path, w.tc_err);
        return fail(err);
    }
    if (tcr > 0) wlog(&w, L_WARN, "text prompts and stop strings off: %s", w.tc_err);

    if (redis_open(&w.redis, cfg_get(&c, "redis.url"), cfg_get(&c, "redis.user"), cfg_get(&c, "redis.password"),
                   cfg_get(&c, "redis.prefix"), (int)cfg_int(&c, "redis.timeout_ms"),
                   w.worker_id, cfg_int(&c, "lease.ms"), cfg_int(&c, "redis.ttl_s") * 1000, err, sizeof(err)))
        return fail(err);
    redis_set_max_crashes(w.redis, cfg_int(&c, "worker.max_job_crashes"));
    w.on_delivery = wj_on_delivery;   /* the Kafka layer reports to the job layer through these */
    w.on_revoke = wj_revoke;
    if (wk_setup(&w, err, sizeof(err))) return fail(err);
    g_wake_fd = w.wake_wr;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (eng_thread_start(&w.eng, w.engine, w.wake_wr)) return fail("cannot start the engine thread");
    atomic_store(&w.m.model_loaded, 1);
    wlog(&w, L_INFO, "model %s (vocab %d, context %d, %s), jobs from %s, group %s, text %s", w.info->model_id,
         w.info->vocab_size, w.info->max_context, w.info->backend ? w.info->backend : "?", w.topic_jobs,
         cfg_get(&c, "kafka.group.id"), w.tc ? w.tc->name : "off (token ids only)");
    if (w.registry) wlog(&w, L_INFO, "writer schemas of Confluent-framed jobs from the schema registry at %s", reg_url);

    double grace_end = 0, grace_ms = (double)cfg_int(&c, "worker.grace_ms");
    int more = 0, rc = 0;
    for (;;) {
        double now = now_ms();
        atomic_store(&w.m.loop_ms_epoch, (uint64_t)now);
        atomic_store(&w.m.redis_up, redis_connected(w.redis));
        metrics_tick(ms, now);
        if (wk_check_reachable(&w, now) < 0) {   /* kafka.startup_timeout_ms passed: nothing to drain */
            rc = 1;
            break;
        }
        if (g_stop && !w.draining) {
            w.draining = 1;
            atomic_store(&w.m.draining, 1);
            wk_pause_all(&w, 1);
            wj_drop_parked(&w);
            grace_end = now + grace_ms;
            wlog(&w, L_INFO, "draining: %d jobs in progress, grace %.0f ms", wj_live(&w), grace_ms);
        }
        if (w.draining) {
            /* leave time for flush + close inside the grace */
            double margin = grace_ms > 4000 ? 2000 : grace_ms / 2;
            /* a delivered Result waiting for its Redis done write does not hold the drain: with Redis
             * down that write may never come before the grace ends (see below) */
            if (wj_undelivered(&w) == 0 || now >= grace_end - margin) break;
        }
        int busy = w.n_inflight > 0 || w.n_doneq > 0 || rd_kafka_outq_len(w.producer) > 0;
        struct pollfd pfd = {w.wake_rd, POLLIN, 0};
        if (!more && poll(&pfd, 1, busy ? 5 : 50) < 0 && errno != EINTR) return fail("poll failed");
        char drain[256];
        while (read(w.wake_rd, drain, sizeof(drain)) > 0) {
        }
        more = 0;
        /* admission: at the in-flight limit pause the partitions (librdkafka drops what it prefetched
         * and re-fetches from the last returned offset on resume) but keep polling: rebalances are
         * served and max.poll.interval.ms is never exceeded */
        for (int k = 0; k < 4096; k++) {
            if (w.n_inflight >= w.max_inflight && !w.paused && !w.draining) wk_pause_all(&w, 1);
            rd_kafka_message_t *m = rd_kafka_consumer_poll(w.consumer, 0);
            if (!m) break;
            wj_on_message(&w, m);
            rd_kafka_message_destroy(m);
            if (k == 4095) more = 1;
        }
        wj_claim_round(&w, 0);
        wj_send_cmds(&w);
        wj_engine_events(&w);
        char why[160];
        if (eng_thread_fault(w.eng, why, sizeof why)) {   /* its jobs are not at fault: hand them all back */
            wlog(&w, L_ERROR, "engine failed: %s; handing back %d unfinished jobs and stopping", why, wj_live(&w));
            grace_end = now + 1000;   /* time to deliver the results already produced */
            rc = 1;
            break;
        }
        rd_kafka_poll(w.producer, 0);
        wj_flush_done(&w);
        wj_timers(&w);
        wj_send_cmds(&w);
        wk_flush_offsets(&w);
    }

    /* drain end: deliver what is produced, write Redis done, store offsets; hand back the rest */
    double left = grace_end - now_ms();
    rd_kafka_flush(w.producer, left > 1000 ? 1000 : left > 0 ? (int)left : 0);
    rd_kafka_poll(w.producer, 0);
    wj_flush_done(&w);
    int kept = wj_release_delivered(&w);
    if (kept > 0)
        wlog(&w, L_WARN, "%d delivered results are not marked done in Redis (unreachable); their offsets are "
             "stored all the same (the Results are in Kafka)", kept);
    wk_flush_offsets(&w);
    int live = wj_live(&w);
    if (live > 0) wlog(&w, L_WARN, "grace over: handing back %d unfinished jobs", live);
    wj_hand_back_all(&w);
    /* leaving the group needs the coordinator; never hang on it */
    signal(SIGALRM, on_alarm);
    alarm(15);
    wk_close(&w);   /* leaves the group; the revoke callback commits the stored offsets */
    metrics_stop(ms);   /* before the engine thread it reads */
    eng_thread_stop(w.eng);
    wj_profile_print(&w);
    wj_free_all(&w);
    free(w.store_off);
    for (int i = 0; i < w.m.n_lag; i++) free(w.m.lag[i].topic);
    free(w.m.lag);
    pthread_mutex_destroy(&w.m.mu);
    sl_engine_close(w.engine);
    textcodec_close(w.tc);
    redis_close(w.redis);
    registry_free(w.registry);
    codec_free(w.codec);
    offsets_free(&w.offs);
    free(w.schema_ids);
    close(w.wake_rd);
    close(w.wake_wr);
    wlog(&w, L_INFO, "stopped");
    cfg_free(&c);
    return rc;
}
