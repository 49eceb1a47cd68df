/* metrics.c — see metrics.h. */
#include "metrics.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metrics_server {
    struct MHD_Daemon *d;
    worker *w;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **ptr) {
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)ptr;
    metrics_server *s = cls;
    worker_metrics *m = &s->w->m;
    if (strcmp(method, "GET") != 0) return reply(c, 405, "text/plain", strdup("GET only\n"));
    if (strcmp(url, "/healthz") == 0) {
        uint64_t last = atomic_load(&m->loop_ms_epoch);
        int ok = (double)last > now_ms() - 5000.0;
        return reply(c, ok ? 200 : 503, "text/plain", strdup(ok ? "ok\n" : "main loop stalled\n"));
    }
    if (strcmp(url, "/metrics") != 0) return reply(c, 404, "text/plain", strdup("try /metrics or /healthz\n"));
    char *b = malloc(4096);
    if (!b) return MHD_NO;
    snprintf(b, 4096,
             "# TYPE sluice_jobs_consumed_total counter\nsluice_jobs_consumed_total %llu\n"
             "# TYPE sluice_jobs_dlq_total counter\nsluice_jobs_dlq_total %llu\n"
             "# TYPE sluice_results_total counter\nsluice_results_total %llu\n"
             "# TYPE sluice_results_reemitted_total counter\nsluice_results_reemitted_total %llu\n"
             "# TYPE sluice_jobs_parked_total counter\nsluice_jobs_parked_total %llu\n"
             "# TYPE sluice_tokens_generated_total counter\nsluice_tokens_generated_total %llu\n"
             "# TYPE sluice_jobs_cancelled_total counter\nsluice_jobs_cancelled_total %llu\n"
             "# TYPE sluice_jobs_expired_total counter\nsluice_jobs_expired_total %llu\n"
             "# TYPE sluice_jobs_failed_total counter\nsluice_jobs_failed_total %llu\n"
             "# TYPE sluice_redis_retries_total counter\nsluice_redis_retries_total %llu\n"
             "# TYPE sluice_produce_retries_total counter\nsluice_produce_retries_total %llu\n"
             "# TYPE sluice_jobs_handed_back_total counter\nsluice_jobs_handed_back_total %llu\n"
             "# TYPE sluice_backpressure_pauses_total counter\nsluice_backpressure_pauses_total %llu\n"
             "# TYPE sluice_jobs_inflight gauge\nsluice_jobs_inflight %lld\n"
             "# TYPE sluice_offsets_pending gauge\nsluice_offsets_pending %lld\n",
             (unsigned long long)atomic_load(&m->consumed), (unsigned long long)atomic_load(&m->dlq),
             (unsigned long long)atomic_load(&m->results), (unsigned long long)atomic_load(&m->reemitted),
             (unsigned long long)atomic_load(&m->parked), (unsigned long long)atomic_load(&m->tokens),
             (unsigned long long)atomic_load(&m->cancelled), (unsigned long long)atomic_load(&m->expired),
             (unsigned long long)atomic_load(&m->errors), (unsigned long long)atomic_load(&m->redis_retries),
             (unsigned long long)atomic_load(&m->produce_retries), (unsigned long long)atomic_load(&m->handed_back),
             (unsigned long long)atomic_load(&m->paused), (long long)atomic_load(&m->inflight),
             (long long)atomic_load(&m->pending));
    return reply(c, 200, "text/plain; version=0.0.4", b);
}

metrics_server *metrics_start(worker *w, const char *bind_addr, int port, char *err, size_t errlen) {
    metrics_server *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->w = w;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "metrics.bind '%s' is not an IPv4 address", bind_addr);
        free(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, handler, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "metrics: cannot listen on %s:%d", bind_addr, port);
        free(s);
        return NULL;
    }
    return s;
}

void metrics_stop(metrics_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
