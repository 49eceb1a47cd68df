/* chat.c — see chat.h. The steps follow encode_messages: merge consecutive user messages, drop earlier
 * turns' thinking (thinking on), render each message with what follows it. */
#include "chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_DEVELOPER };

static int role_of(const char *role) {
    if (!strcmp(role, "system")) return R_SYSTEM;
    if (!strcmp(role, "user")) return R_USER;
    if (!strcmp(role, "assistant")) return R_ASSISTANT;
    if (!strcmp(role, "developer")) return R_DEVELOPER;
    return -1;
}

int sl_chat_role_ok(const char *role) { return role && role_of(role) >= 0; }

/* One message after merging: messages [first, last] of the input (last > first only for merged user
 * messages). */
typedef struct {
    int role, first, last;
} turn;

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static int last_user(const turn *t, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (t[i].role == R_USER || t[i].role == R_DEVELOPER) return i;
    return -1;
}

int sl_chat_render(const sl_chat_msg *m, int n, int thinking, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    *len = 0;
    turn *t = malloc((size_t)(n > 0 ? n : 1) * sizeof(*t));
    if (!t) return snprintf(err, errlen, "chat: out of memory"), -1;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        int r = m[i].role ? role_of(m[i].role) : -1;
        if (r < 0) {
            snprintf(err, errlen, "messages[%d]: role '%.32s' is not one of system, user, assistant, developer", i,
                     m[i].role ? m[i].role : "(none)");
            free(t);
            return -1;
        }
        /* tool results and user text become content blocks of one user message (merge_tool_messages) */
        if (r == R_USER && nt > 0 && t[nt - 1].role == R_USER) {
            t[nt - 1].last = i;
            continue;
        }
        t[nt++] = (turn){r, i, i};
    }

    /* thinking on: developer messages before the last user/developer message go
     * (_drop_thinking_messages; the reasoning it strips there is never rendered anyway) */
    if (thinking) {
        int lu = last_user(t, nt), k = 0;
        for (int i = 0; i < nt; i++)
            if (!(i < lu && t[i].role == R_DEVELOPER)) t[k++] = t[i];
        nt = k;
    }

    int lu = last_user(t, nt);
    for (int i = 0; i < nt; i++)   /* (a developer message that was dropped may be empty) */
        if (t[i].role == R_DEVELOPER && m[t[i].first].content_len == 0) {
            snprintf(err, errlen, "messages[%d]: a developer message needs content", t[i].first);
            free(t);
            return -1;
        }
    sbuf b = {0};
    puts_(&b, SL_CHAT_BOS);
    for (int i = 0; i < nt; i++) {
        const sl_chat_msg *msg = &m[t[i].first];
        switch (t[i].role) {
        case R_SYSTEM:
            put(&b, msg->content, msg->content_len);
            break;
        case R_DEVELOPER:
            puts_(&b, SL_CHAT_USER);
            put(&b, msg->content, msg->content_len);
            break;
        case R_USER:
            puts_(&b, SL_CHAT_USER);
            for (int j = t[i].first; j <= t[i].last; j++) {
                if (j > t[i].first) puts_(&b, "\n\n");
                put(&b, m[j].content, m[j].content_len);
            }
            break;
        case R_ASSISTANT:
            if (thinking && i > lu) {
                if (msg->reasoning) put(&b, msg->reasoning, msg->reasoning_len);
                puts_(&b, SL_CHAT_THINK_END);
            }
            put(&b, msg->content, msg->content_len);
            puts_(&b, SL_CHAT_EOS);
            break;
        }
        /* what follows: nothing before a message other than an assistant one */
        if (i + 1 < nt && t[i + 1].role != R_ASSISTANT) continue;
        if (t[i].role == R_USER || t[i].role == R_DEVELOPER) {
            puts_(&b, SL_CHAT_ASSISTANT);
            puts_(&b, thinking && i >= lu ? SL_CHAT_THINK_START : SL_CHAT_THINK_END);
        }
    }
    free(t);
    if (b.oom) {
        free(b.p);
        return snprintf(err, errlen, "chat: out of memory"), -1;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

int sl_chat_from_json(json_t *messages, sl_chat_msg **out, int *n, char *err, size_t errlen) {
    static const char *const unsupported[] = {"tools", "tool_calls", "task", "response_format", "wo_eos",
                                              "content_blocks", "prefix"};
    *out = NULL;
    *n = 0;
    if (!json_is_array(messages)) return snprintf(err, errlen, "\"messages\" must be an array"), -1;
    size_t k = json_array_size(messages);
    if (k > 1000000) return snprintf(err, errlen, "\"messages\": too many"), -1;
    sl_chat_msg *m = calloc(k ? k : 1, sizeof(*m));
    if (!m) return snprintf(err, errlen, "chat: out of memory"), -1;
    for (size_t i = 0; i < k; i++) {
        json_t *o = json_array_get(messages, i), *v;
        if (!json_is_object(o)) {
            snprintf(err, errlen, "messages[%zu]: not an object", i);
            goto bad;
        }
        for (size_t u = 0; u < sizeof(unsupported) / sizeof(*unsupported); u++)
            if (json_object_get(o, unsupported[u]) && !json_is_null(json_object_get(o, unsupported[u]))) {
                snprintf(err, errlen, "messages[%zu]: \"%s\" is not supported", i, unsupported[u]);
                goto bad;
            }
        v = json_object_get(o, "role");
        if (!json_is_string(v) || !sl_chat_role_ok(json_string_value(v))) {
            snprintf(err, errlen, "messages[%zu]: \"role\" must be one of system, user, assistant, developer", i);
            goto bad;
        }
        m[i].role = json_string_value(v);
        v = json_object_get(o, "content");
        if (!json_is_string(v)) {
            snprintf(err, errlen, "messages[%zu]: \"content\" must be a string", i);
            goto bad;
        }
        m[i].content = json_string_value(v);
        m[i].content_len = json_string_length(v);
        v = json_object_get(o, "reasoning_content");
        if (v && !json_is_null(v)) {
            if (!json_is_string(v)) {
                snprintf(err, errlen, "messages[%zu]: \"reasoning_content\" must be a string or null", i);
                goto bad;
            }
            m[i].reasoning = json_string_value(v);
            m[i].reasoning_len = json_string_length(v);
        }
    }
    *out = m;
    *n = (int)k;
    return 0;
bad:
    free(m);
    return -1;
}
