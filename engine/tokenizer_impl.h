/* tokenizer_impl.h — private layout of sl_tokenizer, shared by tokenizer.c (encode/decode) and
 * tokenizer_load.c (tokenizer.json parsing). Not part of the public surface. */
#ifndef SLUICE_TOKENIZER_IMPL_H
#define SLUICE_TOKENIZER_IMPL_H

#include "tokenizer.h"

#include <oniguruma.h>
#include <stdint.h>

#define TK_MAX_STEPS 16          /* pre-tokenizer steps after flattening Sequences */
#define TK_MAX_ID (1 << 24)      /* refuse ids past this: a hostile file can't make us allocate GBs */
#define TK_CACHE_BITS 16         /* BPE cache: 64k slots */
#define TK_CACHE_MAXKEY 256      /* pre-tokens this long or longer are not cached (as Rust) */

enum { TK_SPLIT_ISOLATED, TK_SPLIT_REMOVED, TK_SPLIT_PREV, TK_SPLIT_NEXT, TK_SPLIT_CONTIGUOUS };
enum { TK_STEP_SPLIT, TK_STEP_BYTELEVEL };
enum { TK_DEC_JOIN, TK_DEC_BYTELEVEL };
enum { TK_NFC, TK_NFD, TK_NFKC, TK_NFKD };   /* normalizers (libunistring's u8_normalize) */
#define TK_MAX_NORM 8            /* normalizers after flattening Sequences */

typedef struct {
    int kind;                    /* TK_STEP_* */
    OnigRegex re;                 /* SPLIT: the pattern; BYTELEVEL with use_regex: the GPT-2 one */
    OnigRegion *region;
    int behavior, invert;        /* SPLIT */
    int add_prefix_space, use_regex; /* BYTELEVEL */
} tk_step;

typedef struct {                 /* added-token trie node; node 0 is the root */
    int32_t child, sib;          /* first child, next sibling (-1 = none) */
    int32_t tok;                 /* index into added[] of the token ending here, or -1 */
    uint8_t b;
} tk_tnode;

typedef struct {
    char *content;
    uint32_t len;
    int32_t id;
    uint8_t single_word, lstrip, rstrip, normalized, special;
} tk_added;

/* string -> id, open addressing; keys point into an arena owned by the table */
typedef struct {
    uint32_t *slot;              /* index + 1 into keys, 0 = empty */
    uint32_t mask;
    const char **key;
    uint32_t *klen;
    int32_t *val;
    uint32_t n, cap;
} tk_strmap;

typedef struct {                 /* (left id, right id) -> (rank, new id) */
    uint64_t *key;               /* (a << 32 | b) + 1, 0 = empty */
    uint32_t *rank;
    int32_t *new_id;
    uint32_t mask, n;
} tk_mergemap;

typedef struct {                 /* cache of pre-token -> ids */
    uint64_t *hash;              /* 0 = empty */
    uint32_t *koff, *klen, *ioff, *ilen;
    char *kbuf;
    size_t kn, kcap;
    int32_t *ibuf;
    size_t in, icap;
    uint32_t used;
} tk_cache;

typedef struct {                 /* growable scratch */
    char *b;
    size_t n, cap;
} tk_buf;

typedef struct {
    uint32_t *s, *e;
    uint8_t *m;
    size_t n, cap;
} tk_matches;

struct sl_tokenizer {
    int is_bytes;
    int32_t n_ids;
    /* model */
    tk_strmap vocab;
    char *vocab_arena;           /* the vocab map's keys */
    tk_mergemap merges;
    char **tok_str;              /* per id: token string (added content over model), or NULL */
    uint32_t *tok_len;
    char **dec;                  /* per id: bytes the decoder makes of the token */
    uint32_t *dec_len;
    uint8_t *special;            /* per id: an added token marked special */
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;
    int32_t fb_id[256];          /* <0xXX> ids, -1 absent */
    /* added tokens */
    tk_added *added;
    int n_added;
    int has_raw, has_norm;       /* any with normalized false / true */
    OnigRegex word_re;            /* \w of Rust's regex, for single_word */
    OnigRegion *word_region;
    /* normalizer: applied in order to the text between normalized=false added tokens */
    int norm[TK_MAX_NORM];       /* TK_NFC ... */
    int n_norm;
    tk_buf nbuf;                 /* encode scratch: the normalized piece */
    /* pre-tokenizer */
    tk_step step[TK_MAX_STEPS];
    int n_steps;
    int bl_last;                 /* last step is ByteLevel: map bytes at the model */
    int32_t bl_id[256];          /* vocab id of each byte's ByteLevel char */
    /* post-processor (add_special) */
    int32_t *pre_ids, *post_ids;
    int n_pre, n_post;
    /* decoder */
    int decoder;
    /* encode scratch (one thread at a time) */
    tk_cache cache;
    tk_matches m[TK_MAX_STEPS];
    tk_buf sbuf[TK_MAX_STEPS];
    tk_buf mbuf[TK_MAX_STEPS];   /* ByteLevel mid-sequence: mapped pieces */
    tk_buf wbuf;                 /* BPE word scratch: model-space string */
    void *bw, *bh;               /* BPE symbols and heap (types private to tokenizer.c) */
    size_t cbw, cbh;
    tk_tnode *trie[2];           /* added tokens as byte tries: [0] normalized=false, [1] true */
    int32_t ntrie[2], ctrie[2];
    uint8_t first[2][256];       /* bytes an added token can start with */
    int32_t *out;
    size_t nout, capout;
    int failed;
    char *err;
    size_t errlen;
};

/* shared helpers (tokenizer.c) */
uint64_t tk_hash(const char *s, size_t n);
/* Grow *p (capacity *cap elements of elt bytes) to hold at least need elements; 0 or -1 (no memory). */
int tk_grow(void **p, size_t *cap, size_t need, size_t elt);
int tk_strmap_put(tk_strmap *m, const char *k, uint32_t kn, int32_t v);
int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t kn);
void tk_strmap_free(tk_strmap *m);
int tk_merge_put(tk_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id);
size_t tk_bytelevel_char(uint8_t b, char out[2]);   /* UTF-8 of byte b's ByteLevel char */
int tk_bytelevel_decode(const char *s, size_t n, char *out, size_t *outn); /* 1 if all chars map */
OnigRegex tk_regex(const char *pat, size_t n, char *err, size_t errlen);
void tk_init_onig(void);
/* Apply the normalizers forms[0..nf) in order to s[0..n) (valid UTF-8), result in out->b[0..out->n)
 * (out reused; s must not point into out). 0, or -1 (no memory). Exposed for the tests. */
int tk_normalize(const int *forms, int nf, const char *s, size_t n, tk_buf *out);

#endif
