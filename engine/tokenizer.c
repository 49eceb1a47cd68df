/* tokenizer.c — encode (added tokens -> pre-tokenizer -> BPE) and decode; see tokenizer.h.
 * Loading tokenizer.json lives in tokenizer_load.c. Every step mirrors the Rust `tokenizers`
 * code path it replaces (named in the comments) so that ids match exactly. */
#include "tokenizer_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uninorm.h>

// ---------------------------------------------------------------- small helpers

static void fail(sl_tokenizer *t, const char *fmt, ...)
{
    if (t->failed) return;
    t->failed = 1;
    if (t->err && t->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->err, t->errlen, fmt, ap);
        va_end(ap);
    }
}

int tk_grow(void **p, size_t *cap, size_t need, size_t elt)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elt);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

uint64_t tk_hash(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

static size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// ---------------------------------------------------------------- string map, merge map

static int strmap_rehash(tk_strmap *m, uint32_t nslots)
{
    uint32_t *slot = calloc(nslots, sizeof *slot);
    if (!slot) return -1;
    free(m->slot);
    m->slot = slot;
    m->mask = nslots - 1;
    for (uint32_t i = 0; i < m->n; i++) {
        uint32_t h = (uint32_t)tk_hash(m->key[i], m->klen[i]) & m->mask;
        while (slot[h]) h = (h + 1) & m->mask;
        slot[h] = i + 1;
    }
    return 0;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t kn)
{
    if (!m->slot) return -1;
    uint32_t h = (uint32_t)tk_hash(k, kn) & m->mask;
    for (;;) {
        uint32_t s = m->slot[h];
        if (!s) return -1;
        if (m->klen[s - 1] == kn && memcmp(m->key[s - 1], k, kn) == 0) return m->val[s - 1];
        h = (h + 1) & m->mask;
    }
}

/* Insert or overwrite; k must outlive the map. */
int tk_strmap_put(tk_strmap *m, const char *k, uint32_t kn, int32_t v)
{
    if (m->n + 1 > m->cap) {
        size_t nc = m->cap ? 2 * (size_t)m->cap : 1024;
        const char **nk = realloc(m->key, nc * sizeof *nk);
        if (nk) m->key = nk;
        uint32_t *nl = realloc(m->klen, nc * sizeof *nl);
        if (nl) m->klen = nl;
        int32_t *nv = realloc(m->val, nc * sizeof *nv);
        if (nv) m->val = nv;
        if (!nk || !nl || !nv) return -1;
        m->cap = (uint32_t)nc;
    }
    if ((!m->slot || (m->n + 1) * 2 > m->mask + 1) && strmap_rehash(m, m->slot ? (m->mask + 1) * 2 : 2048)) return -1;
    uint32_t h = (uint32_t)tk_hash(k, kn) & m->mask;
    for (;;) {
        uint32_t s = m->slot[h];
        if (!s) break;
        if (m->klen[s - 1] == kn && memcmp(m->key[s - 1], k, kn) == 0) {
            m->val[s - 1] = v;
            return 0;
        }
        h = (h + 1) & m->mask;
    }
    m->key[m->n] = k;
    m->klen[m->n] = kn;
    m->val[m->n] = v;
    m->slot[h] = ++m->n;
    return 0;
}

void tk_strmap_free(tk_strmap *m)
{
    free(m->slot);
    free(m->key);
    free(m->klen);
    free(m->val);
    memset(m, 0, sizeof *m);
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int tk_merge_put(tk_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id)
{
    if (!m->key || (m->n + 1) * 2 > m->mask + 1) {
        uint32_t ns = m->key ? (m->mask + 1) * 2 : 1024;
        uint64_t *k = calloc(ns, sizeof *k);
        uint32_t *r = malloc(ns * sizeof *r);
        int32_t *v = malloc(ns * sizeof *v);
        if (!k || !r || !v) {
            free(k), free(r), free(v);
            return -1;
        }
        for (uint32_t i = 0; m->key && i <= m->mask; i++) {
            if (!m->key[i]) continue;
            uint32_t h = (uint32_t)mix64(m->key[i]) & (ns - 1);
            while (k[h]) h = (h + 1) & (ns - 1);
            k[h] = m->key[i], r[h] = m->rank[i], v[h] = m->new_id[i];
        }
        free(m->key), free(m->rank), free(m->new_id);
        m->key = k, m->rank = r, m->new_id = v, m->mask = ns - 1;
    }
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t h = (uint32_t)mix64(key) & m->mask;
    while (m->key[h] && m->key[h] != key) h = (h + 1) & m->mask;
    if (!m->key[h]) m->n++;
    m->key[h] = key, m->rank[h] = rank, m->new_id[h] = new_id;   /* a later duplicate wins, as in Rust */
    return 0;
}

static int merge_get(const tk_mergemap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id)
{
    if (!m->key) return 0;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t h = (uint32_t)mix64(key) & m->mask;
    for (;;) {
        if (!m->key[h]) return 0;
        if (m->key[h] == key) {
            *rank = m->rank[h], *new_id = m->new_id[h];
            return 1;
        }
        h = (h + 1) & m->mask;
    }
}

// ---------------------------------------------------------------- ByteLevel alphabet (bytes_char)

static uint16_t bl_cp[256];      /* byte -> code point */
static pthread_once_t bl_once = PTHREAD_ONCE_INIT;

static void bl_init(void)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        bl_cp[b] = printable ? (uint16_t)b : (uint16_t)(256 + n++);
    }
}

size_t tk_bytelevel_char(uint8_t b, char out[2])
{
    pthread_once(&bl_once, bl_init);
    uint16_t c = bl_cp[b];
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* ByteLevel decoder on one token: if every char is in the alphabet, the bytes; else 0. */
static int16_t bl_inv[512];
static pthread_once_t bl_inv_once = PTHREAD_ONCE_INIT;
static void bl_inv_init(void)
{
    pthread_once(&bl_once, bl_init);
    for (int i = 0; i < 512; i++) bl_inv[i] = -1;
    for (int b = 0; b < 256; b++) bl_inv[bl_cp[b]] = (int16_t)b;
}

int tk_bytelevel_decode(const char *s, size_t n, char *out, size_t *outn)
{
    pthread_once(&bl_inv_once, bl_inv_init);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned c0 = (unsigned char)s[i];
        unsigned cp;
        if (c0 < 0x80) cp = c0, i += 1;
        else if ((c0 & 0xE0) == 0xC0 && i + 1 < n) cp = ((c0 & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F), i += 2;
        else return 0;
        if (cp >= 512 || bl_inv[cp] < 0) return 0;
        out[k++] = (char)bl_inv[cp];
    }
    *outn = k;
    return 1;
}

// ---------------------------------------------------------------- Oniguruma

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static void onig_init_once(void)
{
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
}
void tk_init_onig(void) { pthread_once(&onig_once, onig_init_once); }

/* As the Rust binding: onig_new(pattern, ONIG_OPTION_NONE, UTF-8, OnigDefaultSyntax). */
OnigRegex tk_regex(const char *pat, size_t n, char *err, size_t errlen)
{
    tk_init_onig();
    OnigRegex re = NULL;
    OnigErrorInfo ei;
    int r = onig_new(&re, (const OnigUChar *)pat, (const OnigUChar *)pat + n, ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &ei);
    if (r != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &ei);
        if (err) snprintf(err, errlen, "regex /%.*s/: %s", (int)(n > 80 ? 80 : n), pat, msg);
        return NULL;
    }
    return re;
}

// ---------------------------------------------------------------- BPE (models/bpe: merge_word + Word::merge_all)

typedef struct { uint32_t rank, pos; int32_t id; } hent;   /* min-heap on (rank, pos), as Merge's Ord */
typedef struct { int32_t id, prev, next; uint32_t len; } sym;

static int hless(const hent *a, const hent *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void hpush(hent *h, size_t *n, hent e)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static hent hpop(hent *h, size_t *n)
{
    hent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static int wpush(sl_tokenizer *t, size_t *nw, int32_t id, uint32_t len)
{
    if (tk_grow(&t->bw, &t->cbw, *nw + 1, sizeof(sym))) return -1;
    sym *w = t->bw;
    w[*nw] = (sym){id, (int32_t)*nw - 1, (int32_t)*nw + 1, len};
    (*nw)++;
    return 0;
}

/* merge_word's body for one model-space char s[0..n) whose vocab id is id (-1: unknown). */
static int word_add_char(sl_tokenizer *t, size_t *nw, const char *s, size_t n, int32_t id,
                         int32_t *unk, uint32_t *unk_len)
{
    if (id >= 0) {
        if (*unk >= 0 && wpush(t, nw, *unk, *unk_len)) return -1;
        *unk = -1;
        return wpush(t, nw, id, (uint32_t)n);
    }
    if (t->byte_fallback) {
        size_t i = 0;
        while (i < n && t->fb_id[(uint8_t)s[i]] >= 0) i++;
        if (i == n) {                     /* every byte has its <0xXX>: no unk flush, as in Rust */
            for (i = 0; i < n; i++)
                if (wpush(t, nw, t->fb_id[(uint8_t)s[i]], 1)) return -1;
            return 0;
        }
    }
    if (t->unk_id < 0) return 0;          /* no unk token: the char is dropped */
    if (*unk >= 0 && t->fuse_unk) {
        *unk_len += (uint32_t)n;
        return 0;
    }
    if (*unk >= 0 && wpush(t, nw, *unk, *unk_len)) return -1;
    *unk = t->unk_id;
    *unk_len = (uint32_t)n;
    return 0;
}

static int bpe(sl_tokenizer *t, const char *p, size_t n, int mapped)
{
    const char *s = p;                    /* model-space string: ByteLevel chars when mapped */
    size_t sn = n;
    if (mapped && (t->ignore_merges || t->byte_fallback || t->unk_id >= 0)) {
        if (tk_grow((void **)&t->wbuf.b, &t->wbuf.cap, 2 * n, 1)) goto oom;
        sn = 0;
        for (size_t i = 0; i < n; i++) sn += tk_bytelevel_char((uint8_t)p[i], t->wbuf.b + sn);
        s = t->wbuf.b;
    }
    if (t->ignore_merges) {
        int32_t id = tk_strmap_get(&t->vocab, s, sn);
        if (id >= 0) {
            if (tk_grow((void **)&t->out, &t->capout, t->nout + 1, sizeof *t->out)) goto oom;
            t->out[t->nout++] = id;
            return 0;
        }
    }
    size_t nw = 0;
    int32_t unk = -1;
    uint32_t unk_len = 0;
    if (mapped) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->bl_id[(uint8_t)p[i]];
            if (id >= 0) {
                if (unk >= 0 && wpush(t, &nw, unk, unk_len)) goto oom;
                unk = -1;
                if (wpush(t, &nw, id, 1)) goto oom;
            } else {
                char c[2];
                size_t cl = tk_bytelevel_char((uint8_t)p[i], c);
                if (word_add_char(t, &nw, c, cl, -1, &unk, &unk_len)) goto oom;
            }
        }
    } else {
        for (size_t i = 0; i < n;) {
            size_t cl = utf8_len((unsigned char)s[i]);
            if (cl > n - i) cl = n - i;
            if (word_add_char(t, &nw, s + i, cl, tk_strmap_get(&t->vocab, s + i, cl), &unk, &unk_len)) goto oom;
            i += cl;
        }
    }
    if (unk >= 0 && wpush(t, &nw, unk, unk_len)) goto oom;
    if (nw == 0) return 0;
    sym *w = t->bw;
    w[nw - 1].next = -1;
    if (tk_grow(&t->bh, &t->cbh, nw + 2, sizeof(hent))) goto oom;
    hent *h = t->bh;
    size_t nh = 0;
    uint32_t r;
    int32_t nid;
    for (size_t i = 0; i + 1 < nw; i++)
        if (merge_get(&t->merges, w[i].id, w[i + 1].id, &r, &nid)) hpush(h, &nh, (hent){r, (uint32_t)i, nid});
    while (nh) {
        hent top = hpop(h, &nh);
        sym *cur = &w[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &w[cur->next];
        if (!merge_get(&t->merges, cur->id, right->id, &r, &nid) || nid != top.id) continue;  /* stale */
        cur->id = top.id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0) w[cur->next].prev = (int32_t)top.pos;
        /* a pop is followed by at most two pushes; live entries never exceed the pairs left + 2 */
        if (nh + 2 > t->cbh) {
            if (tk_grow(&t->bh, &t->cbh, nh + 2, sizeof(hent))) goto oom;
            h = t->bh;
        }
        if (cur->prev >= 0 && merge_get(&t->merges, w[cur->prev].id, cur->id, &r, &nid))
            hpush(h, &nh, (hent){r, (uint32_t)cur->prev, nid});
        if (cur->next >= 0 && merge_get(&t->merges, cur->id, w[cur->next].id, &r, &nid))
            hpush(h, &nh, (hent){r, top.pos, nid});
    }
    if (tk_grow((void **)&t->out, &t->capout, t->nout + nw, sizeof *t->out)) goto oom;
    for (int32_t i = 0; i >= 0; i = w[i].next) t->out[t->nout++] = w[i].id;
    return 0;
oom:
    fail(t, "out of memory");
    return -1;
}

// ---------------------------------------------------------------- cache of pre-token -> ids

static void cache_clear(tk_cache *c)
{
    memset(c->hash, 0, sizeof *c->hash << TK_CACHE_BITS);
    c->kn = c->in = 0;
    c->used = 0;
}

static int model(sl_tokenizer *t, const char *p, size_t n)
{
    tk_cache *c = &t->cache;
    if (n >= TK_CACHE_MAXKEY) return bpe(t, p, n, t->bl_last);
    if (!c->hash) {
        size_t ns = (size_t)1 << TK_CACHE_BITS;
        c->hash = calloc(ns, sizeof *c->hash);
        c->koff = malloc(ns * sizeof *c->koff);
        c->klen = malloc(ns * sizeof *c->klen);
        c->ioff = malloc(ns * sizeof *c->ioff);
        c->ilen = malloc(ns * sizeof *c->ilen);
        if (!c->hash || !c->koff || !c->klen || !c->ioff || !c->ilen) goto oom;
    }
    uint64_t hv = tk_hash(p, n);
    uint32_t mask = ((uint32_t)1 << TK_CACHE_BITS) - 1, i = (uint32_t)hv & mask;
    for (; c->hash[i]; i = (i + 1) & mask) {
        if (c->hash[i] == hv && c->klen[i] == n && memcmp(c->kbuf + c->koff[i], p, n) == 0) {
            if (tk_grow((void **)&t->out, &t->capout, t->nout + c->ilen[i], sizeof *t->out)) goto oom;
            memcpy(t->out + t->nout, c->ibuf + c->ioff[i], c->ilen[i] * sizeof *t->out);
            t->nout += c->ilen[i];
            return 0;
        }
    }
    size_t before = t->nout;
    if (bpe(t, p, n, t->bl_last)) return -1;
    size_t k = t->nout - before;
    if (c->used >= (mask + 1) / 2 || c->kn + n > (32u << 20) || c->in + k > (8u << 20)) {
        cache_clear(c);                   /* full: start over; hot pre-tokens come back at once */
        for (i = (uint32_t)hv & mask; c->hash[i]; i = (i + 1) & mask) {}
    }
    if (tk_grow((void **)&c->kbuf, &c->kcap, c->kn + n, 1) || tk_grow((void **)&c->ibuf, &c->icap, c->in + k, sizeof *c->ibuf))
        goto oom;
    memcpy(c->kbuf + c->kn, p, n);
    memcpy(c->ibuf + c->in, t->out + before, k * sizeof *c->ibuf);
    c->hash[i] = hv, c->koff[i] = (uint32_t)c->kn, c->klen[i] = (uint32_t)n;
    c->ioff[i] = (uint32_t)c->in, c->ilen[i] = (uint32_t)k;
    c->kn += n, c->in += k, c->used++;
    return 0;
oom:
    fail(t, "out of memory");
    return -1;
}

// ---------------------------------------------------------------- pre-tokenizer (split.rs, byte_level.rs)

static int mpush(sl_tokenizer *t, tk_matches *m, size_t s, size_t e, int is_match)
{
    if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 64;
        uint32_t *ns = realloc(m->s, nc * sizeof *ns);
        if (ns) m->s = ns;
        uint32_t *ne = realloc(m->e, nc * sizeof *ne);
        if (ne) m->e = ne;
        uint8_t *nm = realloc(m->m, nc);
        if (nm) m->m = nm;
        if (!ns || !ne || !nm) {
            fail(t, "out of memory");
            return -1;
        }
        m->cap = nc;
    }
    m->s[m->n] = (uint32_t)s, m->e[m->n] = (uint32_t)e, m->m[m->n] = (uint8_t)is_match;
    m->n++;
    return 0;
}

/* Pattern::find_matches for &SysRegex over onig's FindMatches iterator (its empty-match rule). */
static int find_matches(sl_tokenizer *t, OnigRegex re, OnigRegion *rg, const char *p, size_t n, tk_matches *m)
{
    m->n = 0;
    const OnigUChar *str = (const OnigUChar *)p, *end = str + n;
    size_t prev = 0, last_end = 0;
    long last_match_end = -1;
    while (last_end <= n) {
        int r = onig_search(re, str, end, str + last_end, end, rg, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            fail(t, "regex search failed (Oniguruma error %d)", r);
            return -1;
        }
        size_t s = (size_t)rg->beg[0], e = (size_t)rg->end[0];
        if (e == s && last_match_end == (long)e) {
            last_end += last_end < n ? utf8_len((unsigned char)p[last_end]) : 1;
            continue;
        }
        last_end = e;
        last_match_end = (long)e;
        if (prev != s && mpush(t, m, prev, s, 0)) return -1;
        if (mpush(t, m, s, e, 1)) return -1;
        prev = e;
    }
    if (prev != n && mpush(t, m, prev, n, 0)) return -1;
    return 0;
}

/* NormalizedString::split's behaviours, in place: afterwards m->m[i] = 1 means "drop piece i". */
static void apply_behavior(tk_matches *m, int behavior)
{
    size_t k = 0;
    int prevm = 0;
    switch (behavior) {
    case TK_SPLIT_ISOLATED:
        memset(m->m, 0, m->n);
        return;
    case TK_SPLIT_REMOVED:
        return;
    case TK_SPLIT_CONTIGUOUS:
    case TK_SPLIT_PREV:
        for (size_t i = 0; i < m->n; i++) {
            int im = m->m[i];
            int join = behavior == TK_SPLIT_CONTIGUOUS ? im == prevm : (im && !prevm);
            if (join && k > 0) m->e[k - 1] = m->e[i];
            else m->s[k] = m->s[i], m->e[k] = m->e[i], m->m[k] = 0, k++;
            prevm = im;
        }
        m->n = k;
        return;
    case TK_SPLIT_NEXT:                   /* the fold runs from the end; results fill from the back */
        k = m->n;
        for (size_t j = m->n; j-- > 0;) {
            int im = m->m[j];
            if (im && !prevm && k < m->n) m->s[k] = m->s[j];
            else k--, m->s[k] = m->s[j], m->e[k] = m->e[j], m->m[k] = 0;
            prevm = im;
        }
        memmove(m->s, m->s + k, (m->n - k) * sizeof *m->s);
        memmove(m->e, m->e + k, (m->n - k) * sizeof *m->e);
        memset(m->m, 0, m->n - k);
        m->n -= k;
        return;
    }
}

static int pretok(sl_tokenizer *t, int depth, const char *p, size_t n);

/* After a ByteLevel step: the last step hands raw bytes to the model (which maps them); a step
 * mid-sequence maps the piece so later steps see ByteLevel chars, as in Rust. */
static int bl_next(sl_tokenizer *t, int depth, const char *p, size_t n)
{
    if (depth + 1 == t->n_steps) return pretok(t, depth + 1, p, n);
    tk_buf *mb = &t->mbuf[depth];
    if (tk_grow((void **)&mb->b, &mb->cap, 2 * n + 1, 1)) {
        fail(t, "out of memory");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += tk_bytelevel_char((uint8_t)p[i], mb->b + k);
    return pretok(t, depth + 1, mb->b, k);
}

static int pretok(sl_tokenizer *t, int depth, const char *p, size_t n)
{
    if (n == 0) return 0;                 /* PreTokenizedString::split drops empty pieces */
    if (depth == t->n_steps) return model(t, p, n);
    tk_step *st = &t->step[depth];
    tk_matches *m = &t->m[depth];
    if (st->kind == TK_STEP_BYTELEVEL) {
        if (st->add_prefix_space && p[0] != ' ') {
            tk_buf *sb = &t->sbuf[depth];
            if (tk_grow((void **)&sb->b, &sb->cap, n + 1, 1)) {
                fail(t, "out of memory");
                return -1;
            }
            sb->b[0] = ' ';
            memcpy(sb->b + 1, p, n);
            p = sb->b;
            n++;
        }
        if (!st->use_regex) return bl_next(t, depth, p, n);
        if (find_matches(t, st->re, st->region, p, n, m)) return -1;
        for (size_t i = 0; i < m->n; i++)
            if (m->e[i] > m->s[i] && bl_next(t, depth, p + m->s[i], m->e[i] - m->s[i])) return -1;
        return 0;
    }
    if (find_matches(t, st->re, st->region, p, n, m)) return -1;
    if (st->invert)
        for (size_t i = 0; i < m->n; i++) m->m[i] = !m->m[i];
    apply_behavior(m, st->behavior);
    for (size_t i = 0; i < m->n; i++)
        if (!m->m[i] && pretok(t, depth + 1, p + m->s[i], m->e[i] - m->s[i])) return -1;
    return 0;
}

// ---------------------------------------------------------------- normalizers (normalizers/unicode.rs)

static uninorm_t uninorm_of(int form)
{
    switch (form) {
    case TK_NFD: return UNINORM_NFD;
    case TK_NFKC: return UNINORM_NFKC;
    case TK_NFKD: return UNINORM_NFKD;
    default: return UNINORM_NFC;
    }
}

int tk_normalize(const int *forms, int nf, const char *s, size_t n, tk_buf *out)
{
    size_t i = 0;
    while (i < n && !((unsigned char)s[i] & 0x80)) i++;
    if (i == n || nf == 0) {              /* ASCII is the same in every form */
        if (tk_grow((void **)&out->b, &out->cap, n ? n : 1, 1)) return -1;
        if (n) memcpy(out->b, s, n);
        out->n = n;
        return 0;
    }
    const uint8_t *cur = (const uint8_t *)s;
    size_t curn = n;
    uint8_t *tmp = NULL;                  /* intermediate result of a Sequence */
    for (int k = 0; k < nf; k++) {
        int last = k == nf - 1;
        size_t rn = last ? out->cap : 0;
        uint8_t *r = u8_normalize(uninorm_of(forms[k]), cur, curn, last ? (uint8_t *)out->b : NULL, &rn);
        if (!r) {
            free(tmp);
            return -1;
        }
        if (!last) {
            free(tmp);
            tmp = r, cur = r, curn = rn;
            continue;
        }
        free(tmp);
        if (r != (uint8_t *)out->b) {     /* did not fit: u8_normalize malloc'd it */
            free(out->b);
            out->b = (char *)r;
            out->cap = rn;
        }
        out->n = rn;
    }
    return 0;
}

// ---------------------------------------------------------------- added tokens (added_vocabulary.rs)

static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)s[i];
    size_t l = utf8_len(c);
    if (l > n - i) l = n - i;
    uint32_t cp = l == 1 ? c : (uint32_t)(c & (0x7F >> l));
    for (size_t k = 1; k < l; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
    *len = l;
    return cp;
}

static int is_white_space(uint32_t c)     /* Unicode White_Space: Rust regex's \s */
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static int is_word_at(const sl_tokenizer *t, const char *s, size_t n, size_t i)  /* Rust's \w */
{
    const OnigUChar *u = (const OnigUChar *)s;
    return onig_match(t->word_re, u, u + n, u + i, t->word_region, ONIG_OPTION_NONE) > 0;
}

static int segment(sl_tokenizer *t, int pass, const char *p, size_t n);

/* AddedVocabulary::find_matches + split_with_indices for one trie (pass 0: tokens with
 * normalized=false, on the input; pass 1: normalized=true, on what pass 0 left). */
static int added_split(sl_tokenizer *t, int pass, const char *p, size_t n)
{
    size_t start_offset = 0;
    for (size_t i = 0; i < n;) {
        if (!t->first[pass][(unsigned char)p[i]]) {
            i++;
            continue;
        }
        int best = -1;                    /* the longest token starting at i */
        size_t blen = 0;                  /* its length in the trie (pass 1: normalized content) */
        const tk_tnode *tr = t->trie[pass];
        for (size_t j = i, node = 0; j < n; j++) {
            int32_t c = tr[node].child;
            while (c >= 0 && tr[c].b != (unsigned char)p[j]) c = tr[c].sib;
            if (c < 0) break;
            node = (size_t)c;
            if (tr[c].tok >= 0) best = tr[c].tok, blen = j + 1 - i;
        }
        if (best < 0) {
            i++;
            continue;
        }
        tk_added *a = &t->added[best];
        size_t start = i, stop = i + blen;
        i = stop;                         /* leftmost-longest, non-overlapping: go on after it */
        if (a->single_word) {             /* \w$ before and ^\w after must not match */
            int start_space = 1, stop_space = stop == n || !is_word_at(t, p, n, stop);
            if (start > 0) {
                size_t q = start - 1;     /* first byte of the char ending at start */
                while (q > 0 && ((unsigned char)p[q] & 0xC0) == 0x80) q--;
                start_space = !is_word_at(t, p, n, q);
            }
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t q = start;
            while (q > 0) {
                size_t r = q - 1, l;
                while (r > 0 && ((unsigned char)p[r] & 0xC0) == 0x80) r--;
                if (!is_white_space(cp_at(p, n, r, &l))) break;
                q = r;
            }
            start = q > start_offset ? q : start_offset;
        }
        if (a->rstrip) {
            size_t l;
            while (stop < n && is_white_space(cp_at(p, n, stop, &l))) stop += l;
        }
        if (start_offset < start && segment(t, pass, p + start_offset, start - start_offset)) return -1;
        if (tk_grow((void **)&t->out, &t->capout, t->nout + 1, sizeof *t->out)) {
            fail(t, "out of memory");
            return -1;
        }
        t->out[t->nout++] = a->id;
        start_offset = stop;
        if (i < stop) i = stop;           /* rstrip ate past the scan point */
    }
    if (start_offset < n) return segment(t, pass, p + start_offset, n - start_offset);
    return 0;
}

/* A piece no added token of `pass` matched: pass 0 normalizes it (extract_and_normalize), then
 * on to pass 1 (tokens with normalized=true, matched on the normalized text), or to the
 * pre-tokenizer. */
static int segment(sl_tokenizer *t, int pass, const char *p, size_t n)
{
    if (n == 0) return 0;
    if (pass == 0 && t->n_norm) {
        if (tk_normalize(t->norm, t->n_norm, p, n, &t->nbuf)) {
            fail(t, "out of memory");
            return -1;
        }
        p = t->nbuf.b, n = t->nbuf.n;
        if (n == 0) return 0;
    }
    if (pass == 0 && t->has_norm) return added_split(t, 1, p, n);
    return pretok(t, 0, p, n);
}

// ---------------------------------------------------------------- encode

static int push_ids(sl_tokenizer *t, const int32_t *ids, int n)
{
    if (tk_grow((void **)&t->out, &t->capout, t->nout + (size_t)n, sizeof *t->out)) return -1;
    memcpy(t->out + t->nout, ids, (size_t)n * sizeof *ids);
    t->nout += (size_t)n;
    return 0;
}

int sl_tokenizer_encode(sl_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                        size_t *n, char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (!sl_utf8_valid(text, len)) {
        if (err) snprintf(err, errlen, "text is not valid UTF-8");
        return -1;
    }
    t->failed = 0, t->err = err, t->errlen = errlen, t->nout = 0;
    int r = 0;
    if (add_special && t->n_pre) r = push_ids(t, t->pre_ids, t->n_pre);
    if (r == 0 && t->is_bytes) {
        if (tk_grow((void **)&t->out, &t->capout, t->nout + len, sizeof *t->out)) r = -1;
        for (size_t i = 0; r == 0 && i < len; i++) t->out[t->nout++] = (uint8_t)text[i];
    } else if (r == 0 && len) {
        r = t->has_raw ? added_split(t, 0, text, len) : segment(t, 0, text, len);
    }
    if (r == 0 && add_special && t->n_post) r = push_ids(t, t->post_ids, t->n_post);
    if (r == 0) {
        *ids = malloc((t->nout ? t->nout : 1) * sizeof **ids);
        if (!*ids) r = -1;
        else if (t->nout) memcpy(*ids, t->out, t->nout * sizeof **ids), *n = t->nout;
    }
    if (r && !t->failed && err) snprintf(err, errlen, "out of memory");
    if (t->capout > (4u << 20)) {         /* don't keep a huge prompt's buffer around */
        free(t->out);
        t->out = NULL, t->capout = 0;
    }
    t->err = NULL;
    return r ? -1 : 0;
}
