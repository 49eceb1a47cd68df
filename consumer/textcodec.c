/* textcodec.c — see textcodec.h. */
#include "textcodec.h"

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
    *out = tc;
    return 0;
}

void textcodec_close(sl_textcodec *tc) {
    if (!tc) return;
    sl_tokenizer_free(tc->tok);
    free(tc);
}

int textcodec_encode(sl_textcodec *tc, const char *text, size_t len, int32_t **ids, int *n, char *err,
                     size_t errlen) {
    size_t m = 0;
    *ids = NULL;
    *n = 0;
    if (sl_tokenizer_encode(tc->tok, text, len, 1, ids, &m, err, errlen)) {
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
