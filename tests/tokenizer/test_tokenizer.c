/* test_tokenizer.c — engine/tokenizer against vectors recorded from HF `tokenizers` 0.23.2
 * (tests/data/tokenizer/, made by tests/tokenizer/make_vectors.py), plus properties on fresh
 * random text (round trip, streaming == whole decode), the byte fallback, and load errors.
 *   test_tokenizer DATA_DIR [seed]
 */
#include "tokenizer.h"
#include "random_utf8.h"
#include "check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) free(b), b = NULL;
    fclose(f);
    if (b) b[sz] = 0, *n = (size_t)sz;
    return b;
}

/* base tokenizer.json with components replaced (variants.json) */
static sl_tokenizer *variant(json_t *base, json_t *over)
{
    json_t *d = json_deep_copy(base);
    const char *k;
    json_t *v;
    json_object_foreach(over, k, v) {
        if (!strcmp(k, "model_flags")) json_object_update(json_object_get(d, "model"), v);
        else json_object_set(d, k, v);
    }
    char *s = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    sl_tokenizer *t = NULL;
    char err[256];
    if (!s || sl_tokenizer_load_json(s, strlen(s), &t, err, sizeof err)) {
        fprintf(stderr, "variant load: %s\n", s ? err : "dump failed");
        t = NULL;
    }
    free(s);
    return t;
}

/* decode == expected; streaming decode, one id at a time, concatenates to the same */
static void check_decode(const sl_tokenizer *t, const int32_t *ids, size_t n, const char *exp, size_t explen,
                         const char *what)
{
    char *text;
    size_t len;
    CHECK(sl_tokenizer_decode(t, ids, n, &text, &len) == 0, "decode failed");
    if (exp) CHECK(len == explen && memcmp(text, exp, len) == 0, "%s: decode differs (%zu vs %zu bytes)", what, len, explen);
    CHECK(sl_utf8_valid(text, len), "%s: decode is not valid UTF-8", what);
    sl_detok d;
    sl_detok_init(&d, t);
    size_t cap = len + 16, sn = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t pn;
        int r = i < n ? sl_detok_push(&d, ids[i], &p, &pn) : sl_detok_flush(&d, &p, &pn);
        CHECK(r == 0, "detok failed");
        CHECK(sl_utf8_valid(p, pn), "%s: streamed chunk %zu is not valid UTF-8", what, i);
        if (sn + pn > cap) cap = 2 * (sn + pn), s = realloc(s, cap);
        memcpy(s + sn, p, pn);
        sn += pn;
    }
    CHECK(sn == len && memcmp(s, text, len) == 0, "%s: streaming decode differs from decode", what);
    sl_detok_free(&d);
    free(s);
    free(text);
}

static int vectors(const char *dir, sl_tokenizer *base_t, json_t *base, json_t *variants)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/vectors.jsonl.gz'", dir);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    sl_tokenizer *vt[64] = {0};
    const char *vname[64];
    int nv = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long n_enc = 0, n_dec = 0, n_rt = 0, lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        CHECK(j, "vectors line %ld: %s", lineno, je.text);
        if (!j) continue;
        const char *kind = json_string_value(json_object_get(j, "kind"));
        json_t *jt = json_object_get(j, "text"), *jids = json_object_get(j, "ids");
        size_t nids = json_array_size(jids), i;
        int32_t *ids = malloc((nids + 1) * sizeof *ids);
        json_t *v;
        json_array_foreach(jids, i, v) ids[i] = (int32_t)json_integer_value(v);
        if (!strcmp(kind, "encode")) {
            sl_tokenizer *t = base_t;
            const char *vn = json_string_value(json_object_get(j, "variant"));
            if (vn) {
                int k = 0;
                while (k < nv && strcmp(vname[k], vn)) k++;
                if (k == nv) {
                    vname[nv] = strdup(vn);
                    vt[nv] = variant(base, json_object_get(variants, vn));
                    CHECK(vt[nv], "variant %s does not load", vn);
                    nv++;
                }
                t = vt[k];
            }
            int add = json_is_true(json_object_get(j, "add_special"));
            int32_t *got;
            size_t ng;
            char err[256];
            if (t) {
                int r = sl_tokenizer_encode(t, json_string_value(jt), json_string_length(jt), add, &got, &ng, err, sizeof err);
                CHECK(r == 0, "line %ld: encode: %s", lineno, err);
                int same = r == 0 && ng == nids && memcmp(got, ids, nids * sizeof *ids) == 0;
                CHECK(same, "line %ld (variant %s, add_special %d): ids differ for \"%.60s\" (%zu vs %zu ids)", lineno,
                      vn ? vn : "-", add, json_string_value(jt), r == 0 ? ng : 0, nids);
                const char *tx = json_string_value(jt);
                /* byte-level BPE round-trips exactly, except where lstrip/rstrip tokens ate spaces */
                if (r == 0 && !vn && !add && !strstr(tx, "<mask>") && !strstr(tx, "<rs>")) {
                    check_decode(t, got, ng, json_string_value(jt), json_string_length(jt), "round trip");
                    n_rt++;
                }
                if (r == 0) free(got);
            }
            n_enc++;
        } else if (!strcmp(kind, "decode")) {
            check_decode(base_t, ids, nids, json_string_value(jt), json_string_length(jt), "vector");
            n_dec++;
        }
        free(ids);
        json_decref(j);
    }
    free(line);
    int rc = pclose(f);
    CHECK(rc == 0, "gzip -dc failed");
    for (int k = 0; k < nv; k++) sl_tokenizer_free(vt[k]), free((void *)vname[k]);
    printf("vectors: %ld encode (%d variants), %ld decode, %ld round trips\n", n_enc, nv, n_dec, n_rt);
    CHECK(n_enc >= 2000 && n_dec >= 2000 && nv >= 10, "too few vectors");
    return 0;
}

/* ---------------------------------------------------------------- fresh random text */

static size_t random_text(char *o, size_t maxchars)
{
    static const char *specials[] = {"<｜User｜>", "<｜Assistant｜>", "<tag>ab", "<tag>", " [WORD] ", "x[WORD]", "hello_world"};  /* no lstrip/rstrip ones: they eat spaces */
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0, 0x20}, {0xA0, 0x2FF}, {0x400, 0x4FF}, {0x600, 0x6FF},
                                         {0x3040, 0x30FF}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F},
                                         {0x2000, 0x206F}, {0x10000, 0x10FFFF}, {0xE000, 0xFFFD}};
    size_t n = 0, k = rnd() % maxchars;
    for (size_t i = 0; i < k; i++) {
        uint32_t r = rnd() % 100;
        if (r < 3) {
            const char *s = specials[rnd() % 7];
            memcpy(o + n, s, strlen(s));
            n += strlen(s);
            continue;
        }
        const uint32_t *rg = ranges[r < 50 ? 0 : rnd() % 12];
        uint32_t c = rg[0] + rnd() % (rg[1] - rg[0] + 1);
        if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
        n += put_cp(o + n, c);
    }
    return n;
}

static void random_checks(sl_tokenizer *t, int rounds)
{
    char *buf = malloc(4 * 400 + 64);
    for (int r = 0; r < rounds; r++) {
        size_t n = random_text(buf, 400);
        int32_t *ids;
        size_t ni;
        char err[256];
        CHECK(sl_tokenizer_encode(t, buf, n, 0, &ids, &ni, err, sizeof err) == 0, "random encode: %s", err);
        check_decode(t, ids, ni, buf, n, "random round trip");
        free(ids);
        /* random ids: decode never fails, streaming equals whole */
        int32_t rid[40];
        int k = 1 + (int)(rnd() % 40);
        for (int i = 0; i < k; i++) rid[i] = (int32_t)(rnd() % (uint32_t)(sl_tokenizer_n_ids(t) + 50));
        check_decode(t, rid, (size_t)k, NULL, 0, "random ids");
        /* token_bytes, concatenated and converted lossily, is decode */
        size_t rn = 0, ln = 0, lc = 0, held, wn, bl;
        for (int i = 0; i < k; i++) rn += sl_tokenizer_token_bytes(t, rid[i], &bl) ? bl : 0;
        char *raw = malloc(rn + 1), *lossy = NULL, *whole;
        rn = 0;
        for (int i = 0; i < k; i++) {
            const char *b = sl_tokenizer_token_bytes(t, rid[i], &bl);
            if (b) memcpy(raw + rn, b, bl), rn += bl;
        }
        CHECK(sl_utf8_lossy_append(raw, rn, 0, &lossy, &ln, &lc, &held) == 0, "lossy");
        CHECK(sl_tokenizer_decode(t, rid, (size_t)k, &whole, &wn) == 0 && wn == ln && memcmp(whole, lossy, ln) == 0,
              "token_bytes + lossy != decode");
        free(raw), free(lossy), free(whole);
    }
    free(buf);
}

/* ---------------------------------------------------------------- errors, fallback, config */

static void expect_load_error(json_t *base, const char *key, const char *json, const char *needle)
{
    json_t *over = json_object(), *v = json_loads(json, 0, NULL);
    json_object_set_new(over, key, v);
    json_t *d = json_deep_copy(base);
    json_object_update(d, over);
    char *s = json_dumps(d, JSON_COMPACT);
    sl_tokenizer *t = NULL;
    char err[256] = "";
    int r = sl_tokenizer_load_json(s, strlen(s), &t, err, sizeof err);
    CHECK(r == -1 && t == NULL && strstr(err, needle), "%s=%s: expected an error naming %s, got %d \"%s\"", key, json,
          needle, r, err);
    free(s);
    json_decref(d);
    json_decref(over);
}

static void misc_checks(const char *dir, sl_tokenizer *t, json_t *base)
{
    char err[256];
    int32_t *ids;
    size_t n;
    /* invalid UTF-8 in, a clear error out */
    CHECK(sl_tokenizer_encode(t, "ab\xC3(", 4, 0, &ids, &n, err, sizeof err) == -1 && strstr(err, "UTF-8"), "bad UTF-8 accepted");
    /* U+0000 inside text round-trips */
    CHECK(sl_tokenizer_encode(t, "a\0b", 3, 0, &ids, &n, err, sizeof err) == 0 && n >= 2, "NUL text");
    check_decode(t, ids, n, "a\0b", 3, "NUL round trip");
    free(ids);
    /* add_special on the base (ByteLevel post-processor) adds nothing */
    CHECK(sl_tokenizer_encode(t, "hi", 2, 1, &ids, &n, err, sizeof err) == 0 && n >= 1 && ids[0] != 0, "base add_special");
    free(ids);
    /* invalid UTF-8 from ids: lone continuation byte 0x80 is 'Ā'+... : the ByteLevel char of 0x80 */
    int32_t cont = sl_tokenizer_token_id(t, "\xC4\xA2", 2);    /* U+0122 = ByteLevel char of byte 0x80 */
    CHECK(cont >= 0, "byte 0x80 token missing");
    int32_t seq[3] = {cont, sl_tokenizer_token_id(t, "a", 1), cont};
    check_decode(t, seq, 3, "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD", 7, "lone continuation bytes");
    CHECK(sl_tokenizer_token_id(t, "<｜User｜>", strlen("<｜User｜>")) == 2, "special token id");
    CHECK(sl_tokenizer_is_special(t, 2) && !sl_tokenizer_is_special(t, seq[1]) && !sl_tokenizer_is_special(t, -1),
          "is_special");
    size_t bl;
    const char *b = sl_tokenizer_token_bytes(t, sl_tokenizer_token_id(t, "\xC4\xA0", 2), &bl);  /* "Ġ" */
    CHECK(b && bl == 1 && b[0] == ' ', "token_bytes of Ġ");
    CHECK(!sl_tokenizer_token_bytes(t, sl_tokenizer_n_ids(t) + 5, &bl) && bl == 0, "token_bytes of an unknown id");

    expect_load_error(base, "normalizer", "{\"type\":\"Strip\"}", "Strip");
    expect_load_error(base, "normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}", "Lowercase");
    expect_load_error(base, "pre_tokenizer", "{\"type\":\"Whitespace\"}", "Whitespace");
    expect_load_error(base, "pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\",\"invert\":false}", "regex");
    expect_load_error(base, "decoder", "{\"type\":\"Metaspace\"}", "Metaspace");
    expect_load_error(base, "post_processor", "{\"type\":\"Frobnicate\"}", "Frobnicate");
    expect_load_error(base, "model", "{\"type\":\"WordPiece\",\"vocab\":{}}", "WordPiece");
    expect_load_error(base, "model", "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}", "merges[0]");
    expect_load_error(base, "truncation", "{\"max_length\":5}", "truncation");
    sl_tokenizer *bad = NULL;
    CHECK(sl_tokenizer_load_json("{\"model\":", 9, &bad, err, sizeof err) == -1 && strstr(err, "line"), "bad JSON");
    CHECK(sl_tokenizer_load("/nonexistent/tokenizer.json", &bad, err, sizeof err) == -1 && strstr(err, "nonexistent"), "missing file");

    /* legacy "a b" merges give the same ids */
    json_t *d = json_deep_copy(base), *m = json_object_get(json_object_get(d, "model"), "merges"), *v;
    size_t i;
    json_array_foreach(m, i, v) {
        char *s = malloc(json_string_length(json_array_get(v, 0)) + json_string_length(json_array_get(v, 1)) + 2);
        sprintf(s, "%s %s", json_string_value(json_array_get(v, 0)), json_string_value(json_array_get(v, 1)));
        json_array_set_new(m, i, json_string(s));
        free(s);
    }
    char *s = json_dumps(d, JSON_COMPACT);
    sl_tokenizer *lt = NULL;
    CHECK(sl_tokenizer_load_json(s, strlen(s), &lt, err, sizeof err) == 0, "legacy merges: %s", err);
    free(s);
    json_decref(d);
    for (int r = 0; lt && r < 200; r++) {
        char buf[2000];
        size_t bn = random_text(buf, 300);
        int32_t *a, *b;
        size_t na, nb;
        CHECK(sl_tokenizer_encode(t, buf, bn, 0, &a, &na, err, sizeof err) == 0, "enc");
        CHECK(sl_tokenizer_encode(lt, buf, bn, 0, &b, &nb, err, sizeof err) == 0, "enc legacy");
        CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "legacy merges give other ids");
        free(a), free(b);
    }
    sl_tokenizer_free(lt);

    /* the byte fallback and open_for_model */
    char tmp[] = "/tmp/sluice-tok-XXXXXX", path[256];
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    sl_tokenizer *bt = NULL;
    CHECK(sl_tokenizer_open_for_model(tmp, 100, &bt, err, sizeof err) == -1 && strstr(err, "token ids"), "small vocab: %s", err);
    CHECK(sl_tokenizer_open_for_model(tmp, 300, &bt, err, sizeof err) == 0 && sl_tokenizer_is_bytes(bt), "byte fallback");
    if (bt) {
        CHECK(sl_tokenizer_encode(bt, "h\xC3\xA9", 3, 1, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[0] == 'h' &&
              ids[1] == 0xC3 && ids[2] == 0xA9, "byte encode");
        free(ids);
        int32_t bids[4] = {'o', 0xE4, 'k', 999};
        check_decode(bt, bids, 4, "o\xEF\xBF\xBDk", 5, "byte decode");
        sl_tokenizer_free(bt);
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
    char src[4200];
    snprintf(src, sizeof src, "cp '%s/tokenizer.json' '%s'", dir, path);
    CHECK(system(src) == 0, "cp");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
    FILE *f = fopen(path, "w");
    fputs("{\"add_bos_token\": true, \"add_eos_token\": false, \"bos_token\": {\"content\": \"<｜begin▁of▁sentence｜>\"}}", f);
    fclose(f);
    CHECK(sl_tokenizer_open_for_model(tmp, 10, &bt, err, sizeof err) == 0, "open_for_model: %s", err);
    if (bt) {
        CHECK(sl_tokenizer_encode(bt, "hi", 2, 1, &ids, &n, err, sizeof err) == 0 && n >= 2 && ids[0] == 0, "BOS from config");
        free(ids);
        CHECK(sl_tokenizer_encode(bt, "hi", 2, 0, &ids, &n, err, sizeof err) == 0 && n >= 1 && ids[0] != 0, "no BOS");
        free(ids);
        sl_tokenizer_free(bt);
    }
    snprintf(src, sizeof src, "rm -rf '%s'", tmp);
    CHECK(system(src) == 0, "rm");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_tokenizer DATA_DIR [seed]\n");
        return 2;
    }
    const char *dir = argv[1];
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
    if (!rng) rng = 1;
    printf("seed %llu\n", (unsigned long long)rng);
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    size_t n;
    char *text = slurp(path, &n);
    json_t *base = text ? json_loadb(text, n, 0, NULL) : NULL;
    snprintf(path, sizeof path, "%s/variants.json", dir);
    json_t *variants = json_load_file(path, 0, NULL);
    sl_tokenizer *t = NULL;
    if (!base || !variants || sl_tokenizer_load_json(text, n, &t, err, sizeof err)) {
        fprintf(stderr, "cannot load %s: %s\n", dir, base && variants ? err : "missing files");
        return 1;
    }
    vectors(dir, t, base, variants);
    random_checks(t, 2000);
    misc_checks(dir, t, base);
    sl_tokenizer_free(t);
    json_decref(base);
    json_decref(variants);
    free(text);
    CHECK_DONE();
}
