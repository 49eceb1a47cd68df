/* batch_request.c — see batch_request.h. */
#include "batch_request.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUSTOM_ID_MAX 512            /* bytes; OpenAI's ids are far shorter */

static int fail(batch_request *q, int status, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->message, sizeof(q->message), fmt, ap);
    va_end(ap);
    q->status_code = status;
    snprintf(q->code, sizeof(q->code), "%s", code);
    snprintf(q->param, sizeof(q->param), "%s", param ? param : "");
    return -1;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) abort();
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void add_meta(sl_job *j, const char *k, const char *v) {
    j->meta_k = realloc(j->meta_k, (size_t)(j->n_meta + 1) * sizeof(char *));
    j->meta_v = realloc(j->meta_v, (size_t)(j->n_meta + 1) * sizeof(char *));
    if (!j->meta_k || !j->meta_v) abort();
    j->meta_k[j->n_meta] = dupn(k, strlen(k));
    j->meta_v[j->n_meta++] = dupn(v, strlen(v));
}

/* A value that asks for nothing: absent, null, false, 0, "", {} or []. */
static int neutral(const json_t *v) {
    return !v || json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0) ||
           (json_is_string(v) && json_string_length(v) == 0) || (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

// ---------------------------------------------------------------- body parts

/* A message's content: a string, or an array of {"type": "text", "text": S} parts (joined by "\n", as
 * vLLM does), or null for an assistant turn. Sets *out (malloc'ed) and *len. */
static int message_content(batch_request *q, size_t i, const char *role, json_t *c, char **out, size_t *len) {
    if (json_is_string(c)) {
        *len = json_string_length(c);
        *out = dupn(json_string_value(c), *len);
        return 0;
    }
    if (json_is_null(c) && !strcmp(role, "assistant")) {
        *len = 0;
        *out = dupn("", 0);
        return 0;
    }
    if (!json_is_array(c))
        return fail(q, 400, "invalid_request", "messages", "messages[%zu].content: must be a string or an array of "
                    "text parts", i);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
            return fail(q, 400, "unsupported_parameter", "messages",
                        "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported", i,
                        k);
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total + 1), *p = s;
    if (!s) abort();
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        if (k > 0) *p++ = '\n';
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *p = 0;
    *out = s;
    *len = (size_t)(p - s);
    return 0;
}

static int parse_messages(batch_request *q, json_t *msgs) {
    sl_job *j = &q->job;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail(q, 400, "invalid_request", "messages", "messages: must be a non-empty array of messages");
    size_t n = json_array_size(msgs), i;
    j->messages = calloc(n, sizeof(sl_job_message));
    if (!j->messages) abort();
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) return fail(q, 400, "invalid_request", "messages", "messages[%zu]: must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return fail(q, 400, "invalid_request", "messages", "messages[%zu].role: must be a string", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer"))
            return fail(q, 400, "unsupported_parameter", "messages",
                        "messages[%zu].role: '%s' is not supported (system, user, assistant, developer)", i, r);
        static const char *const no_tools[] = {"tool_calls", "function_call", "tool_call_id"};
        for (size_t t = 0; t < sizeof(no_tools) / sizeof(*no_tools); t++)
            if (!neutral(json_object_get(m, no_tools[t])))
                return fail(q, 400, "unsupported_parameter", "messages",
                            "messages[%zu].%s: tool calls are not supported", i, no_tools[t]);
        json_t *rc = json_object_get(m, "reasoning_content");
        if (rc && !json_is_null(rc) && !json_is_string(rc))
            return fail(q, 400, "invalid_request", "messages",
                        "messages[%zu].reasoning_content: must be a string or null", i);
        sl_job_message *jm = &j->messages[i];
        jm->role = dupn(r, strlen(r));
        j->n_messages = (int)i + 1;
        if (message_content(q, i, r, json_object_get(m, "content"), &jm->content, &jm->content_len)) return -1;
        if (json_is_string(rc)) {
            jm->reasoning_content_len = json_string_length(rc);
            jm->reasoning_content = dupn(json_string_value(rc), jm->reasoning_content_len);
        }
    }
    const char *last = j->messages[n - 1].role;
    if (strcmp(last, "user") && strcmp(last, "developer"))
        return fail(q, 400, "invalid_request", "messages", "messages: the last message must be the user's, not "
                    "the %s's", last);
    j->prompt_is_text = 1;   /* a chat job's prompt is empty */
    j->prompt_text = dupn("", 0);
    return 0;
}

/* A completion prompt: a string, one string in an array, token ids, or one array of token ids. */
static int parse_prompt(batch_request *q, json_t *p) {
    sl_job *j = &q->job;
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    else if (json_is_array(p) && json_array_size(p) > 1 && !json_is_integer(json_array_get(p, 0)))
        return fail(q, 400, "unsupported_parameter", "prompt",
                    "prompt: a list of %zu prompts is not supported; send one prompt per request", json_array_size(p));
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return fail(q, 400, "invalid_request", "prompt", "prompt: empty");
        j->prompt_is_text = 1;
        j->prompt_text_len = json_string_length(p);
        j->prompt_text = dupn(json_string_value(p), j->prompt_text_len);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return fail(q, 400, "invalid_request", "prompt", "prompt: must be a non-empty string or an array of token ids");
    size_t n = json_array_size(p), i;
    j->prompt_ids = malloc(n * sizeof(int32_t));
    if (!j->prompt_ids) abort();
    json_t *t;
    json_array_foreach(p, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return fail(q, 400, "invalid_request", "prompt", "prompt[%zu]: a token id must be an integer >= 0", i);
        j->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    j->n_prompt_ids = (int)n;
    return 0;
}

static int parse_stop(batch_request *q, json_t *v) {
    sl_job *j = &q->job;
    if (json_is_null(v)) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if ((!json_is_string(v) && !json_is_array(v)) || n > 4)
        return fail(q, 400, "invalid_request", "stop", "stop: must be a string or an array of up to 4 strings");
    j->stop = calloc(n + 1, sizeof(char *));
    j->stop_len = calloc(n + 1, sizeof(size_t));
    if (!j->stop || !j->stop_len) abort();
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return fail(q, 400, "invalid_request", "stop", "stop: must be non-empty strings");
        j->stop_len[i] = json_string_length(s);
        j->stop[i] = dupn(json_string_value(s), j->stop_len[i]);
        j->n_stop = (int)i + 1;
    }
    return 0;
}

static int parse_max_tokens(batch_request *q, const char *key, json_t *v, int32_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
        return fail(q, 400, "invalid_request", key, "%s: must be a positive integer", key);
    *out = (int32_t)json_integer_value(v);
    return 0;
}

// ---------------------------------------------------------------- the body

/* Parameters taken at their neutral value only (null, false, 0, "", {}): what asks for more is refused. */
static const char *const NEUTRAL_ONLY[] = {"stream", "logprobs", "top_logprobs", "echo", "suffix", "presence_penalty",
                                           "frequency_penalty", "logit_bias", "stream_options"};
/* Accepted and ignored: they change nothing about the completion. */
static const char *const IGNORED[] = {"user", "metadata", "store", "service_tier", "parallel_tool_calls"};

static int in_list(const char *k, const char *const *l, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i])) return 1;
    return 0;
}

static int parse_body(batch_request *q, json_t *body, int chat, int default_max_tokens) {
    sl_job *j = &q->job;
    j->temperature = 1.0f;   /* OpenAI's default */
    j->top_p = 1.0f;
    j->repetition_penalty = 1.0f;
    j->max_tokens = default_max_tokens;
    int32_t mt = 0, mct = 0;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (!strcmp(key, "model")) {
            if (!json_is_string(v)) return fail(q, 400, "invalid_request", "model", "model: must be a string");
        } else if (!strcmp(key, "messages") && chat) {
            if (parse_messages(q, v)) return -1;
        } else if (!strcmp(key, "prompt") && !chat) {
            if (parse_prompt(q, v)) return -1;
        } else if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
            if (!json_is_null(v) && parse_max_tokens(q, key, v, key[4] == 't' ? &mt : &mct)) return -1;
        } else if (!strcmp(key, "temperature")) {
            if (json_is_null(v)) continue;
            if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 2)
                return fail(q, 400, "invalid_request", key, "temperature: must be a number in [0, 2]");
            j->temperature = (float)json_number_value(v);
        } else if (!strcmp(key, "top_p")) {
            if (json_is_null(v)) continue;
            if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1)
                return fail(q, 400, "invalid_request", key, "top_p: must be a number in (0, 1]");
            j->top_p = (float)json_number_value(v);
        } else if (!strcmp(key, "stop")) {
            if (parse_stop(q, v)) return -1;
        } else if (!strcmp(key, "seed")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v)) return fail(q, 400, "invalid_request", key, "seed: must be an integer");
            j->has_seed = 1;
            j->seed = json_integer_value(v);
        } else if (!strcmp(key, "n") || !strcmp(key, "best_of")) {
            if (!json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
                return fail(q, 400, "unsupported_parameter", key,
                            "%s: only 1 is supported; send one request per completion", key);
        } else if (!strcmp(key, "thinking") && chat) {   /* DeepSeek: {"type": "enabled"|"disabled"} */
            json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
            if (json_is_boolean(v)) j->thinking = json_is_true(v);
            else if (json_is_string(t) && !strcmp(json_string_value(t), "enabled")) j->thinking = 1;
            else if (!json_is_null(v) && !(json_is_string(t) && !strcmp(json_string_value(t), "disabled")))
                return fail(q, 400, "invalid_request", key, "thinking: must be {\"type\": \"enabled\"|\"disabled\"}");
        } else if (!strcmp(key, "response_format")) {
            json_t *t = json_object_get(v, "type");
            if (!json_is_null(v) && !(json_is_string(t) && !strcmp(json_string_value(t), "text")))
                return fail(q, 400, "unsupported_parameter", key, "response_format: only {\"type\": \"text\"} is "
                            "supported");
        } else if (in_list(key, NEUTRAL_ONLY, sizeof(NEUTRAL_ONLY) / sizeof(*NEUTRAL_ONLY))) {
            if (!neutral(v)) return fail(q, 400, "unsupported_parameter", key, "%s: is not supported", key);
        } else if (!in_list(key, IGNORED, sizeof(IGNORED) / sizeof(*IGNORED))) {
            return fail(q, 400, "unsupported_parameter", key, "%s: is not a supported parameter of %s", key,
                        chat ? BATCH_CHAT_URL : BATCH_COMPLETION_URL);
        }
    }
    if (chat && j->n_messages == 0)
        return fail(q, 400, "invalid_request", "messages", "messages: missing (a chat completion needs messages)");
    if (!chat && !j->prompt_text && !j->prompt_ids)
        return fail(q, 400, "invalid_request", "prompt", "prompt: missing");
    if (mt && mct && mt != mct)
        return fail(q, 400, "invalid_request", "max_tokens", "max_tokens and max_completion_tokens differ (%d, %d)",
                    (int)mt, (int)mct);
    if (mct) j->max_tokens = mct;
    else if (mt) j->max_tokens = mt;
    json_t *model = json_object_get(body, "model");
    add_meta(j, "batch.custom_id", q->custom_id);
    add_meta(j, "batch.endpoint", chat ? BATCH_CHAT_URL : BATCH_COMPLETION_URL);
    if (json_is_string(model)) add_meta(j, "batch.model", json_string_value(model));
    return 0;
}

int batch_parse_line(const char *line, size_t len, int default_max_tokens, batch_request *q) {
    memset(q, 0, sizeof(*q));
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) return fail(q, 0, "invalid_json", NULL, "not valid JSON: %s (column %d)", je.text, je.column);
    int rc = -1;
    json_t *cid = json_object_get(root, "custom_id"), *url = json_object_get(root, "url"),
           *method = json_object_get(root, "method"), *body = json_object_get(root, "body");
    if (!json_is_object(root)) {
        fail(q, 0, "invalid_json", NULL, "the line must be a JSON object");
    } else if (!json_is_string(cid) || json_string_length(cid) == 0 || json_string_length(cid) > CUSTOM_ID_MAX ||
               memchr(json_string_value(cid), 0, json_string_length(cid))) {
        fail(q, 0, "invalid_custom_id", "custom_id", "custom_id: must be a non-empty string of at most %d bytes "
             "without U+0000", CUSTOM_ID_MAX);
    } else if ((q->custom_id = dupn(json_string_value(cid), json_string_length(cid))),
               method && !(json_is_string(method) && !strcmp(json_string_value(method), "POST"))) {
        fail(q, 0, "invalid_method", "method", "method: must be \"POST\"");
    } else if (!json_is_string(url) || (strcmp(json_string_value(url), BATCH_CHAT_URL) &&
                                        strcmp(json_string_value(url), BATCH_COMPLETION_URL))) {
        fail(q, 0, "invalid_url", "url", "url: '%s' is not supported (%s or %s)",
             json_is_string(url) ? json_string_value(url) : "", BATCH_CHAT_URL, BATCH_COMPLETION_URL);
    } else if (!json_is_object(body)) {
        fail(q, 400, "invalid_request", "body", "body: must be an object");
    } else {
        rc = parse_body(q, body, !strcmp(json_string_value(url), BATCH_CHAT_URL), default_max_tokens);
    }
    json_decref(root);
    return rc;
}

void batch_request_free(batch_request *q) {
    free(q->custom_id);
    job_free(&q->job);
    memset(q, 0, sizeof(*q));
}

// ---------------------------------------------------------------- output lines

const char *batch_meta(const char *const *k, const char *const *v, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i], key)) return v[i];
    return NULL;
}

/* A JSON string, or null for NULL (or bytes jansson refuses: the worker's texts are valid UTF-8). */
static json_t *jstr(const char *s, size_t n) {
    json_t *v = s ? json_stringn(s, n) : NULL;
    return v ? v : json_null();
}

static json_t *jopt(const char *s) { return s && s[0] ? jstr(s, strlen(s)) : json_null(); }

static char *dump(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) abort();
    return s;
}

char *batch_output_line(const char *req_id, const sl_result *r, int64_t created) {
    const char *cid = batch_meta(r->meta_k, r->meta_v, r->n_meta, "batch.custom_id"),
               *endpoint = batch_meta(r->meta_k, r->meta_v, r->n_meta, "batch.endpoint"),
               *model = batch_meta(r->meta_k, r->meta_v, r->n_meta, "batch.model");
    int chat = endpoint && !strcmp(endpoint, BATCH_CHAT_URL);
    char id[320];
    snprintf(id, sizeof(id), "%s%s", chat ? "chatcmpl-" : "cmpl-", r->id);
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    if (chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", jstr(r->content, r->content_len));
        json_object_set_new(msg, "reasoning_content", jstr(r->reasoning_content, r->reasoning_content_len));
        json_object_set_new(choice, "message", msg);
    } else {
        json_object_set_new(choice, "text", r->text ? jstr(r->text, r->text_len) : json_string(""));
    }
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", json_string(r->finish == RF_LENGTH ? "length" : "stop"));
    json_t *usage = json_object();
    json_object_set_new(usage, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(usage, "completion_tokens", json_integer(r->completion_tokens));
    json_object_set_new(usage, "total_tokens", json_integer((json_int_t)r->prompt_tokens + r->completion_tokens));
    json_t *body = json_object();
    json_object_set_new(body, "id", json_string(id));
    json_object_set_new(body, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(body, "created", json_integer(created));
    json_object_set_new(body, "model", jopt(model ? model : r->model));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(body, "choices", choices);
    json_object_set_new(body, "usage", usage);
    json_t *resp = json_object();
    json_object_set_new(resp, "status_code", json_integer(200));
    json_object_set_new(resp, "request_id", jopt(r->id));
    json_object_set_new(resp, "body", body);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(req_id));
    json_object_set_new(o, "custom_id", jopt(cid));
    json_object_set_new(o, "response", resp);
    json_object_set_new(o, "error", json_null());
    return dump(o);
}

char *batch_error_line(const char *req_id, const char *custom_id, int status_code, const char *request_id,
                       const char *code, const char *message, const char *param) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(req_id));
    json_object_set_new(o, "custom_id", jopt(custom_id));
    if (status_code) {
        json_t *e = json_object(), *body = json_object(), *resp = json_object();
        json_object_set_new(e, "message", jopt(message));
        json_object_set_new(e, "type", json_string(status_code >= 500 ? "server_error" : "invalid_request_error"));
        json_object_set_new(e, "param", jopt(param));
        json_object_set_new(e, "code", jopt(code));
        json_object_set_new(body, "error", e);
        json_object_set_new(resp, "status_code", json_integer(status_code));
        json_object_set_new(resp, "request_id", jopt(request_id));
        json_object_set_new(resp, "body", body);
        json_object_set_new(o, "response", resp);
    } else {
        json_object_set_new(o, "response", json_null());
    }
    json_t *e = json_object();
    json_object_set_new(e, "code", jopt(code));
    json_object_set_new(e, "message", jopt(message));
    json_object_set_new(o, "error", e);
    return dump(o);
}
