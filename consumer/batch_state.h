/* batch_state.h — an OpenAI batch's state in Redis (for sluice-batch).
 *
 * Keys (prefix default "sluice:", as the workers'):
 *   batch:<id>      hash: status (validating | in_progress | cancelling | completed | cancelled), total,
 *                   completed, failed, created_at, in_progress_at, completed_at, cancelling_at,
 *                   cancelled_at (Unix s), lines, input_file, input_digest, max_tokens, ttl, the three topics,
 *                   start:<topic>:<partition> (submit's end offsets), pos:<topic>:<partition> (collect's
 *                   checkpoint), output_file / error_file once written
 *   batch:<id>:out  hash: line number -> "o" + output line | "e" + error line
 * Both live --ttl seconds (7 days by default). Line N of the input file is the job "<id>-N"; of the
 * workers' keys, cancel:<job id> is set here (batch_cancel_jobs) and result:<job id> read (a Result too
 * large for Kafka).
 *
 * Every outcome and every status change is one call of ONE Lua script, so the counts and the status move
 * together: validating -> in_progress once submit has sent everything (batch_start), -> cancelling on a
 * cancel, -> completed (or cancelled, when a cancel came first) once completed + failed reach total.
 *
 * Crash safety: each outcome is stored with HSETNX on its line number, and the counters move in the same
 * script only when the field is new, so a Result read twice (a re-emitted duplicate, or one read again
 * after a crash) counts once. The caller checkpoints a consumer position only after every message below
 * it is stored, and a checkpoint is only ever raised: a reader that starts from batch_resume_offset() after
 * a crash loses nothing, and what it reads again counts once.
 *
 * Every Redis error ends the program (a message on stderr, exit 1): every call here is safe to redo, so
 * the command is simply run again.
 */
#ifndef SLUICE_BATCH_STATE_H
#define SLUICE_BATCH_STATE_H

#include <stddef.h>
#include <stdint.h>

struct redisContext;

/* "sluice-batch: " + the message on stderr, then exit 1 (the program's one way out on an error). */
void batch_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

typedef struct {
    struct redisContext *rc;
    const char *prefix;              /* the workers' redis.prefix */
    char id[72];                     /* batch id */
    char key[160], out_key[168];     /* <prefix>batch:<id>, <prefix>batch:<id>:out */
    char topics[2][256];             /* results, dlq (batch_load, batch_create) */
} batch_state;

/* Connect to url (redis://host:port[/db]; credentials from SLUICE_REDIS_PASSWORD and SLUICE_REDIS_USER)
 * for the batch id under prefix (at most 64 bytes, kept by pointer). batch_state_close() frees the
 * connection. */
void batch_state_open(batch_state *s, const char *url, const char *prefix, const char *id);
void batch_state_close(batch_state *s);

/* Open an existing batch (collect, status, cancel): its topics; the program ends when there is none. */
void batch_load(batch_state *s);

/* A field of the batch hash as a malloc'ed string (NULL when absent), or as a number (dflt when absent). */
char *batch_hget(batch_state *s, const char *field);
long long batch_hget_ll(batch_state *s, const char *field, long long dflt);

/* The job id "<id>-<line>" and the "batch_req_..." id of a line; the line of a job id of this batch (key,
 * len bytes), or -1. */
void batch_job_id(const batch_state *s, long line, char *out, size_t n);
void batch_req_id(const batch_state *s, long line, char *out, size_t n);
long batch_line_of(const batch_state *s, const char *key, size_t len);

/* submit: a new batch (status validating), or, when the batch exists (a file sent again under its id),
 * a check that it came from the same file (digest) and topics, the program ending when not; *max_tokens
 * becomes the batch's. Either way the hash lives ttl_s seconds more and s->topics are set. Returns 1
 * when the batch existed, 0 when it is new. */
int batch_create(batch_state *s, const char *input_file, const char *digest, int *max_tokens, int ttl_s,
                 const char *jobs_topic, const char *results_topic, const char *dlq_topic);

/* submit: where topic[partition] ended before the first job was sent (a first submit's stands). */
void batch_record_start(batch_state *s, const char *topic, int partition, int64_t offset);

/* submit: everything is sent (total requests in lines lines): validating -> in_progress, the status
 * after it in st, and the out hash lives ttl_s seconds. */
void batch_start(batch_state *s, long total, long lines, int ttl_s, char *st, size_t stlen);

/* Each of these copies the batch's status, after the call, into st (stlen bytes). */

/* Store a line's outcome: kind 'o' (completed) or 'e' (failed); json is the line. */
void batch_store_outcome(batch_state *s, long line, char kind, const char *json, char *st, size_t stlen);
/* The status, finishing the batch when its counts are complete (another process may have moved them). */
void batch_check(batch_state *s, char *st, size_t stlen);
/* validating | in_progress -> cancelling. */
void batch_cancel(batch_state *s, char *st, size_t stlen);

/* Set the workers' cancel key of every job of the batch that has no outcome yet; returns how many. */
long batch_cancel_jobs(batch_state *s);

/* Where to read topic[partition] from: collect's checkpoint when it is past submit's end offset, else
 * that end offset (no_start when submit recorded none: a partition added since). */
int64_t batch_resume_offset(batch_state *s, const char *topic, int partition, int64_t no_start);

/* Checkpoint topic[partition] at next: every message below it is stored. */
void batch_checkpoint(batch_state *s, const char *topic, int partition, int64_t next);

typedef struct {
    long line;
    char *v;                         /* "o" + output line | "e" + error line */
} batch_outcome;

/* Every stored outcome once, in input line order (*n of them); batch_outcomes_free() frees them. */
batch_outcome *batch_outcomes(batch_state *s, size_t *n);
void batch_outcomes_free(batch_outcome *v, size_t n);

/* Record the output and error files once written. */
void batch_set_files(batch_state *s, const char *output, const char *errors);

/* The whole Result a worker stored for job_id (malloc'ed, *len bytes), NULL when there is none. */
char *batch_full_result(batch_state *s, const char *job_id, size_t *len);

#endif
