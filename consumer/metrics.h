/* metrics.h — /metrics (Prometheus text format) and /healthz over HTTP (libmicrohttpd, its own thread).
 * Reads the worker's atomic counters only; never touches the pipeline. */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include "worker.h"

typedef struct metrics_server metrics_server;

/* NULL with err when the port cannot be bound. */
metrics_server *metrics_start(worker *w, const char *bind_addr, int port, char *err, size_t errlen);
void metrics_stop(metrics_server *s);

#endif
