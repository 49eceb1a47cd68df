/* test_normalizer.c — the tokenizer's NFC/NFD/NFKC/NFKD normalizers (libunistring) against Python's
 * unicodedata (tests/data/tokenizer/normalizer.jsonl, made by make_normalizer_vectors.py):
 *   - tk_normalize's output for every form equals unicodedata.normalize's;
 *   - encode(tokenizer.json with normalizer NFC, s) == encode(the same without normalizer, NFC(s)),
 *     also for Sequence[NFC], NFD, NFKC and Sequence[NFKD, NFC] (== NFKC);
 *   - added tokens as HF tokenizers handles them: normalized=false ones are matched on the raw text
 *     before the pieces between them are normalized, normalized=true ones by their normalized content;
 *   - fresh random strings: idempotence, NFC(NFD(x)) == NFC(x), encode equality as above.
 * Lines where libunistring and Python disagree (different Unicode versions) are skipped and counted.
 *   test_normalizer DATA_DIR [seed]
 */
#include "tokenizer_impl.h"
#include "random_utf8.h"
#include "check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static const char *const FORM_NAME[] = {"nfc", "nfd", "nfkc", "nfkd"};   /* index = TK_NF* */

/* base tokenizer.json with "normalizer" replaced by norm_json and extra added tokens appended;
 * a load error is a failure unless refuse is set (then err gets it) */
static sl_tokenizer *variant_ex(json_t *base, const char *norm_json, const char *added_json, char *err, size_t errlen,
                                int refuse)
{
    json_t *d = json_deep_copy(base);
    json_object_set_new(d, "normalizer", norm_json ? json_loads(norm_json, 0, NULL) : json_null());
    if (added_json) {
        json_t *more = json_loads(added_json, 0, NULL);
        json_array_extend(json_object_get(d, "added_tokens"), more);
        json_decref(more);
    }
    char *s = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    sl_tokenizer *t = NULL;
    if (!s || sl_tokenizer_load_json(s, strlen(s), &t, err, errlen)) {
        if (!refuse) fprintf(stderr, "variant %s: %s\n", norm_json ? norm_json : "null", s ? err : "dump failed");
        failures += !refuse;
        t = NULL;
    }
    free(s);
    return t;
}

static sl_tokenizer *variant(json_t *base, const char *norm_json, const char *added_json)
{
    char err[256];
    return variant_ex(base, norm_json, added_json, err, sizeof err, 0);
}

/* 1 if encode(a, s) == encode(b, r) (both succeed) */
static int same_ids(sl_tokenizer *a, const char *s, size_t sn, sl_tokenizer *b, const char *r, size_t rn)
{
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    char err[256];
    int ok = sl_tokenizer_encode(a, s, sn, 0, &x, &nx, err, sizeof err) == 0 &&
             sl_tokenizer_encode(b, r, rn, 0, &y, &ny, err, sizeof err) == 0 && nx == ny &&
             memcmp(x, y, nx * sizeof *x) == 0;
    free(x), free(y);
    return ok;
}

static int ids_are(sl_tokenizer *t, const char *s, const int32_t *exp, size_t n)
{
    int32_t *x = NULL;
    size_t nx = 0;
    char err[256];
    int ok = sl_tokenizer_encode(t, s, strlen(s), 0, &x, &nx, err, sizeof err) == 0 && nx == n &&
             memcmp(x, exp, n * sizeof *x) == 0;
    free(x);
    return ok;
}

static void show(const char *what, const char *s, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", (unsigned char)s[i]);
    fputc('\n', stderr);
}

/* ---------------------------------------------------------------- vectors */

static void vectors(const char *dir, json_t *base, sl_tokenizer *plain)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/normalizer.jsonl", dir);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    if (!f) return;
    /* tokenizer under test, its normalizer's form in the vectors */
    struct { const char *json; int form; sl_tokenizer *t; long n; } tk[] = {
        {"{\"type\":\"NFC\"}", TK_NFC, NULL, 0},
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}", TK_NFC, NULL, 0},
        {"{\"type\":\"NFD\"}", TK_NFD, NULL, 0},
        {"{\"type\":\"NFKC\"}", TK_NFKC, NULL, 0},
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKD\"},{\"type\":\"NFC\"}]}", TK_NFKC, NULL, 0},
        {"{\"type\":\"NFKD\"}", TK_NFKD, NULL, 0},
    };
    int ntk = (int)(sizeof tk / sizeof tk[0]);
    for (int k = 0; k < ntk; k++) tk[k].t = variant(base, tk[k].json, NULL);
    long lines = 0, checked[4] = {0}, disagree[4] = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    tk_buf out = {0};
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *row = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        CHECK(row, "%s line %ld: %s", path, lines + 1, je.text);
        if (!row) break;
        if (json_object_get(row, "unidata_version")) {
            printf("oracle: Python unicodedata %s, %lld strings\n",
                   json_string_value(json_object_get(row, "unidata_version")),
                   (long long)json_integer_value(json_object_get(row, "n")));
            json_decref(row);
            continue;
        }
        lines++;
        json_t *js = json_object_get(row, "s");
        const char *s = json_string_value(js);
        size_t sn = json_string_length(js);
        int agree[4];
        for (int form = 0; form < 4; form++) {
            json_t *je2 = json_object_get(row, FORM_NAME[form]);
            const char *exp = json_string_value(je2);
            size_t en = json_string_length(je2);
            int fm = form;
            CHECK(tk_normalize(&fm, 1, s, sn, &out) == 0, "tk_normalize failed");
            agree[form] = out.n == en && memcmp(out.b, exp, en) == 0;
            if (!agree[form]) {
                disagree[form]++;
                if (disagree[form] <= 3) {
                    fprintf(stderr, "libunistring and Python differ (%s), line %ld:\n", FORM_NAME[form], lines);
                    show("input", s, sn), show("python", exp, en), show("libunistring", out.b, out.n);
                }
                continue;
            }
            checked[form]++;
        }
        for (int k = 0; k < ntk; k++) {
            if (!tk[k].t || !agree[tk[k].form]) continue;
            json_t *je2 = json_object_get(row, FORM_NAME[tk[k].form]);
            CHECK(same_ids(tk[k].t, s, sn, plain, json_string_value(je2), json_string_length(je2)),
                  "line %ld: encode with %s != encode without normalizer of Python's %s", lines, tk[k].json,
                  FORM_NAME[tk[k].form]);
            tk[k].n++;
        }
        json_decref(row);
    }
    free(line), free(out.b);
    fclose(f);
    CHECK(lines >= 300, "only %ld vector lines", lines);
    for (int form = 0; form < 4; form++) {
        printf("%-4s: %ld strings equal to Python's, %ld skipped (libunistring and Python disagree)\n",
               FORM_NAME[form], checked[form], disagree[form]);
        CHECK(disagree[form] * 50 <= lines, "%s: %ld of %ld disagree", FORM_NAME[form], disagree[form], lines);
    }
    for (int k = 0; k < ntk; k++) {
        printf("encode with %s: %ld strings\n", tk[k].json, tk[k].n);
        sl_tokenizer_free(tk[k].t);
    }
}

/* ---------------------------------------------------------------- added tokens */

static void added_checks(json_t *base, sl_tokenizer *plain)
{
    sl_tokenizer *nfc = variant(base, "{\"type\":\"NFC\"}", NULL);
    if (!nfc) return;
    int32_t tag = sl_tokenizer_token_id(plain, "<tag>", 5);
    CHECK(tag >= 0, "<tag> missing");
    /* normalized=false: "<tag>" is split off the raw text first, then U+0338 is normalized on its own
     * (NFC of the whole text would compose ">" + U+0338 into U+226F and lose the token) */
    const char *raw = "<tag>\xCC\xB8x";
    int32_t *rest = NULL, *got = NULL;
    size_t nrest = 0, ngot = 0;
    char err[256];
    CHECK(sl_tokenizer_encode(plain, "\xCC\xB8x", 3, 0, &rest, &nrest, err, sizeof err) == 0, "%s", err);
    CHECK(sl_tokenizer_encode(nfc, raw, strlen(raw), 0, &got, &ngot, err, sizeof err) == 0, "%s", err);
    CHECK(ngot == nrest + 1 && got[0] == tag && memcmp(got + 1, rest, nrest * sizeof *rest) == 0,
          "<tag> + U+0338 under NFC: the added token must be matched before normalization");
    CHECK(!same_ids(nfc, raw, strlen(raw), plain, "<tag\xE2\x89\xAFx", 7), "NFC applied across an added token");
    free(rest), free(got);
    /* the rstrip+normalized <rs> and the normalized hello_world on ASCII: as without normalizer */
    const char *a = "a<rs>  b hello_world<|fim|>c";
    CHECK(same_ids(nfc, a, strlen(a), plain, a, strlen(a)), "ASCII added tokens under NFC");

    /* normalized=true token with decomposed content "cafe\u0301!": NFC matches both spellings */
    int32_t id = sl_tokenizer_n_ids(plain) + 3;
    char tokjson[256];
    snprintf(tokjson, sizeof tokjson, "[{\"id\":%d,\"content\":\"cafe\\u0301!\",\"single_word\":false,\"lstrip\":false,"
             "\"rstrip\":false,\"normalized\":true,\"special\":false},{\"id\":%d,\"content\":\"x\\u0301y\","
             "\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]",
             id, id + 1);
    sl_tokenizer *tn = variant(base, "{\"type\":\"NFC\"}", tokjson);
    sl_tokenizer *t0 = variant(base, NULL, tokjson);
    if (tn && t0) {
        int32_t one[1] = {id}, two[1] = {id + 1}, pre[2] = {id + 1, id};
        CHECK(ids_are(tn, "caf\xC3\xA9!", one, 1), "NFC: precomposed caf\\u00e9! matches the normalized token");
        CHECK(ids_are(tn, "cafe\xCC\x81!", one, 1), "NFC: decomposed cafe\\u0301! matches the normalized token");
        CHECK(ids_are(t0, "cafe\xCC\x81!", one, 1), "no normalizer: decomposed spelling matches");
        CHECK(!ids_are(t0, "caf\xC3\xA9!", one, 1), "no normalizer: precomposed must not match");
        /* normalized=false token with decomposed content: matched on the raw text only */
        CHECK(ids_are(tn, "x\xCC\x81y", two, 1), "NFC: raw x\\u0301y matches the normalized=false token");
        CHECK(ids_are(tn, "x\xCC\x81ycaf\xC3\xA9!", pre, 2), "NFC: both tokens in a row");
        CHECK(sl_tokenizer_token_id(tn, "cafe\xCC\x81!", 7) == id, "token_id keeps the raw content");
    }
    sl_tokenizer_free(tn), sl_tokenizer_free(t0), sl_tokenizer_free(nfc);

    /* load errors: unsupported normalizer in a Sequence, too many */
    char lerr[256] = "";
    sl_tokenizer *bad = variant_ex(base, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Strip\"}]}",
                                   NULL, lerr, sizeof lerr, 1);
    CHECK(!bad && strstr(lerr, "normalizer Strip"), "Strip inside a Sequence must be refused: %s", lerr);
    sl_tokenizer_free(bad);
    char many[1024] = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}";
    for (int k = 0; k < TK_MAX_NORM; k++) strcat(many, ",{\"type\":\"NFD\"}");
    strcat(many, "]}");
    bad = variant_ex(base, many, NULL, lerr, sizeof lerr, 1);
    CHECK(!bad && strstr(lerr, "more than"), "too many normalizers must be refused: %s", lerr);
    sl_tokenizer_free(bad);
}

/* ---------------------------------------------------------------- fresh random strings */

static size_t random_text(char *o, size_t maxchars)
{
    static const uint32_t ranges[][2] = {{0x20, 0x3B}, {0x61, 0x7A}, {0x300, 0x36F}, {0xC0, 0x24F},
                                         {0x1100, 0x1112}, {0x1161, 0x1175}, {0x11A8, 0x11C2}, {0xAC00, 0xD7A3},
                                         {0x1E00, 0x1FFF}, {0xF900, 0xFAD9}, {0xFF01, 0xFF3A}, {0x2460, 0x24FF},
                                         {0x3040, 0x30FF}, {0x900, 0x97F}, {0x1F300, 0x1F64F}, {0xFE00, 0xFE0F}};
    size_t n = 0, k = 1 + rnd() % maxchars;
    for (size_t i = 0; i < k; i++) {
        const uint32_t *rg = ranges[rnd() % 16];
        n += put_cp(o + n, rg[0] + rnd() % (rg[1] - rg[0] + 1));
    }
    return n;
}

static void random_checks(json_t *base, sl_tokenizer *plain, int rounds)
{
    sl_tokenizer *nfc = variant(base, "{\"type\":\"NFC\"}", NULL);
    if (!nfc) return;
    char *buf = malloc(4 * 64 + 4);
    tk_buf a = {0}, b = {0}, c = {0};
    int fc = TK_NFC, fd = TK_NFD, fkc = TK_NFKC, fkd = TK_NFKD, changed = 0;
    for (int r = 0; r < rounds && buf; r++) {
        size_t n = random_text(buf, 64);
        CHECK(tk_normalize(&fc, 1, buf, n, &a) == 0 && tk_normalize(&fd, 1, buf, n, &b) == 0, "normalize");
        CHECK(sl_utf8_valid(a.b, a.n) && sl_utf8_valid(b.b, b.n), "normalized text is not UTF-8");
        changed += a.n != n || memcmp(a.b, buf, n) != 0;
        CHECK(tk_normalize(&fc, 1, a.b, a.n, &c) == 0 && c.n == a.n && memcmp(c.b, a.b, a.n) == 0,
              "NFC not idempotent (round %d)", r);
        CHECK(tk_normalize(&fc, 1, b.b, b.n, &c) == 0 && c.n == a.n && memcmp(c.b, a.b, a.n) == 0,
              "NFC(NFD(x)) != NFC(x) (round %d)", r);
        int seq[2] = {fkd, fc};
        CHECK(tk_normalize(&fkc, 1, buf, n, &a) == 0 && tk_normalize(seq, 2, buf, n, &c) == 0 && c.n == a.n &&
              memcmp(c.b, a.b, a.n) == 0, "NFC(NFKD(x)) != NFKC(x) (round %d)", r);
        CHECK(tk_normalize(&fc, 1, buf, n, &a) == 0 && same_ids(nfc, buf, n, plain, a.b, a.n),
              "encode(NFC tokenizer, x) != encode(plain, NFC(x)) (round %d)", r);
    }
    CHECK(changed * 2 > rounds, "random text: NFC changed only %d of %d strings", changed, rounds);
    printf("random: %d strings (%d changed by NFC)\n", rounds, changed);
    free(buf), free(a.b), free(b.b), free(c.b);
    sl_tokenizer_free(nfc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_normalizer DATA_DIR [seed]\n");
        return 2;
    }
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
    if (!rng) rng = 1;
    printf("seed %llu\n", (unsigned long long)rng);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    json_t *base = json_load_file(path, 0, NULL);
    CHECK(base, "cannot load %s", path);
    if (!base) return 1;
    sl_tokenizer *plain = variant(base, NULL, NULL);
    if (plain) {
        vectors(argv[1], base, plain);
        added_checks(base, plain);
        random_checks(base, plain, 1000);
    }
    sl_tokenizer_free(plain);
    json_decref(base);
    CHECK_DONE();
}
