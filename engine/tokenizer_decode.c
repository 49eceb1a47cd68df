/* tokenizer_decode.c — ids -> text for engine/tokenizer.h: whole and streaming decode, and the
 * UTF-8 helpers (validation, lossy conversion exactly like Rust's String::from_utf8_lossy). */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- UTF-8

/* Length of the maximal well-formed prefix of one sequence at s[0..n): returns the sequence
 * length if complete and valid, else -k where k >= 1 is the maximal subpart to replace
 * (k == n with *trunc = 1 when the input ended inside a valid prefix). */
static long utf8_step(const unsigned char *s, size_t n, int *trunc)
{
    unsigned c = s[0];
    *trunc = 0;
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1;
    for (size_t k = 1; k <= need; k++) {
        if (k >= n) {
            *trunc = 1;
            return -(long)k;
        }
        unsigned b = s[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -(long)k;
    }
    return (long)need + 1;
}

int sl_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int tr;
        long r = utf8_step(u + i, n - i, &tr);
        if (r < 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

int sl_utf8_lossy_append(const char *s, size_t n, int hold_tail, char **buf, size_t *blen, size_t *bcap,
                         size_t *held)
{
    const unsigned char *u = (const unsigned char *)s;
    *held = 0;
    /* worst case: every byte becomes U+FFFD (3 bytes); +1 for a NUL the caller may add */
    if (tk_grow((void **)buf, bcap, *blen + 3 * n + 1, 1)) return -1;
    char *o = *buf + *blen;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            *o++ = (char)u[i++];
            continue;
        }
        int tr;
        long r = utf8_step(u + i, n - i, &tr);
        if (r > 0) {
            memcpy(o, u + i, (size_t)r);
            o += r, i += (size_t)r;
            continue;
        }
        if (tr && hold_tail) {
            *held = n - i;
            break;
        }
        memcpy(o, "\xEF\xBF\xBD", 3);
        o += 3, i += (size_t)-r;
    }
    *blen = (size_t)(o - *buf);
    return 0;
}

// ---------------------------------------------------------------- decode (tokenizer/mod.rs decode)

int sl_tokenizer_decode(const sl_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    size_t raw_n = 0, raw_cap = 0, out_n = 0, out_cap = 0, held, ntok = 0;
    char *raw = NULL, *out = NULL;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->dec[id]) continue;     /* unknown ids are skipped */
        size_t add = t->dec_len[id] + (t->decoder == TK_DEC_JOIN && ntok);
        if (tk_grow((void **)&raw, &raw_cap, raw_n + add + 1, 1)) goto oom;
        if (t->decoder == TK_DEC_JOIN && ntok) raw[raw_n++] = ' ';
        memcpy(raw + raw_n, t->dec[id], t->dec_len[id]);
        raw_n += t->dec_len[id];
        ntok++;
    }
    if (sl_utf8_lossy_append(raw ? raw : "", raw_n, 0, &out, &out_n, &out_cap, &held)) goto oom;
    out[out_n] = 0;
    free(raw);
    *text = out;
    *len = out_n;
    return 0;
oom:
    free(raw);
    free(out);
    return -1;
}

void sl_detok_init(sl_detok *d, const sl_tokenizer *t)
{
    memset(d, 0, sizeof *d);
    d->t = t;
}

/* Convert held bytes + sep + add; hold an incomplete tail unless flushing. */
static int detok_emit(sl_detok *d, const char *sep, size_t sepn, const char *add, size_t addn, int hold,
                      const char **text, size_t *len)
{
    char tmp[256];
    size_t tn = d->npend + sepn + addn, outn = 0, held;
    char *src = tn <= sizeof tmp ? tmp : malloc(tn + 1);
    if (!src) return -1;
    if (d->npend) memcpy(src, d->pend, d->npend);
    memcpy(src + d->npend, sep, sepn);
    memcpy(src + d->npend + sepn, add, addn);
    int r = sl_utf8_lossy_append(src, tn, hold, &d->out, &outn, &d->outcap, &held);
    if (r == 0) {
        if (!d->pend && !(d->pend = malloc(4))) r = -1;
        else memcpy(d->pend, src + tn - held, held), d->npend = held;    /* held <= 3 */
    }
    if (src != tmp) free(src);
    if (r) return -1;
    d->out[outn] = 0;
    *text = d->out;
    *len = outn;
    return 0;
}

int sl_detok_push(sl_detok *d, int32_t id, const char **text, size_t *len)
{
    const sl_tokenizer *t = d->t;
    *text = "";
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->dec[id]) return 0;
    int sep = t->decoder == TK_DEC_JOIN && d->ntok > 0;
    d->ntok++;
    return detok_emit(d, " ", sep ? 1 : 0, t->dec[id], t->dec_len[id], 1, text, len);
}

int sl_detok_flush(sl_detok *d, const char **text, size_t *len)
{
    return detok_emit(d, "", 0, "", 0, 0, text, len);
}

void sl_detok_free(sl_detok *d)
{
    free(d->pend);
    free(d->out);
    memset(d, 0, sizeof *d);
}
