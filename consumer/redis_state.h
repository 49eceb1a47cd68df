/* redis_state.h — job state in Redis (hiredis, blocking context with timeouts, pipelined batches).
 *
 * Keys (prefix default "sluice:"): job:<id> hash (status queued|running|done|failed, worker, partition,
 * offset, created, started, finished, lease_until, tokens_out), result:<id> (the encoded Result),
 * cancel:<id> (set by clients), worker:<id> (heartbeat hash). Every job transition is one call of ONE
 * Lua script (claim / renew / done / failed / release), using the server clock for leases.
 *
 * Claim: a job id already known with another payload digest -> CONFLICT (the stored digest in holder);
 * a job already done|failed whose result copy exists -> DONE with the stored bytes (re-emit); running
 * under another worker's unexpired lease while that worker's heartbeat key exists and names the claim's
 * incarnation -> PARKED; otherwise it becomes running under this worker and incarnation. A claim
 * records (worker id, incarnation): this process's incarnation is its start time in ms and 64 random
 * bits, also written in its heartbeat. A worker id is one live process at a time, so a restarted worker
 * takes over its own earlier incarnation's claims at once, and so does any other worker once the
 * heartbeat names the new incarnation; a dead worker's jobs are taken once its heartbeat expires.
 *
 * Failure model: a context that errors is freed; the next call reconnects, at most once per second, so
 * a dead Redis costs the caller at most one connect timeout per second. Batch calls return -1 when
 * Redis is unreachable and leave every item's `status` as RC_ERR; the caller retries state writes.
 * Not thread-safe: one sl_redis per thread.
 */
#ifndef SLUICE_REDIS_STATE_H
#define SLUICE_REDIS_STATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_redis sl_redis;

enum { RC_ERR = 0, RC_CLAIMED, RC_DONE, RC_PARKED, RC_OK, RC_ALREADY, RC_LOST, RC_CONFLICT, RC_POISON };

typedef struct {
    const char *id;
    int32_t partition;
    int64_t offset;
    const char *digest;              /* the payload's digest (hex), or NULL */
    int status;                      /* out */
    char *result;                    /* out, RC_DONE: malloc'ed stored Result bytes (caller frees) */
    size_t result_len;
    char holder[64];                 /* out: RC_PARKED the holding worker, RC_CONFLICT the known digest, RC_POISON
                                        the crashes counted */
} redis_claim;

typedef struct {
    const char *id;
    int failed;                      /* status failed instead of done */
    const uint8_t *result;
    size_t result_len;
    int tokens_out;
    const char *digest;              /* the payload's digest (hex), or NULL */
    int status;                      /* out: RC_OK | RC_ALREADY | RC_ERR */
} redis_done;

/* Connects (AUTH [user] password when password is not empty, on every connect) and loads the script;
 * -1 with err when Redis cannot be reached or refuses the credentials (the worker exits then). */
int redis_open(sl_redis **out, const char *url, const char *user, const char *password, const char *prefix,
               int timeout_ms, const char *worker, int64_t lease_ms, int64_t ttl_ms, char *err, size_t errlen);
void redis_close(sl_redis *r);
int redis_connected(const sl_redis *r);
const char *redis_incarnation(const sl_redis *r);
uint64_t redis_errors(const sl_redis *r);   /* failed commands / reconnect attempts so far */

/* A claim that takes a job over from a holder that never finished it (the process died, or its lease ran out)
 * counts a crash of the job; at the n-th (0: never) the job is poisoned: this claim and every later one answer
 * RC_POISON. */
void redis_set_max_crashes(sl_redis *r, int64_t n);
int redis_claim_batch(sl_redis *r, redis_claim *c, int n);
int redis_done_batch(sl_redis *r, redis_done *d, int n);
/* renew: per id, status RC_OK or RC_LOST (another worker took it); release: hand back (status queued). */
int redis_renew_batch(sl_redis *r, const char *const *ids, int n, int *status);
int redis_release_batch(sl_redis *r, const char *const *ids, int n);
/* One MGET of cancel:<id>; cancelled[i] = 1 when the key exists. */
int redis_cancel_sweep(sl_redis *r, const char *const *ids, int n, uint8_t *cancelled);
/* HSET worker:<id> with the given field/value pairs and `incarnation`, and a TTL. */
int redis_heartbeat(sl_redis *r, const char *const *fv, int n_pairs, int64_t ttl_ms);

#endif
