/* batch_request.h — OpenAI Batch API lines <-> sluice Jobs and Results (for sluice-batch).
 *
 * An input line is {"custom_id": S, "method": "POST", "url": "/v1/chat/completions" | "/v1/completions",
 * "body": {...}}. The body becomes one Job: a chat body's `messages` go to the Job as messages (the
 * worker renders them with the model's chat encoding), a completion body's `prompt` as the prompt text
 * (or token ids). Sampling: max_tokens / max_completion_tokens (default: the caller's), temperature
 * (default 1, as OpenAI's), top_p, stop (a string or up to 4), seed; n, best_of, logprobs, echo,
 * penalties, response_format and the like only at their neutral value; anything else (tools, ...) is an
 * error naming the parameter. DeepSeek's `thinking` ({"type": "enabled"} or a boolean) turns on
 * thinking mode for a chat body. `body.model` is recorded, not checked.
 *
 * The Job carries what the output line needs in its metadata, which the worker echoes in the Result
 * (and which a DLQ copy keeps): batch.custom_id, batch.endpoint, batch.model.
 *
 * Output and error lines are OpenAI's: {"id", "custom_id", "response": {"status_code", "request_id",
 * "body"} or null, "error": {"code", "message"} or null}.
 */
#ifndef SLUICE_BATCH_REQUEST_H
#define SLUICE_BATCH_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"

#define BATCH_CHAT_URL "/v1/chat/completions"
#define BATCH_COMPLETION_URL "/v1/completions"

typedef struct {
    char *custom_id;                 /* NULL when the line has none that can be read */
    sl_job job;                      /* valid when batch_parse_line returned 0 (id not set) */
    /* when it returned -1: */
    int status_code;                 /* 400 for a body that is not valid, 0 for a line that is not a request */
    char code[40];                   /* "invalid_json", "invalid_url", "invalid_request", "unsupported_parameter" */
    char param[64];                  /* the parameter at fault, "" when none */
    char message[512];
} batch_request;

/* Parse one input line (len bytes, no newline) into req. default_max_tokens applies when the body gives
 * neither max_tokens nor max_completion_tokens. 0 = req->job is ready (id still NULL); -1 = the line is
 * an error (code, message, maybe custom_id). batch_request_free() either way. */
int batch_parse_line(const char *line, size_t len, int default_max_tokens, batch_request *req);
void batch_request_free(batch_request *req);

/* One output line (malloc'ed JSON, no newline) for a Result with status OK. req_id = the line's
 * "batch_req_..." id, created = Unix seconds. */
char *batch_output_line(const char *req_id, const sl_result *r, int64_t created);

/* One error line (malloc'ed JSON, no newline). status_code 0 = "response": null; else the response
 * carries {"error": {message, type, param, code}} in its body. custom_id, request_id, param: NULL or ""
 * = null. */
char *batch_error_line(const char *req_id, const char *custom_id, int status_code, const char *request_id,
                       const char *code, const char *message, const char *param);

/* A Job's or a Result's metadata value (NULL when absent). */
const char *batch_meta(const char *const *k, const char *const *v, int n, const char *key);

#endif
