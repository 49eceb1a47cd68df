/* schema_registry.h — a Confluent Schema Registry client: writer schemas by id for the worker, schema
 * registration for sluice-submit.
 *
 * Plain HTTP/1.1 over a blocking socket (no TLS: `http://host[:port][/prefix]` only), one request per
 * connection, every request bounded by timeout_ms (connect, send and the whole answer). A fetch that
 * fails for the network or a 5xx answer is tried REGISTRY_ATTEMPTS times with a short backoff between.
 *
 * registry_job_resolver caches by id: a schema id names one schema for good (Confluent never changes
 * it), so a resolved id stays resolved, and so does an id whose schema does not resolve to the worker's
 * Job schema. An id the registry does not know is asked again after REGISTRY_RECHECK_MS. When the
 * registry cannot be reached, every id not cached yet fails at once for REGISTRY_RECHECK_MS, so a dead
 * registry costs one round of attempts per period, not one per message. The caller (the worker) sends
 * a message whose id fails to the DLQ with the returned reason; nothing waits for the registry.
 *
 * Used by one thread (the worker's consumer thread; sluice-submit's main thread).
 */
#ifndef SLUICE_SCHEMA_REGISTRY_H
#define SLUICE_SCHEMA_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "job_resolver.h"

enum { REGISTRY_ATTEMPTS = 3, REGISTRY_RECHECK_MS = 5000 };

typedef struct sl_registry sl_registry;

/* Check a registry URL: http://host[:port][/prefix]. 0, or -1 with err (https is not supported). */
int registry_check_url(const char *url, char *err, size_t errlen);
int registry_new(const char *url, int timeout_ms, sl_registry **out, char *err, size_t errlen);
void registry_free(sl_registry *reg);

/* What registry_job_resolver found. */
typedef enum {
    REG_OK = 0,
    REG_NOT_FOUND,         /* the registry does not know the id (40403) */
    REG_INCOMPATIBLE,      /* the schema does not resolve to the worker's Job schema (or is not Avro) */
    REG_UNREACHABLE,       /* no answer, or an error answer, after the attempts */
} registry_status;

/* The resolver for Jobs written with schema `id` (owned by the registry client). Anything but REG_OK
 * comes with one line in err naming the id and why. */
registry_status registry_job_resolver(sl_registry *reg, int32_t id, sl_job_resolver **out, char *err,
                                      size_t errlen);

/* POST /subjects/{subject}/versions: registers schema_json (an Avro schema) under subject, or finds it
 * there; *id is the registry's id for it. 0, or -1 with err. */
int registry_register(sl_registry *reg, const char *subject, const char *schema_json, int32_t *id, char *err,
                      size_t errlen);

#endif
