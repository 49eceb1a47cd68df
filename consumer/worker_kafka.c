/* worker_kafka.c — librdkafka side of the worker: consumer + idempotent producer, cooperative-sticky
 * rebalancing with incremental assign/unassign, DLQ and result/chunk production, pause/resume, offset
 * store. The lower layer: it never calls worker_jobs.c; delivery reports and revocations go to the
 * hooks w->on_delivery and w->on_revoke (worker.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "worker.h"

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void wlog(worker *w, int level, const char *fmt, ...) {
    if (level > w->verbose) return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    int64_t t = wall_ms();
    fprintf(stderr, "%02d:%02d:%02d.%03d sluice-worker[%s] %s: %s\n", (int)(t / 3600000 % 24), (int)(t / 60000 % 60),
            (int)(t / 1000 % 60), (int)(t % 1000), w->worker_id, names[level], buf);
}

// ---------------------------------------------------------------- callbacks

/* Broker connection failures are not printed as librdkafka words them (several lines a minute per
 * client while no broker answers): error_cb keeps the reason and wk_check_reachable says it once. */
static int connection_error(rd_kafka_resp_err_t e) {
    return e == RD_KAFKA_RESP_ERR__TRANSPORT || e == RD_KAFKA_RESP_ERR__RESOLVE ||
           e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || e == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
           e == RD_KAFKA_RESP_ERR__SSL;
}

/* librdkafka's own threads call this */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    worker *w = rd_kafka_opaque(rk);
    /* kafka.* keys go to both clients; each warns about the other's properties: not news */
    if (strcmp(fac, "CONFWARN") == 0) return;
    /* connection failures while no broker is reachable: the worker's own line says it (see above) */
    if ((strcmp(fac, "FAIL") == 0 || strcmp(fac, "ERROR") == 0) && w && !atomic_load(&w->m.kafka_up)) return;
    if (level <= 4) fprintf(stderr, "sluice-worker: librdkafka %s: %s\n", fac, buf);
}

/* On the consumer thread (inside rd_kafka_consumer_poll / rd_kafka_poll). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    worker *w = opaque;
    rd_kafka_resp_err_t e = (rd_kafka_resp_err_t)err;
    if (connection_error(e)) {
        /* "N/N brokers are down" says less than the connect failure before it: kept only as a fallback */
        pthread_mutex_lock(&w->m.mu);
        if (e != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || !w->m.kafka_reason[0]) {
            /* without librdkafka's " (after 0ms in state CONNECT, 1 identical error(s) suppressed)" */
            const char *tail = strstr(reason, " (after ");
            int n = tail ? (int)(tail - reason) : (int)strlen(reason);
            snprintf(w->m.kafka_reason, sizeof(w->m.kafka_reason), "%.*s", n, reason);
        }
        pthread_mutex_unlock(&w->m.mu);
        if (e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && atomic_load(&w->m.kafka_up)) {
            atomic_store(&w->m.kafka_up, 0);
            w->kafka_down_since = now_ms();
        }
        if (atomic_load(&w->m.kafka_up)) wlog(w, L_WARN, "kafka: %s", reason);
        return;
    }
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_fatal_error(rk, why, sizeof(why));
        wlog(w, L_ERROR, "kafka fatal error: %s", why);
        return;
    }
    wlog(w, L_WARN, "kafka: %s: %s", rd_kafka_err2name(e), reason);
}

/* The consumer's statistics (statistics.interval.ms), on the consumer thread: broker reachability,
 * the group's join state and each partition's consumer lag. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    worker *w = opaque;
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) {
        wlog(w, L_DEBUG, "librdkafka statistics: %s", je.text);
        return 0;
    }
    int up = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(root, "brokers"), k, v) {
        /* bootstrap ("configured") and metadata ("learned") brokers; not the internal/logical ones */
        const char *src = json_string_value(json_object_get(v, "source"));
        const char *st = json_string_value(json_object_get(v, "state"));
        if (st && !strcmp(st, "UP") && src && (!strcmp(src, "learned") || !strcmp(src, "configured"))) up = 1;
    }
    const char *js = json_string_value(json_object_get(json_object_get(root, "cgrp"), "join_state"));
    atomic_store(&w->m.group_joined, js && !strcmp(js, "steady"));
    double now = now_ms();
    if (up && !atomic_load(&w->m.kafka_up)) {
        if (w->next_unreachable_log > 0)
            wlog(w, L_INFO, "Kafka brokers %s reachable again after %.0f s", cfg_get(w->cfg, "kafka.bootstrap.servers"),
                 (now - w->kafka_down_since) / 1000);
        w->kafka_down_since = 0;
        w->next_unreachable_log = 0;
        w->kafka_ever_up = 1;
        pthread_mutex_lock(&w->m.mu);
        w->m.kafka_reason[0] = 0;
        pthread_mutex_unlock(&w->m.mu);
    } else if (!up && atomic_load(&w->m.kafka_up)) {
        w->kafka_down_since = now;
    }
    atomic_store(&w->m.kafka_up, up);

    part_lag *lag = NULL;
    int n = 0, cap = 0;
    json_t *t;
    json_object_foreach(json_object_get(root, "topics"), k, t) {
        const char *pk;
        json_t *p;
        json_object_foreach(json_object_get(t, "partitions"), pk, p) {
            json_int_t part = json_integer_value(json_object_get(p, "partition"));
            json_t *cl = json_object_get(p, "consumer_lag");
            /* -1: the internal unassigned partition, or a lag not known (partition not consumed) */
            if (part < 0 || !json_is_integer(cl) || json_integer_value(cl) < 0) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                part_lag *nl = realloc(lag, (size_t)cap * sizeof(*lag));
                if (!nl) abort();
                lag = nl;
            }
            lag[n].topic = strdup(k);
            if (!lag[n].topic) abort();
            lag[n].partition = (int32_t)part;
            lag[n++].lag = json_integer_value(cl);
        }
    }
    json_decref(root);
    pthread_mutex_lock(&w->m.mu);
    part_lag *old = w->m.lag;
    int n_old = w->m.n_lag;
    w->m.lag = lag;
    w->m.n_lag = n;
    pthread_mutex_unlock(&w->m.mu);
    for (int i = 0; i < n_old; i++) free(old[i].topic);
    free(old);
    return 0;
}

int wk_check_reachable(worker *w, double now) {
    if (w->kafka_down_since == 0) return 0;
    double down = now - w->kafka_down_since;
    int64_t limit = cfg_int(w->cfg, "kafka.startup_timeout_ms");
    int give_up = !w->kafka_ever_up && limit > 0 && down >= (double)limit;
    if (!give_up && (down < 10000 || now < w->next_unreachable_log)) return 0;
    char reason[256];
    pthread_mutex_lock(&w->m.mu);
    snprintf(reason, sizeof(reason), "%s", w->m.kafka_reason[0] ? w->m.kafka_reason : "no answer yet");
    pthread_mutex_unlock(&w->m.mu);
    wlog(w, L_ERROR, "cannot reach Kafka brokers %s for %g s: %s", cfg_get(w->cfg, "kafka.bootstrap.servers"),
         give_up ? (double)limit / 1000 : (double)(int64_t)(down / 1000), reason);
    w->next_unreachable_log = now + 60000;
    return give_up ? -1 : 0;
}

/* Latency histograms of a job whose Result was delivered. */
static void observe_job(worker *w, const job_rec *r) {
    double now = now_ms(), e2e = now - r->t_recv, added = e2e - r->ttft_ms - r->decode_ms;
    if (r->t_admit > 0) lat_observe(&w->m.queue_wait, (r->t_admit - r->t_recv) * 1e-3);
    if (r->tokens_out > 0) lat_observe(&w->m.ttft, r->ttft_ms * 1e-3);
    if (r->tokens_out > 1) lat_observe(&w->m.tpot, r->decode_ms / (r->tokens_out - 1) * 1e-3);
    lat_observe(&w->m.e2e, e2e * 1e-3);
    lat_observe(&w->m.added, (added > 0 ? added : 0) * 1e-3);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    worker *w = opaque;
    if (!m->_private) {
        if (m->err) wlog(w, L_WARN, "chunk delivery failed: %s", rd_kafka_err2str(m->err));
        return;
    }
    job_rec *r = m->_private;
    if (!m->err && r->kind == JK_JOB && !r->abandoned) observe_job(w, r);
    w->on_delivery(w, r, m->err);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque) {
    worker *w = opaque;
    rd_kafka_error_t *e = NULL;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        e = rd_kafka_incremental_assign(rk, parts);
        for (int i = 0; i < parts->cnt; i++) {
            rd_kafka_topic_partition_list_add(w->assigned, parts->elems[i].topic, parts->elems[i].partition);
            wlog(w, L_INFO, "assigned %s[%d]", parts->elems[i].topic, parts->elems[i].partition);
        }
        if (w->paused || w->draining) rd_kafka_pause_partitions(rk, parts);
        atomic_store(&w->m.assigned, w->assigned->cnt);
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        int lost = rd_kafka_assignment_lost(rk);
        w->on_revoke(w, parts, lost);
        e = rd_kafka_incremental_unassign(rk, parts);
        for (int i = 0; i < parts->cnt; i++) {
            rd_kafka_topic_partition_list_del(w->assigned, parts->elems[i].topic, parts->elems[i].partition);
            wlog(w, L_INFO, "%s %s[%d]", lost ? "lost" : "revoked", parts->elems[i].topic, parts->elems[i].partition);
        }
        atomic_store(&w->m.assigned, w->assigned->cnt);
    } else {
        wlog(w, L_ERROR, "rebalance error: %s", rd_kafka_err2str(err));
        e = rd_kafka_incremental_unassign(rk, parts);
    }
    if (e) {
        wlog(w, L_ERROR, "incremental (un)assign failed: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

// ---------------------------------------------------------------- setup

static int conf_set(rd_kafka_conf_t *c, const char *k, const char *v, char *err, size_t errlen) {
    char e[512];
    if (rd_kafka_conf_set(c, k, v, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "config: kafka.%s: %s", k, e);
        return -1;
    }
    return 0;
}

/* Apply every kafka.* key: plain ones to both clients, kafka.consumer.* / kafka.producer.* to one. */
static int apply_kafka_keys(const cfg *c, rd_kafka_conf_t *conf, int is_consumer, char *err, size_t errlen) {
    for (int i = 0; i < c->n; i++) {
        const char *k = c->e[i].key;
        if (strncmp(k, "kafka.", 6) != 0) continue;
        k += 6;
        if (strncmp(k, "consumer.", 9) == 0) {
            if (!is_consumer) continue;
            k += 9;
        } else if (strncmp(k, "producer.", 9) == 0) {
            if (is_consumer) continue;
            k += 9;
        } else if (!is_consumer && (strcmp(k, "group.id") == 0 || strcmp(k, "auto.offset.reset") == 0)) {
            continue;
        } else if (strcmp(k, "startup_timeout_ms") == 0) {
            continue;   /* the worker's own (wk_check_reachable) */
        }
        if (conf_set(conf, k, c->e[i].value, err, errlen)) return -1;
    }
    return 0;
}

int wk_setup(worker *w, char *err, size_t errlen) {
    char e[512];
    if (!w->on_delivery || !w->on_revoke) {
        snprintf(err, errlen, "internal: wk_setup needs the worker's on_delivery and on_revoke hooks");
        return -1;
    }
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        snprintf(err, errlen, "cannot create wake pipe");
        return -1;
    }
    w->wake_rd = pipefd[0];
    w->wake_wr = pipefd[1];
    fcntl(w->wake_rd, F_SETFL, O_NONBLOCK);
    fcntl(w->wake_wr, F_SETFL, O_NONBLOCK);

    /* producer: idempotent, small linger so results leave quickly */
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(pc, log_cb);
    /* small request/response messages: Nagle + delayed ACK would add ms-scale tails */
    /* the message limit follows input.max_bytes, so a DLQ copy of any accepted message fits whole (a
     * kafka.message.max.bytes / kafka.producer.message.max.bytes setting overrides it) */
    char mmax[24];
    int64_t want = w->max_bytes + DLQ_HEADROOM;
    snprintf(mmax, sizeof(mmax), "%lld", (long long)(want < 1000000 ? 1000000 : want > 1000000000 ? 1000000000 : want));
    if (conf_set(pc, "message.max.bytes", mmax, err, errlen) ||
        conf_set(pc, "enable.idempotence", "true", err, errlen) || conf_set(pc, "linger.ms", "1", err, errlen) ||
        conf_set(pc, "socket.nagle.disable", "true", err, errlen) ||
        conf_set(pc, "bootstrap.servers", cfg_get(w->cfg, "kafka.bootstrap.servers"), err, errlen) ||
        apply_kafka_keys(w->cfg, pc, 0, err, errlen)) {
        rd_kafka_conf_destroy(pc);
        return -1;
    }
    char got[24];
    size_t gotlen = sizeof(got);
    if (rd_kafka_conf_get(pc, "message.max.bytes", got, &gotlen) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "kafka producer: cannot read message.max.bytes");
        rd_kafka_conf_destroy(pc);
        return -1;
    }
    w->produce_max = atoll(got);
    if (w->produce_max < want)
        wlog(w, L_WARN, "the producer's message.max.bytes=%lld is below input.max_bytes + %d: DLQ copies of larger "
             "messages are cut (header sluice.dlq.truncated) and larger Results become ERROR Results",
             (long long)w->produce_max, DLQ_HEADROOM);
    rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
    rd_kafka_conf_set_error_cb(pc, error_cb);
    rd_kafka_conf_set_opaque(pc, w);
    w->kafka_down_since = now_ms();   /* until the first statistics show a broker up */
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, e, sizeof(e));
    if (!w->producer) {
        snprintf(err, errlen, "kafka producer: %s", e);
        rd_kafka_conf_destroy(pc);
        return -1;
    }
    /* warm-up: a topic handle asks for the topic's metadata now, and the idempotent producer gets its
     * PID as soon as a broker answers, so the first Result does not wait for either */
    const char *warm[3] = {w->topic_results, w->topic_chunks, w->topic_dlq};
    for (int i = 0; i < 3; i++) {
        w->warm_topics[i] = rd_kafka_topic_new(w->producer, warm[i], NULL);
        if (!w->warm_topics[i])
            wlog(w, L_WARN, "kafka topic %s: %s", warm[i], rd_kafka_err2str(rd_kafka_last_error()));
    }

    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(cc, log_cb);
    if (conf_set(cc, "group.id", cfg_get(w->cfg, "kafka.group.id"), err, errlen) ||
        conf_set(cc, "auto.offset.reset", cfg_get(w->cfg, "kafka.auto.offset.reset"), err, errlen) ||
        conf_set(cc, "bootstrap.servers", cfg_get(w->cfg, "kafka.bootstrap.servers"), err, errlen) ||
        conf_set(cc, "partition.assignment.strategy", "cooperative-sticky", err, errlen) ||
        conf_set(cc, "enable.auto.commit", "true", err, errlen) ||
        conf_set(cc, "enable.partition.eof", "false", err, errlen) ||
        /* a job queue wants low pickup latency; brokers answer a fetch as soon as data arrives anyway */
        conf_set(cc, "fetch.wait.max.ms", "10", err, errlen) ||
        conf_set(cc, "socket.nagle.disable", "true", err, errlen) ||
        /* broker reachability, the group's state and consumer lag come from these (stats_cb) */
        conf_set(cc, "statistics.interval.ms", "1000", err, errlen) ||
        apply_kafka_keys(w->cfg, cc, 1, err, errlen) ||
        /* the worker stores offsets itself, after the result is delivered and Redis says done */
        conf_set(cc, "enable.auto.offset.store", "false", err, errlen)) {
        rd_kafka_conf_destroy(cc);
        return -1;
    }
    rd_kafka_conf_set_rebalance_cb(cc, rebalance_cb);
    rd_kafka_conf_set_error_cb(cc, error_cb);
    rd_kafka_conf_set_stats_cb(cc, stats_cb);
    rd_kafka_conf_set_opaque(cc, w);
    w->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cc, e, sizeof(e));
    if (!w->consumer) {
        snprintf(err, errlen, "kafka consumer: %s", e);
        rd_kafka_conf_destroy(cc);
        return -1;
    }
    rd_kafka_poll_set_consumer(w->consumer);
    w->assigned = rd_kafka_topic_partition_list_new(16);

    /* wake the main loop when either client has something for us */
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(w->consumer);
    rd_kafka_queue_io_event_enable(q, w->wake_wr, "k", 1);
    rd_kafka_queue_destroy(q);
    q = rd_kafka_queue_get_main(w->producer);
    rd_kafka_queue_io_event_enable(q, w->wake_wr, "p", 1);
    rd_kafka_queue_destroy(q);

    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, w->topic_jobs, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(w->consumer, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (rerr) {
        snprintf(err, errlen, "kafka subscribe %s: %s", w->topic_jobs, rd_kafka_err2str(rerr));
        return -1;
    }
    return 0;
}

void wk_close(worker *w) {
    if (w->consumer) {
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(w->consumer);
        if (e) wlog(w, L_WARN, "consumer close: %s", rd_kafka_err2str(e));
        rd_kafka_destroy(w->consumer);
        w->consumer = NULL;
    }
    if (w->producer) {
        for (int i = 0; i < 3; i++)
            if (w->warm_topics[i]) rd_kafka_topic_destroy(w->warm_topics[i]);
        rd_kafka_flush(w->producer, 5000);
        rd_kafka_poll(w->producer, 0);
        rd_kafka_destroy(w->producer);
        w->producer = NULL;
    }
    if (w->assigned) rd_kafka_topic_partition_list_destroy(w->assigned);
    w->assigned = NULL;
}

// ---------------------------------------------------------------- produce

static int produce_retry(worker *w, rd_kafka_resp_err_t e) {
    /* local queue full: serve delivery reports and try again (bounded by our own admission limits) */
    if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) return 0;
    rd_kafka_poll(w->producer, 10);
    return 1;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    if (!d) abort();
    return d;
}

void wk_retry_later(worker *w, job_rec *r) {
    if (r->produce_tries++ == 0) w->n_produce_failed++;   /* the timers scan only while some wait */
    r->next_check = now_ms() + 500;
}

/* the producer holds the record now (its opaque) until the delivery report */
static void produced(worker *w, job_rec *r) {
    if (r->produce_tries > 0) w->n_produce_failed--, r->produce_tries = 0;
    r->in_producer = 1;
}

/* Record framing and the headers' names and lengths, on top of the header values (librdkafka counts a
 * v2 record's overhead as a few dozen bytes; this is generous). */
#define DLQ_FRAMING 512

void wk_produce_dlq(worker *w, job_rec *r) {
    struct dlq_msg *d = r->dlq;
    rd_kafka_resp_err_t e;
    for (;;) {
        /* what fits: the limit less framing and header values; the value (the job) before the key */
        size_t hdrs = DLQ_FRAMING + strlen(d->error) + strlen(d->cls) + strlen(d->topic) + 64;
        size_t room = d->limit > hdrs ? d->limit - hdrs : 0;
        size_t vl = d->orig_value_len, kl = d->orig_key_len;
        if (vl + kl > room) {
            size_t kmin = kl < 1024 ? kl : 1024;
            vl = vl < (room > kmin ? room - kmin : 0) ? vl : (room > kmin ? room - kmin : 0);
            kl = kl < room - vl ? kl : room - vl;
        }
        if (vl > d->value_len) vl = d->value_len;   /* never past the copy */
        if (kl > d->key_len) kl = d->key_len;
        int cut = vl < d->orig_value_len || kl < d->orig_key_len;
        char osize[24], oksize[24];
        snprintf(osize, sizeof(osize), "%zu", d->orig_value_len);
        snprintf(oksize, sizeof(oksize), "%zu", d->orig_key_len);
        rd_kafka_headers_t *h = rd_kafka_headers_new(8);
        rd_kafka_header_add(h, "sluice.error", -1, d->error, -1);
        rd_kafka_header_add(h, "sluice.error.class", -1, d->cls, -1);
        rd_kafka_header_add(h, "sluice.original.topic", -1, d->topic, -1);
        rd_kafka_header_add(h, "sluice.original.partition", -1, d->partition, -1);
        rd_kafka_header_add(h, "sluice.original.offset", -1, d->offset, -1);
        if (cut) {
            rd_kafka_header_add(h, "sluice.dlq.truncated", -1, "true", -1);
            rd_kafka_header_add(h, "sluice.original.size", -1, osize, -1);
            rd_kafka_header_add(h, "sluice.original.key.size", -1, oksize, -1);
        }
        do {
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(w->topic_dlq), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_VALUE(d->value, vl), RD_KAFKA_V_KEY(d->key, kl), RD_KAFKA_V_HEADERS(h),
                                  RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
        } while (e && produce_retry(w, e));
        if (e) rd_kafka_headers_destroy(h);   /* librdkafka owns them once the call succeeds */
        /* our estimate of the framing was short: cut further (a headers-only message always fits) */
        if (e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && (vl > 0 || kl > 0)) {
            d->limit = d->limit / 2;
            continue;
        }
        if (!e && cut)
            wlog(w, L_WARN, "DLQ copy of offset %lld cut to %zu of %zu value bytes and %zu of %zu key bytes "
                 "(message limit %zu)", (long long)r->offset, vl, d->orig_value_len, kl, d->orig_key_len, d->limit);
        break;
    }
    if (e) {
        /* the record keeps the message and its offset stays unstored: retried from the timers */
        wlog(w, L_ERROR, "DLQ produce for offset %lld failed: %s (retrying)", (long long)r->offset,
             rd_kafka_err2str(e));
        wk_retry_later(w, r);
        return;
    }
    if (r->produce_tries > 0)
        wlog(w, L_INFO, "DLQ write for offset %lld queued again (try %d)", (long long)r->offset, r->produce_tries + 1);
    produced(w, r);
}

void wk_dlq_failed(worker *w, job_rec *r, rd_kafka_resp_err_t err) {
    struct dlq_msg *d = r->dlq;
    if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && d->limit > 0) {
        /* the broker's (or the topic's) limit is below the producer's: a smaller copy */
        d->limit /= 2;
        wlog(w, L_WARN, "DLQ message for offset %lld refused for size; writing it again cut to %zu bytes",
             (long long)r->offset, d->limit);
    } else {
        wlog(w, L_ERROR, "DLQ delivery for offset %lld failed: %s; retrying", (long long)r->offset,
             rd_kafka_err2str(err));
    }
    wk_retry_later(w, r);
}

int wk_reply_topic_failed(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
           err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION || err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
           err == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION;
}

static void frame(int32_t schema_id, const uint8_t *bare, size_t len, uint8_t **out, size_t *outlen) {
    if (schema_id < 0) {
        *out = (uint8_t *)bare;
        *outlen = len;
        return;
    }
    uint8_t *b = malloc(len + 5);
    if (!b) abort();
    b[0] = 0;
    b[1] = (uint8_t)((uint32_t)schema_id >> 24);
    b[2] = (uint8_t)((uint32_t)schema_id >> 16);
    b[3] = (uint8_t)((uint32_t)schema_id >> 8);
    b[4] = (uint8_t)schema_id;
    memcpy(b + 5, bare, len);
    *out = b;
    *outlen = len + 5;
}

void wk_reply_fallback(worker *w, job_rec *r, rd_kafka_resp_err_t err) {
    char why[320];
    snprintf(why, sizeof(why), "reply_topic '%.200s': %s", r->job.reply_topic, rd_kafka_err2str(err));
    free(r->reply_error);
    r->reply_error = xstrdup(why);
    wlog(w, L_WARN, "result for %s: %s; writing it to %s instead", r->job.id, why, w->topic_results);
}

int wk_produce_result(worker *w, job_rec *r) {
    uint8_t *v = NULL;
    size_t vl = 0;
    const uint8_t *bare = NULL;
    rd_kafka_resp_err_t e;
    for (;;) {
        const uint8_t *want = r->small ? r->small : r->result;
        if (bare != want) {   /* (re)frame when the payload changed: first pass, or oversize fallback */
            if (v && v != bare) free(v);
            bare = want;
            frame(r->schema_id >= 0 ? w->result_schema_id : -1, bare, r->small ? r->small_len : r->result_len, &v, &vl);
        }
        int to_reply = r->job.reply_topic && r->job.reply_topic[0] && !r->reply_error;
        const char *topic = to_reply ? r->job.reply_topic : w->topic_results;
        do {
            /* the headers belong to librdkafka once the call succeeds */
            rd_kafka_headers_t *h = rd_kafka_headers_new(2);
            rd_kafka_header_add(h, "sluice.type", -1, "result", -1);
            if (r->reply_error) rd_kafka_header_add(h, "sluice.error", -1, r->reply_error, -1);
            e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_VALUE(v, vl), RD_KAFKA_V_KEY(r->job.id, strlen(r->job.id)),
                                  RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
            if (e) rd_kafka_headers_destroy(h);
        } while (e && produce_retry(w, e));
        /* a reply topic already known to be missing fails right here, not in a delivery report */
        if (e && to_reply && wk_reply_topic_failed(e)) {
            wk_reply_fallback(w, r, e);
            continue;
        }
        break;
    }
    if (v != bare) free(v);
    /* over the producer's message.max.bytes: the caller makes the small ERROR Result (the full one is in Redis) */
    if (e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && !r->small) return WK_TOO_LARGE;
    r->state = JS_PRODUCING;
    if (e) {
        wlog(w, L_WARN, "result produce for %s failed: %s (retrying)", r->job.id, rd_kafka_err2str(e));
        wk_retry_later(w, r);
        return 0;
    }
    produced(w, r);
    return 0;
}

void wk_produce_chunk(worker *w, job_rec *r, int done) {
    sl_chunk ch = {0};
    ch.id = r->job.id;
    ch.seq = r->chunk_seq++;
    int from = r->chunk_tok_sent;   /* tokens since the last chunk */
    r->chunk_tok_sent = r->n_tokens;
    ch.tokens = r->tokens + from;
    ch.n_tokens = r->n_tokens - from;
    if (r->has_text) {
        /* text that may still turn out to be the start of a stop string waits for a later chunk
         * (at most the longest stop string - 1 bytes, cut back to a character boundary), so the
         * chunks' texts always add up to the Result's text */
        size_t upto = r->text.len, hold = 0;
        for (int i = 0; !done && i < r->job.n_stop; i++)
            if (r->job.stop_len[i] > hold + 1) hold = r->job.stop_len[i] - 1;
        upto = upto > hold ? upto - hold : 0;
        while (upto > r->chunk_text_sent && upto < r->text.len && ((unsigned char)r->text.text[upto] & 0xC0) == 0x80)
            upto--;
        if (upto < r->chunk_text_sent) upto = r->chunk_text_sent;
        ch.text = r->text.text ? r->text.text + r->chunk_text_sent : "";
        ch.text_len = upto - r->chunk_text_sent;
        r->chunk_text_sent = upto;
    }
    ch.done = done;
    uint8_t *buf;
    size_t len;
    char err[256];
    if (codec_encode_chunk(w->codec, &ch, r->schema_id >= 0 ? w->chunk_schema_id : -1, &buf, &len, err,
                           sizeof(err))) {
        wlog(w, L_WARN, "%s", err);
        return;
    }
    rd_kafka_resp_err_t e;
    do {
        e = rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(w->topic_chunks), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
                              RD_KAFKA_V_VALUE(buf, len), RD_KAFKA_V_KEY(r->job.id, strlen(r->job.id)),
                              RD_KAFKA_V_HEADER("sluice.type", "chunk", -1), RD_KAFKA_V_OPAQUE(NULL),
                              RD_KAFKA_V_END);
    } while (e && produce_retry(w, e));
    if (e) {
        wlog(w, L_WARN, "chunk produce for %s failed: %s", r->job.id, rd_kafka_err2str(e));
        free(buf);
    }
}

void wk_pause_all(worker *w, int pause) {
    if (!w->assigned || w->assigned->cnt == 0) {
        w->paused = pause;
        return;
    }
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(w->consumer, w->assigned)
                                  : rd_kafka_resume_partitions(w->consumer, w->assigned);
    if (e) wlog(w, L_WARN, "%s partitions: %s", pause ? "pause" : "resume", rd_kafka_err2str(e));
    if (pause && !w->paused) atomic_fetch_add(&w->m.paused, 1);
    w->paused = pause;
}

void wk_consumer_error(worker *w, const rd_kafka_message_t *m) {
    rd_kafka_resp_err_t e = m->err;
    if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
        e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED || e == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION ||
        e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
        if (!w->topic_missing)
            wlog(w, L_WARN, "jobs topic %s not available (%s): checking the cluster's metadata every second",
                 w->topic_jobs, rd_kafka_err2str(e));
        w->topic_missing = 1;
    }
}

void wk_topic_check(worker *w) {
    if (!w->topic_missing) return;
    if (w->assigned && w->assigned->cnt > 0) {   /* the group has it again */
        w->topic_missing = 0;
        return;
    }
    double now = now_ms();
    if (now < w->next_topic_check) return;
    w->next_topic_check = now + 1000;
    /* all topics: only a full listing updates the consumer group's view of its subscription (a
     * partial one could make subscribed topics look missing); the answer is applied to the group
     * when it comes, whether or not this call waits that long */
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(w->consumer, 1, NULL, &md, 200);
    if (e || !md) return;
    for (int i = 0; i < md->topic_cnt; i++)
        if (!strcmp(md->topics[i].topic, w->topic_jobs) && !md->topics[i].err && md->topics[i].partition_cnt > 0) {
            wlog(w, L_INFO, "jobs topic %s is available (%d partitions)", w->topic_jobs, md->topics[i].partition_cnt);
            w->topic_missing = 0;
        }
    rd_kafka_metadata_destroy(md);
}

void wk_store_offset(worker *w, int32_t partition, int64_t offset) {
    if (partition >= w->n_store_off) {
        int n = partition + 1;
        int64_t *p = realloc(w->store_off, (size_t)n * sizeof(int64_t));
        if (!p) abort();
        for (int i = w->n_store_off; i < n; i++) p[i] = -1;
        w->store_off = p;
        w->n_store_off = n;
    }
    if (offset > w->store_off[partition]) w->store_off[partition] = offset;
}

void wk_flush_offsets(worker *w) {
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int p = 0; p < w->n_store_off; p++) {
        if (w->store_off[p] < 0) continue;
        if (!l) l = rd_kafka_topic_partition_list_new(w->n_store_off);
        rd_kafka_topic_partition_list_add(l, w->topic_jobs, p)->offset = w->store_off[p];
        w->store_off[p] = -1;
    }
    if (!l) return;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(w->consumer, l);
    if (e) wlog(w, L_DEBUG, "offset store: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}
