/* textcodec.c — see textcodec.h. */
#include "textcodec.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- byte codec (vocab 256: id = byte)

static int byte_encode(sl_textcodec *tc, const char *text, size_t len, int32_t **ids, int *n, char *err,
                       size_t errlen) {
    (void)tc;
    (void)err;
    (void)errlen;
    *ids = malloc((len ? len : 1) * sizeof(int32_t));
    if (!*ids) return -1;
    for (size_t i = 0; i < len; i++) (*ids)[i] = (uint8_t)text[i];
    *n = (int)len;
    return 0;
}

static int byte_token_bytes(sl_textcodec *tc, int32_t id, uint8_t *buf, size_t cap) {
    if (id < 0 || id > 255 || cap < 1) return -1;
    for (int i = 0; i < tc->n_eos; i++)
        if (tc->eos_ids[i] == id) return 0;
    buf[0] = (uint8_t)id;
    return 1;
}

static void byte_close(sl_textcodec *tc) { free(tc); }

sl_textcodec *textcodec_open(const char *model_path, int vocab_size, const int *eos_ids, int n_eos) {
    (void)model_path;   /* the real tokenizer (tokenizer.json in model_path) plugs in here */
    if (vocab_size != 256) return NULL;
    sl_textcodec *tc = calloc(1, sizeof(*tc));
    if (!tc) return NULL;
    tc->name = "bytes";
    tc->encode = byte_encode;
    tc->token_bytes = byte_token_bytes;
    tc->close = byte_close;
    if (n_eos > 8) n_eos = 8;
    for (int i = 0; i < n_eos; i++) tc->eos_ids[i] = eos_ids[i];
    tc->n_eos = n_eos;
    return tc;
}

void textcodec_close(sl_textcodec *tc) {
    if (tc) tc->close(tc);
}

// ---------------------------------------------------------------- incremental UTF-8

void textdec_init(sl_textdec *d) { memset(d, 0, sizeof(*d)); }

void textdec_free(sl_textdec *d) {
    free(d->text);
    memset(d, 0, sizeof(*d));
}

static int out_bytes(sl_textdec *d, const void *b, size_t n) {
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

static int out_replacement(sl_textdec *d) { return out_bytes(d, "\xEF\xBF\xBD", 3); }

/* Bytes a sequence starting with b needs in total (0 = not a valid start). */
static int seq_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Is b a valid byte at position i (>= 1) of a sequence starting with first? (Unicode Table 3-7) */
static int cont_ok(uint8_t first, int i, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (i == 1) {
        if (first == 0xE0) lo = 0xA0;
        else if (first == 0xED) hi = 0x9F;
        else if (first == 0xF0) lo = 0x90;
        else if (first == 0xF4) hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

int textdec_push_bytes(sl_textdec *d, const uint8_t *b, size_t n) {
    for (size_t k = 0; k < n; k++) {
        uint8_t c = b[k];
        if (d->n_pending > 0) {
            if (cont_ok(d->pending[0], d->n_pending, c)) {
                d->pending[d->n_pending++] = c;
                if (d->n_pending == seq_len(d->pending[0])) {
                    if (out_bytes(d, d->pending, (size_t)d->n_pending)) return -1;
                    d->n_pending = 0;
                }
                continue;
            }
            /* maximal subpart ends here: one U+FFFD, then c starts afresh */
            d->n_pending = 0;
            if (out_replacement(d)) return -1;
        }
        int need = seq_len(c);
        if (need == 1) {
            if (out_bytes(d, &c, 1)) return -1;
        } else if (need == 0) {
            if (out_replacement(d)) return -1;
        } else {
            d->pending[0] = c;
            d->n_pending = 1;
        }
    }
    return 0;
}

int textdec_push(sl_textdec *d, sl_textcodec *tc, int32_t id) {
    uint8_t buf[256];
    int n = tc->token_bytes(tc, id, buf, sizeof(buf));
    if (n < 0) return out_replacement(d);
    if (d->cap == 0 && out_bytes(d, "", 0)) return -1;
    return textdec_push_bytes(d, buf, (size_t)n);
}

int textdec_finish(sl_textdec *d) {
    if (d->cap == 0 && out_bytes(d, "", 0)) return -1;
    if (d->n_pending == 0) return 0;
    d->n_pending = 0;
    return out_replacement(d);
}

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
