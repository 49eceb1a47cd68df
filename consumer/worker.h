/* worker.h — the sluice-worker pipeline, shared by worker_kafka.c, worker_jobs.c and cli/sluice_worker.c.
 *
 * Two layers: worker_kafka.c is the Kafka side (clients, rebalances, producing results, chunks and DLQ
 * messages, pausing, storing offsets) and never calls into worker_jobs.c; worker_jobs.c is a job's life
 * (validate, claim, engine, result, Redis done, offset release) and calls wk_* for its Kafka I/O. The
 * two things librdkafka reports from inside a poll, delivery reports and revocations, reach the job
 * layer through the hooks on_delivery / on_revoke that the program sets before wk_setup.
 *
 * One consumer thread runs everything here: Kafka poll -> unframe/decode/validate (bad input -> DLQ) ->
 * Redis claim (pipelined per poll round) -> engine thread (admission) -> events -> Result -> produce ->
 * delivery report -> Redis done (pipelined) -> offset store (contiguous low-water mark per partition).
 * Every consumed message has one job_rec from consumption until its offset is released; the record is
 * freed only when nothing else (engine, producer) still holds its pointer.
 */
#ifndef SLUICE_WORKER_H
#define SLUICE_WORKER_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "codec.h"
#include "config.h"
#include "engine.h"
#include "engine_thread.h"
#include "offsets.h"
#include "redis_state.h"
#include "schema_registry.h"
#include "textcodec.h"

/* A job id: valid UTF-8, no NUL, 1 to JOB_ID_MAX bytes (else the job goes to the DLQ as `validation`). */
enum { JOB_ID_MAX = 256 };

enum { JK_JOB = 0, JK_DLQ, JK_REEMIT };
enum { JS_CLAIM = 0, JS_PARKED, JS_RUNNING, JS_PRODUCING, JS_DONEWRITE };

typedef struct job_rec {
    struct job_rec *prev, *next;     /* all live records */
    int kind, state;
    int32_t partition;
    int64_t offset;
    int32_t schema_id;               /* Confluent id of the input, -1 = bare */
    sl_job job;
    int32_t *prompt;
    int n_prompt;
    uint64_t seed;
    int32_t *tokens;
    float *logprobs;
    int n_tokens, cap_tokens;
    sl_textdec text;
    int has_text;
    size_t chunk_text_sent;
    int chunk_tok_sent;
    int in_claimq, in_doneq;         /* queued for a claim round / a done write */
    int chunk_seq;
    int stop_hit;                    /* a stop string matched: later tokens are dropped */
    int finish_sent;                 /* an early finish was sent to the engine */
    sl_finish_reason forced;         /* the reason of that finish */
    int in_engine;                   /* the engine thread holds this pointer as a tag */
    int in_producer;                 /* a produce of this record awaits its delivery report */
    int abandoned;                   /* handed back (revoke, shutdown): free once released */
    int claimed;                     /* the Redis claim succeeded (release on hand-back) */
    double t_recv, t_admit, next_check;
    double t_claimed, t_finished, t_delivered;   /* stage profile */
    double ttft_ms, decode_ms;
    uint8_t *result;                 /* bare Avro Result (Redis copy) */
    size_t result_len;
    int failed, tokens_out;
    int produce_tries;
    char *reply_error;               /* the reply_topic failed for good: the result goes to topic.results */
    uint8_t *small;                  /* the Result is over Kafka's message limit: this ERROR Result instead */
    size_t small_len;
    struct dlq_msg *dlq;             /* JK_DLQ: what to write (kept until delivered) */
    /* one job id is computed once at a time here: the first record of an id is its leader (in w->ids);
     * later records of the same payload follow it and re-emit its Result */
    uint64_t digest;                 /* FNV-1a 64 of the unframed Avro payload */
    char digest_hex[17];
    int in_ids;
    struct job_rec *id_next;         /* chain in w->ids */
    struct job_rec *leader;          /* a follower: the record computing this id */
    struct job_rec *followers, *next_follower;
    uint8_t *raw, *raw_key;          /* the message, while the job may still go to the DLQ (claim stage) */
    size_t raw_len, raw_key_len;
} job_rec;

/* A DLQ record's message, owned by its job_rec, so a failed write can be retried. value/key hold at
 * most the producer's message limit of the original bytes; orig_* are the original sizes. */
struct dlq_msg {
    uint8_t *value, *key;
    size_t value_len, key_len;
    size_t orig_value_len, orig_key_len;
    size_t limit;                    /* bytes a DLQ message may take: the producer's limit, halved on each
                                        refusal for size by the broker */
    char *error, *cls, *topic;
    char partition[16], offset[24];
};

/* A latency histogram in seconds (metrics.c holds the bucket bounds). One writer (the consumer
 * thread); /metrics reads it from its own thread and derives _count and +Inf from the buckets, so a
 * scrape is always self-consistent. */
enum { LAT_BUCKETS = 20 };
typedef struct {
    _Atomic uint64_t n[LAT_BUCKETS + 1];   /* per bucket (not cumulative); the last one is +Inf */
    _Atomic uint64_t sum_ns;
} lat_hist;
void lat_observe(lat_hist *h, double seconds);   /* metrics.c */

/* One partition's consumer lag, from librdkafka's statistics. */
typedef struct {
    char *topic;
    int32_t partition;
    int64_t lag;
} part_lag;

typedef struct {
    _Atomic uint64_t consumed, dlq, results, reemitted, parked, tokens, cancelled, expired, errors;
    _Atomic uint64_t redis_retries, produce_retries, handed_back, paused;
    _Atomic int64_t inflight, pending;
    _Atomic uint64_t loop_ms_epoch;  /* last main-loop tick (ms, for /healthz); 0 = not started */
    /* per delivered job (JK_JOB): consumed -> admitted to the engine; engine submit -> first token;
     * decode time per token after the first; consumed -> Result delivery report; that less the
     * engine's time (ttft + decode) */
    lat_hist queue_wait, ttft, tpot, e2e, added;
    /* readiness (/readyz), written by the consumer thread */
    _Atomic int model_loaded, kafka_up, group_joined, redis_up, draining;
    _Atomic int64_t assigned;        /* partitions assigned to this worker */
    pthread_mutex_t mu;              /* guards lag and kafka_reason */
    part_lag *lag;
    int n_lag;
    char kafka_reason[256];          /* the last reason a broker could not be reached */
} worker_metrics;

typedef struct worker worker;

struct worker {
    cfg *cfg;
    char worker_id[128];
    int framing;
    int32_t *schema_ids;
    int n_schema_ids;
    int64_t max_bytes;
    int64_t produce_max;             /* the producer's message.max.bytes (DLQ copies are cut to fit it) */
    int max_tokens_limit;
    const char *topic_jobs, *topic_results, *topic_chunks, *topic_dlq;
    int32_t result_schema_id, chunk_schema_id;

    rd_kafka_t *consumer, *producer;
    rd_kafka_topic_t *warm_topics[3];   /* results, chunks, DLQ: their metadata is fetched at start */
    double kafka_down_since;         /* no broker reachable since (ms), 0 = reachable */
    double next_unreachable_log;
    int kafka_ever_up;
    rd_kafka_topic_partition_list_t *assigned;
    int paused;
    int topic_missing;               /* the jobs topic was reported missing or refused: metadata re-checked */
    double next_topic_check;
    sl_redis *redis;
    sl_codec *codec;
    sl_registry *registry;           /* schema.registry.url set: writer schemas of framed jobs by id */
    sl_engine *engine;
    const sl_model_info *info;
    sl_textcodec *tc;                /* NULL: no text support (token-id prompts only) */
    char tc_err[320];                /* why tc is NULL */
    eng_thread *eng;
    offset_tracker offs;
    int wake_rd, wake_wr;

    job_rec *head;                   /* list of live records */
    job_rec **ids;                   /* leaders by job id (hash chains) */
    size_t ids_cap, n_ids;
    int64_t n_inflight;              /* CLAIM + RUNNING */
    job_rec **claimq;                /* records waiting for a claim round */
    int n_claimq, cap_claimq;
    job_rec **doneq;                 /* delivered results waiting for the Redis done write */
    int n_doneq, cap_doneq;
    eng_cmd *cmds;                   /* commands for the engine, sent once per loop */
    int n_cmds, cap_cmds;

    int64_t max_inflight, max_pending;
    int n_produce_failed;            /* results whose produce call failed, retried from the timers */
    int64_t *store_off;              /* per partition: offset to store at the end of this loop round */
    int n_store_off;
    struct stage_prof *prof;
    int draining;
    double next_sweep, next_renew, next_parked, next_heartbeat, next_redis_retry;
    worker_metrics m;
    int verbose;

    /* set before wk_setup (cli/sluice_worker.c: wj_on_delivery, wj_revoke); called from librdkafka's
     * callbacks on the consumer thread, inside rd_kafka_poll / rd_kafka_consumer_poll / rd_kafka_flush */
    void (*on_delivery)(worker *w, job_rec *r, rd_kafka_resp_err_t err);   /* r: the produce's opaque */
    void (*on_revoke)(worker *w, const rd_kafka_topic_partition_list_t *parts, int lost);   /* before unassign */
};

double now_ms(void);                 /* CLOCK_MONOTONIC */
int64_t wall_ms(void);               /* CLOCK_REALTIME (deadlines) */
void wlog(worker *w, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
enum { L_ERROR = 0, L_WARN, L_INFO, L_DEBUG };

/* worker_kafka.c (never calls wj_*) */
int wk_setup(worker *w, char *err, size_t errlen);   /* needs w->on_delivery and w->on_revoke */
void wk_close(worker *w);
/* Produce a record's result (framed like its input) to its reply topic or topic.results. Returns
 * WK_TOO_LARGE, having produced nothing, when the Result is over the producer's message.max.bytes and
 * r->small is not set yet (the caller sets r->small and calls again); else 0: produced, or left to the
 * timers' retry (wk_retry_later). */
enum { WK_TOO_LARGE = 1 };
int wk_produce_result(worker *w, job_rec *r);
/* Produce a JK_DLQ record's message to the DLQ with the error headers; it completes on its delivery report.
 * Original bytes that do not fit the message limit are cut, with headers sluice.dlq.truncated=true,
 * sluice.original.size (value bytes) and sluice.original.key.size. */
void wk_produce_dlq(worker *w, job_rec *r);
/* A DLQ delivery failed: retried from the timers; a refusal for size first halves the message's limit. */
void wk_dlq_failed(worker *w, job_rec *r, rd_kafka_resp_err_t err);
/* Headroom above input.max_bytes for a DLQ copy's headers and record framing. */
enum { DLQ_HEADROOM = 16384 };
void wk_retry_later(worker *w, job_rec *r);   /* a produce or DLQ delivery failed: the timers try again in 0.5 s */
int wk_reply_topic_failed(rd_kafka_resp_err_t err);   /* a delivery error the reply topic will not recover from */
void wk_reply_fallback(worker *w, job_rec *r, rd_kafka_resp_err_t err);   /* result -> topic.results + reason */
void wk_produce_chunk(worker *w, job_rec *r, int done);   /* fire-and-forget */
void wk_pause_all(worker *w, int pause);
/* A consumer error: notes a missing or refused jobs topic (see wk_topic_check). */
void wk_consumer_error(worker *w, const rd_kafka_message_t *m);
/* While the jobs topic is missing or refused and nothing is assigned: ask for the cluster's metadata
 * once a second, so the group sees the topic within seconds of its return (librdkafka by itself looks
 * again only every topic.metadata.refresh.interval.ms, 5 minutes by default). */
void wk_topic_check(worker *w);
void wk_store_offset(worker *w, int32_t partition, int64_t offset);   /* batched ... */
void wk_flush_offsets(worker *w);                                      /* ... stored here */
/* Called each main-loop round: while no broker has answered for 10 s, one line `cannot reach Kafka
 * brokers X for N s: <reason>`, at most once a minute. Returns -1 (having logged that line) when
 * kafka.startup_timeout_ms > 0 passed without any broker ever answering: the worker exits 1. */
int wk_check_reachable(worker *w, double now);

/* worker_jobs.c */
void wj_on_message(worker *w, rd_kafka_message_t *m);
/* A decoded job's checks (ids, prompt, limits, sampling, stop, deadline, reply topic); a text or chat prompt
 * is tokenised into *prompt (malloc'd; free it on both outcomes). 0, or -1 with one line naming the field. */
int wj_validate(worker *w, sl_job *j, int32_t **prompt, int *n_prompt, char *err, size_t errlen);
void wj_claim_round(worker *w, int parked_only);
void wj_engine_events(worker *w);
void wj_on_delivery(worker *w, job_rec *r, rd_kafka_resp_err_t err);
void wj_flush_done(worker *w);
void wj_timers(worker *w);
void wj_send_cmds(worker *w);
void wj_revoke(worker *w, const rd_kafka_topic_partition_list_t *parts, int lost);
void wj_hand_back_all(worker *w);
void wj_drop_parked(worker *w);      /* drain start: jobs another worker holds are not ours to wait for */
void wj_free_all(worker *w);
int wj_live(worker *w);              /* records not yet released */
int wj_undelivered(worker *w);       /* ... less those whose Result is delivered (waiting for Redis done) */
/* Drain end: release the offsets of delivered Results whose Redis done write has not succeeded (Redis
 * down): the Result is in Kafka, so the job is not handed back to be computed again. Returns how many. */
int wj_release_delivered(worker *w);
/* Stage profile of released jobs (consume -> claim -> engine finish -> delivery -> Redis done). */
void wj_profile_print(worker *w);

#endif
