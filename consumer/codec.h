/* codec.h — Avro codec for the three sluice schemas (schemas/{job,result,token_chunk}.avsc, compiled in) using avro-c.
 *
 * Framing: Confluent wire format = byte 0 (magic 0), 4-byte big-endian schema id, Avro binary; or bare
 * Avro binary. Decoding is hardened for hostile input: the caller caps the message size, and
 * codec_init() installs a capping allocator (avro_set_allocator) so that a forged length cannot make
 * avro-c allocate more than `max_alloc` bytes at once; trailing bytes after a record are an error.
 * avro-c keeps its last error process-wide (avro_strerror), so a codec is used by ONE thread only
 * (the worker's consumer thread; sluice-submit's main thread).
 *
 * Decoded jobs own their memory (job_free). Strings are NUL-terminated; prompt text, stop strings and
 * message texts also carry their byte length (Avro strings may contain U+0000).
 *
 * Schema evolution: Job and Result gained fields at their end (Job: messages, thinking; Result: content,
 * reasoning_content), each with a default. Bytes written with the earlier schemas (schemas/v1/) end where
 * those fields would begin, so they decode here with the defaults; what is encoded here always has the
 * fields. A reader holding the earlier schema reads these bytes with Avro schema resolution (or, being at
 * the end, by reading the fields it knows and ignoring the rest). Jobs written with any other schema that
 * resolves to this one (a schema registry's, job_resolver.h) decode with codec_decode_job_resolved.
 */
#ifndef SLUICE_CODEC_H
#define SLUICE_CODEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *role;
    char *content;
    size_t content_len;
    char *reasoning_content;         /* NULL = null */
    size_t reasoning_content_len;
} sl_job_message;

typedef struct {
    char *id;
    size_t id_len;                   /* bytes (the id may hold U+0000; validation refuses that) */
    int prompt_is_text;
    char *prompt_text;               /* prompt_is_text */
    size_t prompt_text_len;
    int32_t *prompt_ids;             /* !prompt_is_text */
    int n_prompt_ids;
    int32_t max_tokens;
    char *tenant;
    float temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
    int has_seed;
    int64_t seed;
    char **stop;                     /* stop strings */
    size_t *stop_len;
    int n_stop;
    int32_t *stop_ids;
    int n_stop_ids;
    int ignore_eos, logprobs, stream;
    int32_t priority;
    int has_deadline;
    int64_t deadline_ms;             /* absolute Unix time in ms */
    char *reply_topic;               /* NULL = default results topic */
    char **meta_k, **meta_v;
    int n_meta;
    sl_job_message *messages;        /* a chat job when n_messages > 0 (its prompt is then empty) */
    int n_messages;
    int thinking;                    /* chat: let the model reason first (DeepSeek's thinking mode) */
} sl_job;

typedef enum { RS_OK = 0, RS_ERROR, RS_EXPIRED, RS_CANCELLED } sl_result_status;
typedef enum { RF_STOP = 0, RF_LENGTH, RF_ERROR, RF_EXPIRED, RF_CANCELLED } sl_result_finish;

typedef struct {
    const char *id;
    sl_result_status status;
    sl_result_finish finish;
    const int32_t *tokens;
    int n_tokens;
    const char *text;                /* NULL = null */
    size_t text_len;
    const float *logprobs;
    int n_logprobs;
    const char *error;               /* NULL = null */
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    double queue_ms, ttft_ms, decode_ms;
    const char *worker, *model;
    const char *const *meta_k, *const *meta_v;
    int n_meta;
    const char *content;             /* chat jobs: the answer; NULL = null */
    size_t content_len;
    const char *reasoning_content;   /* chat jobs with thinking: the reasoning; NULL = null */
    size_t reasoning_content_len;
} sl_result;

/* A decoded Result with its own storage (codec_decode_result). */
typedef struct {
    sl_result r;
    void *mem;                       /* everything r points to */
} sl_result_owned;

typedef struct {
    const char *id;
    int32_t seq;
    const int32_t *tokens;
    int n_tokens;
    const char *text;                /* NULL = null */
    size_t text_len;
    int done;
} sl_chunk;

typedef struct sl_codec sl_codec;

/* Process-wide: install the capping allocator (call once, before any other avro-c use). */
void codec_install_allocator(size_t max_alloc);
int codec_new(sl_codec **out, char *err, size_t errlen);
void codec_free(sl_codec *c);

/* Framing. framing: 0 auto, 1 confluent, 2 bare. On success payload, plen hold the Avro part and
 * *schema_id is the Confluent id or -1 for bare. Errors: empty, short header, bad magic byte. */
enum { FRAMING_AUTO = 0, FRAMING_CONFLUENT = 1, FRAMING_BARE = 2 };
int codec_unframe(const void *buf, size_t len, int framing, const uint8_t **payload, size_t *plen,
                  int32_t *schema_id, char *err, size_t errlen);

/* Decode one bare Avro Job (current schema, or the v1 layout); -1 with err on undecodable bytes or
 * trailing bytes. */
int codec_decode_job(sl_codec *c, const void *buf, size_t len, sl_job *job, char *err, size_t errlen);
void job_free(sl_job *job);
/* Decode one bare Avro Job written with the writer schema r was made for (job_resolver.h: Avro schema
 * resolution into the worker's Job schema, defaults for the fields the writer lacks); -1 with err. */
typedef struct sl_job_resolver sl_job_resolver;
int codec_decode_job_resolved(sl_codec *c, sl_job_resolver *r, const void *buf, size_t len, sl_job *job, char *err,
                              size_t errlen);

/* Encode into a malloc'ed buffer; schema_id >= 0 adds Confluent framing. 0 or -1 with err. */
int codec_encode_job(sl_codec *c, const sl_job *job, int32_t schema_id, uint8_t **out, size_t *outlen,
                     char *err, size_t errlen);
int codec_encode_result(sl_codec *c, const sl_result *r, int32_t schema_id, uint8_t **out, size_t *outlen,
                        char *err, size_t errlen);
int codec_encode_chunk(sl_codec *c, const sl_chunk *ch, int32_t schema_id, uint8_t **out, size_t *outlen,
                       char *err, size_t errlen);
/* Decode a bare Avro Result, current schema or the v1 layout (sluice-submit, tests). */
int codec_decode_result(sl_codec *c, const void *buf, size_t len, sl_result_owned *out, char *err,
                        size_t errlen);
void result_owned_free(sl_result_owned *r);
int codec_decode_chunk(sl_codec *c, const void *buf, size_t len, sl_chunk *out, void **mem, char *err,
                       size_t errlen);
void codec_chunk_mem_free(void *mem);   /* frees what a decoded chunk points to */

const char *result_status_name(sl_result_status s);
const char *result_finish_name(sl_result_finish f);

#endif
