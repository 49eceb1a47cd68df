/* textcodec.c — see textcodec.h. */
#include "textcodec.h"

#include "chat.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---------------------------------------------------------------- codec

int textcodec_open(const char *model_path, int vocab_size, const int *eos_ids, int n_eos, sl_textcodec **out,
                   char *err, size_t errlen) {
    *out = NULL;
    sl_tokenizer *tok;
    if (sl_tokenizer_open_for_model(model_path, vocab_size, &tok, err, errlen)) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/tokenizer.json", model_path);
        return access(path, F_OK) == 0 ? -1 : 1;   /* present but broken: fatal; absent: token ids only */
    }
    sl_textcodec *tc = calloc(1, sizeof(*tc));
    if (!tc) {
        sl_tokenizer_free(tok);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    tc->name = sl_tokenizer_is_bytes(tok) ? "bytes" : "tokenizer.json";
    tc->tok = tok;
    tc->vocab_size = vocab_size;
    if (n_eos > 8) n_eos = 8;
    for (int i = 0; i < n_eos; i++) tc->eos_ids[i] = eos_ids[i];
    tc->n_eos = n_eos;
    tc->think_end_id = sl_tokenizer_token_id(tok, SL_CHAT_THINK_END, strlen(SL_CHAT_THINK_END));
    *out = tc;
    return 0;
}

void textcodec_close(sl_textcodec *tc) {
    if (!tc) return;
    sl_tokenizer_free(tc->tok);
    free(tc);
}

static int encode_ids(sl_textcodec *tc, const char *text, size_t len, int add_special, int32_t **ids, int *n,
                      char *err, size_t errlen) {
    size_t m = 0;
    *ids = NULL;
    *n = 0;
    if (sl_tokenizer_encode(tc->tok, text, len, add_special, ids, &m, err, errlen)) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    for (size_t i = 0; i < m; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= tc->vocab_size) {
            snprintf(err, errlen, "tokenizer id %d is outside the model vocabulary [0, %d) (tokenizer.json does not fit "
                     "the model)", (int)(*ids)[i], tc->vocab_size);
            free(*ids);
            *ids = NULL;
            return -1;
        }
    if (m > INT_MAX) {
        snprintf(err, errlen, "%zu tokens", m);
        free(*ids);
        *ids = NULL;
        return -1;
    }
    *n = (int)m;
    return 0;
}

int textcodec_encode(sl_textcodec *tc, const char *text, size_t len, int32_t **ids, int *n, char *err,
                     size_t errlen) {
    return encode_ids(tc, text, len, 1, ids, n, err, errlen);
}

static int check_message(int i, const sl_job_message *j, char *err, size_t errlen) {
    if (!sl_chat_role_ok(j->role))
        return snprintf(err, errlen, "messages[%d]: role '%.32s' is not one of system, user, assistant, developer", i,
                        j->role),
               -1;
    if (!sl_utf8_valid(j->content, j->content_len))
        return snprintf(err, errlen, "messages[%d]: content is not valid UTF-8", i), -1;
    if (j->reasoning_content && !sl_utf8_valid(j->reasoning_content, j->reasoning_content_len))
        return snprintf(err, errlen, "messages[%d]: reasoning_content is not valid UTF-8", i), -1;
    return 0;
}

int textcodec_encode_messages(sl_textcodec *tc, const sl_job_message *msgs, int n, int thinking, int32_t **ids,
                              int *n_ids, char *err, size_t errlen) {
    *ids = NULL;
    *n_ids = 0;
    sl_chat_msg *m = calloc((size_t)(n > 0 ? n : 1), sizeof(*m));
    if (!m) return snprintf(err, errlen, "messages: out of memory"), -1;
    for (int i = 0; i < n; i++) {
        const sl_job_message *j = &msgs[i];
        if (check_message(i, j, err, errlen)) {
            free(m);
            return -1;
        }
        m[i] = (sl_chat_msg){j->role, j->content, j->content_len, j->reasoning_content, j->reasoning_content_len};
    }
    if (n == 0 || (strcmp(m[n - 1].role, "user") && strcmp(m[n - 1].role, "developer"))) {
        snprintf(err, errlen, "messages[%d]: the last message must be the user's (role user or developer), not '%.32s'",
                 n - 1, n ? m[n - 1].role : "");
        free(m);
        return -1;
    }
    char *text;
    size_t len;
    int rc = sl_chat_render(m, n, thinking, &text, &len, err, errlen);
    free(m);
    if (rc) return -1;
    char e2[200];
    rc = encode_ids(tc, text, len, 0, ids, n_ids, e2, sizeof(e2));
    free(text);
    if (rc) return snprintf(err, errlen, "messages: cannot tokenize the chat prompt: %s", e2), -1;
    return 0;
}

void textcodec_chat_answer(const sl_textcodec *tc, int thinking, const int32_t *tokens, int n_tokens,
                           const char *text, size_t len, sl_chat_answer *out) {
    memset(out, 0, sizeof(*out));
    if (!thinking) {
        out->content = text;
        out->content_len = len;
        return;
    }
    out->reasoning = text;
    out->reasoning_len = len;
    size_t at = len, skip = 0;
    int found = 0;
    if (tc->think_end_id >= 0 && textcodec_silent(tc, tc->think_end_id)) {
        /* the marker gives no text: the reasoning is the decoded text of the tokens before it */
        for (int i = 0; i < n_tokens && !found; i++) {
            if (tokens[i] != tc->think_end_id) continue;
            found = 1;
            sl_textdec d;
            textdec_init(&d, tc);
            for (int k = 0; k < i; k++) textdec_push(&d, tokens[k]);
            textdec_finish(&d);
            at = d.len < len ? d.len : len;
            textdec_free(&d);
        }
    } else {
        size_t ml = strlen(SL_CHAT_THINK_END);
        for (size_t i = 0; i + ml <= len && !found; i++)
            if (!memcmp(text + i, SL_CHAT_THINK_END, ml)) at = i, skip = ml, found = 1;
    }
    if (!found) return;
    out->reasoning_len = at;
    out->content = text + at + skip;
    out->content_len = len - at - skip;
}

int textcodec_silent(const sl_textcodec *tc, int32_t id) {
    for (int i = 0; i < tc->n_eos; i++)
        if (tc->eos_ids[i] == id) return 1;
    return sl_tokenizer_is_special(tc->tok, id);
}

// ---------------------------------------------------------------- incremental decode

void textdec_init(sl_textdec *d, const sl_textcodec *tc) {
    memset(d, 0, sizeof(*d));
    d->tc = tc;
    sl_detok_init(&d->det, tc->tok);
}

void textdec_free(sl_textdec *d) {
    sl_detok_free(&d->det);
    free(d->text);
    memset(d, 0, sizeof(*d));
}

static int append(sl_textdec *d, const char *b, size_t n) {
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->len + n + 1) cap *= 2;
        char *t = realloc(d->text, cap);
        if (!t) return -1;
        d->text = t;
        d->cap = cap;
    }
    memcpy(d->text + d->len, b, n);
    d->len += n;
    d->text[d->len] = 0;
    return 0;
}

int textdec_push(sl_textdec *d, int32_t id) {
    if (d->cap == 0 && append(d, "", 0)) return -1;
    if (textcodec_silent(d->tc, id)) return 0;
    const char *s;
    size_t n;
    if (sl_detok_push(&d->det, id, &s, &n)) return -1;
    return append(d, s, n);
}

int textdec_finish(sl_textdec *d) {
    if (d->cap == 0 && append(d, "", 0)) return -1;
    const char *s;
    size_t n;
    if (sl_detok_flush(&d->det, &s, &n)) return -1;
    return append(d, s, n);
}

void textdec_drop_pending(sl_textdec *d) { d->det.npend = 0; }

// ---------------------------------------------------------------- stop strings

long stop_find(const char *text, size_t len, size_t from, char *const *stop, const size_t *stop_len, int n_stop) {
    long best = -1;
    for (int i = 0; i < n_stop; i++) {
        size_t L = stop_len[i];
        if (L == 0 || L > len) continue;
        size_t start = from + 1 > L ? from + 1 - L : 0;
        const char *p = memmem(text + start, len - start, stop[i], L);
        if (p && (best < 0 || p - text < best)) best = p - text;
    }
    return best;
}
