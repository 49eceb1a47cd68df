/* metrics.h — /metrics (Prometheus text format), /healthz and /readyz over HTTP (libmicrohttpd, its own
 * thread). Reads the worker's atomics, the engine thread's statistics copy and the lag table (under
 * worker_metrics.mu); never touches the pipeline.
 *
 *   /metrics  every metric of the tables in metrics.c, each with # HELP and # TYPE
 *   /healthz  200 while the main loop turns (or has not started yet: the model may be loading),
 *             503 when it has not turned for 5 s
 *   /readyz   200 once the model is loaded, a Kafka broker answers, the consumer group is joined
 *             (or partitions are assigned) and Redis is connected; else 503 with one line saying
 *             what is missing (also while draining)
 *
 * Start it before the model loads so /healthz and /readyz answer during a long load; call
 * metrics_tick from the main loop (it samples the token counter for the tokens/s gauge) and
 * metrics_stop before the engine thread stops.
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include "worker.h"

typedef struct metrics_server metrics_server;

/* NULL with err when the port cannot be bound. */
metrics_server *metrics_start(worker *w, const char *bind_addr, int port, char *err, size_t errlen);
void metrics_tick(metrics_server *s, double now_ms);
void metrics_stop(metrics_server *s);

#endif
