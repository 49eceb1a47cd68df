/* tokenizer_load.c — tokenizer.json -> sl_tokenizer (see tokenizer.h for what is supported).
 * Unsupported components are refused with an error naming them: a tokenizer that silently
 * differs from `tokenizers` would feed the model text it was not trained on. */
#include "tokenizer_impl.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* GPT-2's pattern, as pre_tokenizers/byte_level.rs */
static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust regex's \w (Unicode): Alphabetic, M, Nd, Pc, Join_Control */
static const char WORD_RE[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";

static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const char *type_of(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(no type)";
}

static int get_bool(json_t *o, const char *k, int dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int set_token(sl_tokenizer *t, int32_t id, const char *s, size_t n)
{
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    free(t->tok_str[id]);
    t->tok_str[id] = c;
    t->tok_len[id] = (uint32_t)n;
    return 0;
}

// ---------------------------------------------------------------- model (BPE)

static int load_model(sl_tokenizer *t, json_t *m, json_t *added, char *err, size_t errlen)
{
    if (!json_is_object(m)) return errf(err, errlen, "tokenizer.json: no model");
    const char *ty = json_string_value(json_object_get(m, "type"));
    if (ty && strcmp(ty, "BPE") != 0) return errf(err, errlen, "model %s is not supported (only BPE)", ty);
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return errf(err, errlen, "model: BPE needs a vocab object and a merges array");
    json_t *d = json_object_get(m, "dropout");
    if (json_is_number(d) && json_number_value(d) != 0.0)
        return errf(err, errlen, "model: BPE dropout is not supported (not deterministic)");
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(m, affix[i]));
        if (v && *v) return errf(err, errlen, "model: BPE %s is not supported", affix[i]);
    }
    t->byte_fallback = get_bool(m, "byte_fallback", 0);
    t->ignore_merges = get_bool(m, "ignore_merges", 0);
    t->fuse_unk = get_bool(m, "fuse_unk", 0);

    /* ids: the largest of the vocab and added tokens sizes the per-id arrays */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= TK_MAX_ID)
            return errf(err, errlen, "model: vocab id of \"%.40s\" is not an integer in [0, %d)", key, TK_MAX_ID);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TK_MAX_ID)
            return errf(err, errlen, "added_tokens[%zu]: id is not an integer in [0, %d)", i, TK_MAX_ID);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    t->n_ids = (int32_t)(max_id + 1);
    t->tok_str = calloc((size_t)t->n_ids + 1, sizeof *t->tok_str);
    t->tok_len = calloc((size_t)t->n_ids + 1, sizeof *t->tok_len);
    t->dec = calloc((size_t)t->n_ids + 1, sizeof *t->dec);
    t->dec_len = calloc((size_t)t->n_ids + 1, sizeof *t->dec_len);
    if (!t->tok_str || !t->tok_len || !t->dec || !t->dec_len) return errf(err, errlen, "out of memory");
    size_t total = 0;
    json_object_foreach(vocab, key, val) total += strlen(key);
    if (!(t->vocab_arena = malloc(total + 1))) return errf(err, errlen, "out of memory");
    total = 0;
    json_object_foreach(vocab, key, val) {   /* the map owns its keys: an id listed twice keeps both */
        int32_t id = (int32_t)json_integer_value(val);
        size_t n = strlen(key);
        memcpy(t->vocab_arena + total, key, n);
        if (tk_strmap_put(&t->vocab, t->vocab_arena + total, (uint32_t)n, id) || set_token(t, id, key, n))
            return errf(err, errlen, "out of memory");
        total += n;
    }

    t->unk_id = -1;
    const char *unk = json_string_value(json_object_get(m, "unk_token"));
    if (unk && (t->unk_id = tk_strmap_get(&t->vocab, unk, strlen(unk))) < 0)
        return errf(err, errlen, "model: unk_token \"%.40s\" is not in the vocab", unk);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fb_id[b] = tk_strmap_get(&t->vocab, name, 6);
    }

    char *buf = NULL;
    size_t cap = 0;
    json_array_foreach(merges, i, val) {
        const char *a, *b;
        size_t an, bn;
        if (json_is_string(val)) {        /* legacy "a b": exactly one space */
            a = json_string_value(val);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(buf);
                return errf(err, errlen, "model: merges[%zu] \"%.40s\" is not two tokens split by one space", i, a);
            }
            an = (size_t)(sp - a), b = sp + 1, bn = strlen(b);
        } else if (json_is_array(val) && json_array_size(val) == 2 && json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            a = json_string_value(json_array_get(val, 0)), an = json_string_length(json_array_get(val, 0));
            b = json_string_value(json_array_get(val, 1)), bn = json_string_length(json_array_get(val, 1));
        } else {
            free(buf);
            return errf(err, errlen, "model: merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (an + bn > cap) {
            cap = 2 * (an + bn);
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return errf(err, errlen, "out of memory");
            }
            buf = nb;
        }
        memcpy(buf, a, an);
        memcpy(buf + an, b, bn);
        int32_t ia = tk_strmap_get(&t->vocab, a, an), ib = tk_strmap_get(&t->vocab, b, bn);
        int32_t in = tk_strmap_get(&t->vocab, buf, an + bn);
        if (ia < 0 || ib < 0 || in < 0) {
            int r = errf(err, errlen, "model: merges[%zu]: \"%.*s\" + \"%.*s\" -> a token not in the vocab", i,
                         (int)(an > 40 ? 40 : an), a, (int)(bn > 40 ? 40 : bn), b);
            free(buf);
            return r;
        }
        if (tk_merge_put(&t->merges, ia, ib, (uint32_t)i, in)) {
            free(buf);
            return errf(err, errlen, "out of memory");
        }
    }
    free(buf);
    return 0;
}

// ---------------------------------------------------------------- added tokens

static int32_t trie_node(sl_tokenizer *t, int pass, uint8_t b)
{
    if (t->ntrie[pass] == t->ctrie[pass]) {
        int32_t nc = t->ctrie[pass] ? 2 * t->ctrie[pass] : 256;
        tk_tnode *nt = realloc(t->trie[pass], (size_t)nc * sizeof *nt);
        if (!nt) return -1;
        t->trie[pass] = nt;
        t->ctrie[pass] = nc;
    }
    t->trie[pass][t->ntrie[pass]] = (tk_tnode){-1, -1, -1, b};
    return t->ntrie[pass]++;
}

/* Leftmost-longest matching walks this trie (tokenizer.c added_split). len > 0. */
static int trie_add(sl_tokenizer *t, int pass, const char *content, uint32_t len, int k)
{
    if (t->ntrie[pass] == 0 && trie_node(t, pass, 0) < 0) return -1;
    int32_t node = 0;
    for (uint32_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)content[i];
        int32_t c = t->trie[pass][node].child;
        while (c >= 0 && t->trie[pass][c].b != b) c = t->trie[pass][c].sib;
        if (c < 0) {
            if ((c = trie_node(t, pass, b)) < 0) return -1;
            t->trie[pass][c].sib = t->trie[pass][node].child;
            t->trie[pass][node].child = c;
        }
        node = c;
    }
    t->trie[pass][node].tok = k;           /* the same content twice: the later one wins */
    t->first[pass][(uint8_t)content[0]] = 1;
    if (pass) t->has_norm = 1;
    else t->has_raw = 1;
    return 0;
}

static int load_added(sl_tokenizer *t, json_t *added, char *err, size_t errlen)
{
    if (!added || json_is_null(added)) return 0;
    if (!json_is_array(added)) return errf(err, errlen, "added_tokens is not an array");
    t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
    if (!t->added) return errf(err, errlen, "out of memory");
    if (!(t->special = calloc((size_t)t->n_ids + 1, 1))) return errf(err, errlen, "out of memory");
    size_t i;
    json_t *v;
    int any_single = 0;
    json_array_foreach(added, i, v) {
        json_t *c = json_object_get(v, "content");
        if (!json_is_string(c)) return errf(err, errlen, "added_tokens[%zu]: no content", i);
        size_t n = json_string_length(c);
        if (n == 0) continue;             /* Rust ignores empty added tokens */
        const char *s = json_string_value(c);
        int32_t id = tk_strmap_get(&t->vocab, s, n);      /* token_to_id: the model's id wins */
        if (id < 0) id = (int32_t)json_integer_value(json_object_get(v, "id"));
        tk_added *a = &t->added[t->n_added++];
        if (!(a->content = malloc(n + 1))) return errf(err, errlen, "out of memory");
        memcpy(a->content, s, n + 1);
        a->len = (uint32_t)n;
        a->id = id;
        a->single_word = (uint8_t)get_bool(v, "single_word", 0);
        a->lstrip = (uint8_t)get_bool(v, "lstrip", 0);
        a->rstrip = (uint8_t)get_bool(v, "rstrip", 0);
        a->special = (uint8_t)get_bool(v, "special", 0);
        a->normalized = (uint8_t)get_bool(v, "normalized", !a->special);
        any_single |= a->single_word;
        t->special[id] = a->special;
        if (set_token(t, id, s, n)) return errf(err, errlen, "out of memory");
    }
    /* refresh_added_tokens: normalized=true tokens are matched by their normalized content */
    for (int k = 0; k < t->n_added; k++) {
        tk_added *a = &t->added[k];
        const char *c = a->content;
        uint32_t len = a->len;
        if (a->normalized && t->n_norm) {
            if (tk_normalize(t->norm, t->n_norm, a->content, a->len, &t->nbuf))
                return errf(err, errlen, "out of memory");
            c = t->nbuf.b, len = (uint32_t)t->nbuf.n;
        }
        if (len && trie_add(t, a->normalized, c, len, k)) return errf(err, errlen, "out of memory");
    }
    if (any_single) {
        if (!(t->word_re = tk_regex(WORD_RE, strlen(WORD_RE), err, errlen))) return -1;
        if (!(t->word_region = onig_region_new())) return errf(err, errlen, "out of memory");
    }
    return 0;
}

// ---------------------------------------------------------------- normalizer, pre-tokenizer

/* Sequences flatten into t->norm[]; an empty Sequence (DeepSeek-V3's) is no normalizer. */
static int load_normalizer(sl_tokenizer *t, json_t *n, char *err, size_t errlen)
{
    if (!n || json_is_null(n)) return 0;
    const char *ty = type_of(n);
    if (strcmp(ty, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(n, "normalizers"), i, v)
            if (load_normalizer(t, v, err, errlen)) return -1;
        return 0;
    }
    static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD"};
    static const int forms[] = {TK_NFC, TK_NFD, TK_NFKC, TK_NFKD};
    for (int k = 0; k < 4; k++)
        if (strcmp(ty, names[k]) == 0) {
            if (t->n_norm == TK_MAX_NORM) return errf(err, errlen, "normalizer: more than %d in a Sequence", TK_MAX_NORM);
            t->norm[t->n_norm++] = forms[k];
            return 0;
        }
    return errf(err, errlen, "normalizer %s is not supported (only none, NFC, NFD, NFKC, NFKD or a Sequence of those)", ty);
}

static int add_step(sl_tokenizer *t, json_t *p, char *err, size_t errlen)
{
    const char *ty = type_of(p);
    if (strcmp(ty, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, v)
            if (add_step(t, v, err, errlen)) return -1;
        return 0;
    }
    if (t->n_steps == TK_MAX_STEPS) return errf(err, errlen, "pre_tokenizer: more than %d steps", TK_MAX_STEPS);
    tk_step *st = &t->step[t->n_steps];
    if (strcmp(ty, "ByteLevel") == 0) {
        st->kind = TK_STEP_BYTELEVEL;
        st->add_prefix_space = get_bool(p, "add_prefix_space", 1);
        st->use_regex = get_bool(p, "use_regex", 1);
        if (st->use_regex && !(st->re = tk_regex(GPT2_RE, strlen(GPT2_RE), err, errlen))) return -1;
    } else if (strcmp(ty, "Split") == 0) {
        st->kind = TK_STEP_SPLIT;
        json_t *pat = json_object_get(p, "pattern");
        json_t *rx = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        st->behavior = -1;
        for (int k = 0; beh && k < 5; k++)
            if (strcmp(beh, names[k]) == 0) st->behavior = k;
        if (st->behavior < 0) return errf(err, errlen, "pre_tokenizer Split: behavior %s is not supported", beh ? beh : "(none)");
        st->invert = get_bool(p, "invert", 0);
        if (json_is_string(rx)) {
            st->re = tk_regex(json_string_value(rx), json_string_length(rx), err, errlen);
        } else if (json_is_string(str)) {
            /* regex::escape(s) compiled by onig: a literal; escape every ASCII punctuation */
            size_t n = json_string_length(str), k = 0;
            const char *s = json_string_value(str);
            if (n == 0) return errf(err, errlen, "pre_tokenizer Split: empty String pattern is not supported");
            char *e = malloc(2 * n + 1);
            if (!e) return errf(err, errlen, "out of memory");
            for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x80 && c > 0x20 && c != 0x7F && !((c | 32) >= 'a' && (c | 32) <= 'z') && !(c >= '0' && c <= '9'))
                    e[k++] = '\\';
                e[k++] = (char)c;
            }
            st->re = tk_regex(e, k, err, errlen);
            free(e);
        } else {
            return errf(err, errlen, "pre_tokenizer Split: pattern is neither Regex nor String");
        }
        if (!st->re) return -1;
    } else {
        return errf(err, errlen, "pre_tokenizer %s is not supported (only Split, ByteLevel, Sequence)", ty);
    }
    if (!(st->region = onig_region_new())) return errf(err, errlen, "out of memory");
    t->n_steps++;
    return 0;
}

// ---------------------------------------------------------------- post-processor, decoder

static int append_ids(int32_t **v, int *n, const int32_t *ids, int k, int at_front)
{
    int32_t *nv = realloc(*v, (size_t)(*n + k + 1) * sizeof *nv);
    if (!nv) return -1;
    if (at_front) memmove(nv + k, nv, (size_t)*n * sizeof *nv), memcpy(nv, ids, (size_t)k * sizeof *nv);
    else memcpy(nv + *n, ids, (size_t)k * sizeof *nv);
    *v = nv;
    *n += k;
    return 0;
}

/* A post-processor's id: an integer naming a token of this tokenizer (an id past the vocabulary would
 * reach the model as a token the tokenizer cannot decode). */
static int post_id(const sl_tokenizer *t, const json_t *v, int32_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= t->n_ids) return -1;
    *out = (int32_t)json_integer_value(v);
    return 0;
}

/* Wrap what is there: pre = mine + pre, post = post + mine (Sequence applies in order). */
static int load_post(sl_tokenizer *t, json_t *p, char *err, size_t errlen)
{
    if (!p || json_is_null(p)) return 0;
    const char *ty = type_of(p);
    if (strcmp(ty, "ByteLevel") == 0) return 0;   /* offsets only */
    if (strcmp(ty, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(p, "processors"), i, v)
            if (load_post(t, v, err, errlen)) return -1;
        return 0;
    }
    int32_t pre[64], post[64];
    int npre = 0, npost = 0;
    if (strcmp(ty, "RobertaProcessing") == 0 || strcmp(ty, "BertProcessing") == 0) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if (post_id(t, json_array_get(cls, 1), &pre[npre++]) || post_id(t, json_array_get(sep, 1), &post[npost++]))
            return errf(err, errlen, "post_processor %s: cls/sep are not [token, id] with an id of the vocabulary", ty);
    } else if (strcmp(ty, "TemplateProcessing") == 0) {
        json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens"), *piece;
        size_t i;
        int seen_a = 0;
        json_array_foreach(single, i, piece) {
            json_t *sq = json_object_get(piece, "Sequence"), *sp = json_object_get(piece, "SpecialToken");
            if (sq) {
                const char *which = json_string_value(json_object_get(sq, "id"));
                if (!which || strcmp(which, "A") != 0 || seen_a)
                    return errf(err, errlen, "post_processor TemplateProcessing: single template must hold $A once");
                seen_a = 1;
                continue;
            }
            const char *name = json_string_value(json_object_get(sp, "id"));
            json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
            if (!json_is_array(ids)) return errf(err, errlen, "post_processor TemplateProcessing: unknown special %s", name ? name : "?");
            size_t k;
            json_t *idv;
            json_array_foreach(ids, k, idv) {
                if (npre + npost >= 64 || post_id(t, idv, seen_a ? &post[npost++] : &pre[npre++]))
                    return errf(err, errlen, "post_processor TemplateProcessing: special %s: ids must be ids of the vocabulary",
                                name);
            }
        }
        if (!seen_a) return errf(err, errlen, "post_processor TemplateProcessing: single template has no $A");
    } else {
        return errf(err, errlen, "post_processor %s is not supported", ty);
    }
    if (append_ids(&t->pre_ids, &t->n_pre, pre, npre, 1) || append_ids(&t->post_ids, &t->n_post, post, npost, 0))
        return errf(err, errlen, "out of memory");
    return 0;
}

static int build_decoder(sl_tokenizer *t, json_t *d, char *err, size_t errlen)
{
    if (!d || json_is_null(d)) t->decoder = TK_DEC_JOIN;
    else if (strcmp(type_of(d), "ByteLevel") == 0) t->decoder = TK_DEC_BYTELEVEL;
    else return errf(err, errlen, "decoder %s is not supported (only ByteLevel or none)", type_of(d));
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (!t->tok_str[id]) continue;
        size_t n = t->tok_len[id];
        char *b = malloc(n + 1);
        if (!b) return errf(err, errlen, "out of memory");
        size_t bn;
        if (t->decoder == TK_DEC_BYTELEVEL && tk_bytelevel_decode(t->tok_str[id], n, b, &bn)) {
            t->dec_len[id] = (uint32_t)bn;
        } else {                          /* not all chars in the alphabet: the token's own bytes */
            memcpy(b, t->tok_str[id], n);
            t->dec_len[id] = (uint32_t)n;
        }
        t->dec[id] = b;
    }
    return 0;
}

// ---------------------------------------------------------------- public

static int build(sl_tokenizer *t, json_t *root, char *err, size_t errlen)
{
    if (!json_is_object(root)) return errf(err, errlen, "tokenizer.json: not a JSON object");
    json_t *tr = json_object_get(root, "truncation"), *pad = json_object_get(root, "padding");
    if (tr && !json_is_null(tr)) return errf(err, errlen, "truncation is set in tokenizer.json: not supported");
    if (pad && !json_is_null(pad)) return errf(err, errlen, "padding is set in tokenizer.json: not supported");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added)) return errf(err, errlen, "added_tokens is not an array");
    if (!json_is_array(added)) added = NULL;
    if (load_normalizer(t, json_object_get(root, "normalizer"), err, errlen)) return -1;
    if (load_model(t, json_object_get(root, "model"), added, err, errlen)) return -1;
    if (load_added(t, added, err, errlen)) return -1;
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (pre && !json_is_null(pre) && add_step(t, pre, err, errlen)) return -1;
    t->bl_last = t->n_steps > 0 && t->step[t->n_steps - 1].kind == TK_STEP_BYTELEVEL;
    for (int b = 0; b < 256; b++) {
        char c[2];
        size_t n = tk_bytelevel_char((uint8_t)b, c);
        t->bl_id[b] = tk_strmap_get(&t->vocab, c, n);
    }
    if (load_post(t, json_object_get(root, "post_processor"), err, errlen)) return -1;
    return build_decoder(t, json_object_get(root, "decoder"), err, errlen);
}

int sl_tokenizer_load_json(const char *text, size_t len, sl_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!root) return errf(err, errlen, "tokenizer.json: line %d: %s", je.line, je.text);
    sl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        return errf(err, errlen, "out of memory");
    }
    int r = build(t, root, err, errlen);
    json_decref(root);
    if (r) {
        sl_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int sl_tokenizer_load(const char *path, sl_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return errf(err, errlen, "%s: cannot open", path);
    char *buf = NULL;
    size_t n = 0, cap = 0, k;
    do {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return errf(err, errlen, "out of memory");
            }
            buf = nb;
        }
        k = fread(buf + n, 1, cap - n, f);
        n += k;
    } while (k > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return errf(err, errlen, "%s: read error", path);
    }
    int r = sl_tokenizer_load_json(buf, n, out, err, errlen);
    if (r && err && errlen && strncmp(err, "tokenizer.json", 14) != 0) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    free(buf);
    return r;
}

int sl_tokenizer_bytes(sl_tokenizer **out, char *err, size_t errlen)
{
    sl_tokenizer *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t) return errf(err, errlen, "out of memory");
    t->is_bytes = 1;
    t->n_ids = 256;
    t->decoder = TK_DEC_BYTELEVEL;
    t->dec = calloc(256, sizeof *t->dec);
    t->dec_len = calloc(256, sizeof *t->dec_len);
    int ok = t->dec && t->dec_len;
    for (int b = 0; ok && b < 256; b++) {
        if (!(t->dec[b] = malloc(1))) ok = 0;
        else t->dec[b][0] = (char)b, t->dec_len[b] = 1;
    }
    if (!ok) {
        sl_tokenizer_free(t);
        return errf(err, errlen, "out of memory");
    }
    *out = t;
    return 0;
}

/* transformers (LlamaTokenizerFast.update_post_processor) replaces the post-processor with
 * "bos? $A eos?" from tokenizer_config.json's add_bos_token / add_eos_token. */
static int apply_config(sl_tokenizer *t, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, R_OK) != 0) return 0;
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c) return errf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    json_t *ab = json_object_get(c, "add_bos_token"), *ae = json_object_get(c, "add_eos_token");
    int r = 0;
    if (json_is_boolean(ab) || json_is_boolean(ae)) {
        t->n_pre = t->n_post = 0;
        const char *which[2] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2 && r == 0; k++) {
            if (!json_is_true(k ? ae : ab)) continue;
            json_t *tok = json_object_get(c, which[k]);
            if (json_is_object(tok)) tok = json_object_get(tok, "content");
            const char *s = json_string_value(tok);
            int32_t id = s ? sl_tokenizer_token_id(t, s, json_string_length(tok)) : -1;
            if (id < 0) r = errf(err, errlen, "%s: %s is not a token of tokenizer.json", path, which[k]);
            else if (append_ids(k ? &t->post_ids : &t->pre_ids, k ? &t->n_post : &t->n_pre, &id, 1, 0))
                r = errf(err, errlen, "out of memory");
        }
    }
    json_decref(c);
    return r;
}

int sl_tokenizer_open_for_model(const char *dir, int vocab_size, sl_tokenizer **out, char *err, size_t errlen)
{
    char path[4096];
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, F_OK) == 0) {
        if (sl_tokenizer_load(path, out, err, errlen)) return -1;
        if (apply_config(*out, dir, err, errlen)) {
            sl_tokenizer_free(*out);
            *out = NULL;
            return -1;
        }
        return 0;
    }
    if (vocab_size >= 256) return sl_tokenizer_bytes(out, err, errlen);
    return errf(err, errlen, "%s has no tokenizer.json and its vocab_size %d is too small for bytes: "
                "submit prompts as token ids", dir, vocab_size);
}

void sl_tokenizer_free(sl_tokenizer *t)
{
    if (!t) return;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (t->tok_str) free(t->tok_str[id]);
        if (t->dec) free(t->dec[id]);
    }
    free(t->tok_str), free(t->tok_len), free(t->dec), free(t->dec_len), free(t->special);
    tk_strmap_free(&t->vocab);
    free(t->vocab_arena);
    free(t->merges.key), free(t->merges.rank), free(t->merges.new_id);
    for (int k = 0; k < t->n_added; k++) free(t->added[k].content);
    free(t->added);
    free(t->trie[0]), free(t->trie[1]);
    if (t->word_re) onig_free(t->word_re);
    if (t->word_region) onig_region_free(t->word_region, 1);
    for (int s = 0; s < TK_MAX_STEPS; s++) {
        if (t->step[s].re) onig_free(t->step[s].re);
        if (t->step[s].region) onig_region_free(t->step[s].region, 1);
        free(t->m[s].s), free(t->m[s].e), free(t->m[s].m);
        free(t->sbuf[s].b), free(t->mbuf[s].b);
    }
    free(t->pre_ids), free(t->post_ids);
    tk_cache *c = &t->cache;
    free(c->hash), free(c->koff), free(c->klen), free(c->ioff), free(c->ilen), free(c->kbuf), free(c->ibuf);
    free(t->wbuf.b), free(t->nbuf.b), free(t->bw), free(t->bh), free(t->out);
    free(t);
}

int sl_tokenizer_n_ids(const sl_tokenizer *t) { return t->n_ids; }

const char *sl_tokenizer_token_bytes(const sl_tokenizer *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->dec[id]) return NULL;
    *len = t->dec_len[id];
    return t->dec[id];
}

int sl_tokenizer_is_special(const sl_tokenizer *t, int32_t id)
{
    return t->special && id >= 0 && id < t->n_ids && t->special[id];
}
int sl_tokenizer_is_bytes(const sl_tokenizer *t) { return t->is_bytes; }

int32_t sl_tokenizer_token_id(const sl_tokenizer *t, const char *tok, size_t len)
{
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len == len && memcmp(t->added[k].content, tok, len) == 0) return t->added[k].id;
    if (t->is_bytes) return len == 1 ? (uint8_t)tok[0] : -1;
    return tk_strmap_get(&t->vocab, tok, len);
}
