/* Unit tests (label unit, also under ASan/UBSan) of consumer/textcodec: prompts encode exactly as
 * sl_tokenizer_encode (add_special) on tests/data/tokenizer/tokenizer.json for fresh random text;
 * streaming text never ends inside a UTF-8 character and adds up to the whole-sequence decode;
 * invalid bytes become U+FFFD; stop strings spanning tokens (and ending inside a character) are found
 * on the token that completes them; special tokens and EOS give no text; the byte fallback and the
 * no-text / broken-tokenizer cases of textcodec_open.
 * usage: test_textcodec DATA_DIR (tests/data) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "textcodec.h"

#include "check.h"

/* Random UTF-8 text: ASCII words, digits, spaces, accented Latin, CJK, Cyrillic, emoji. */
static char *rand_text(size_t *len) {
    static const char *const pieces[] = {"the", " ", "cat", "  ", "\n", "42", "7", ",", ".", "é", "ü", "中", "文",
                                         "字", "日本", "привет", "😀", "👍🏽", "\t", "x", "Hello", "(", ")", "ß", "é"};
    size_t n = 1 + rnd() % 40, cap = 64, l = 0;
    char *s = malloc(cap);
    if (!s) abort();
    for (size_t i = 0; i < n; i++) {
        const char *p = pieces[rnd() % (sizeof(pieces) / sizeof(pieces[0]))];
        size_t pl = strlen(p);
        if (l + pl + 1 > cap) {
            cap = 2 * (l + pl + 1);
            if (!(s = realloc(s, cap))) abort();
        }
        memcpy(s + l, p, pl);
        l += pl;
    }
    s[l] = 0;
    *len = l;
    return s;
}

/* The id whose decoder bytes are exactly b[0..n), or -1. */
static int32_t id_of_bytes(const sl_tokenizer *t, const char *b, size_t n) {
    for (int32_t id = 0; id < sl_tokenizer_n_ids(t); id++) {
        size_t l;
        const char *s = sl_tokenizer_token_bytes(t, id, &l);
        if (s && l == n && !memcmp(s, b, n) && !sl_tokenizer_is_special(t, id)) return id;
    }
    return -1;
}

static void test_tokenizer_json(const char *data) {
    char dir[1024], path[1100], err[512];
    snprintf(dir, sizeof(dir), "%s/tokenizer", data);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    sl_tokenizer *ref;
    if (sl_tokenizer_load(path, &ref, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        fails++;
        return;
    }
    int vocab = sl_tokenizer_n_ids(ref);
    int eos = 1;   /* <｜end▁of▁sentence｜> */
    sl_textcodec *tc;
    CHECK(textcodec_open(dir, vocab, &eos, 1, &tc, err, sizeof(err)) == 0 && tc);
    if (!tc) return;
    CHECK(!strcmp(tc->name, "tokenizer.json"));

    /* encode == sl_tokenizer_encode(add_special=1); streaming decode: always valid UTF-8, adds up */
    int max_held = 0;
    for (int it = 0; it < 200; it++) {
        size_t len;
        char *s = rand_text(&len);
        int32_t *ids, *want;
        int n;
        size_t wn;
        CHECK(textcodec_encode(tc, s, len, &ids, &n, err, sizeof(err)) == 0);
        CHECK(sl_tokenizer_encode(ref, s, len, 1, &want, &wn, err, sizeof(err)) == 0);
        CHECK((size_t)n == wn && !memcmp(ids, want, wn * sizeof(int32_t)));
        sl_textdec d;
        textdec_init(&d, tc);
        size_t prev = 0;
        for (int i = 0; i < n; i++) {
            CHECK(textdec_push(&d, ids[i]) == 0);
            CHECK(d.text && d.len >= prev && sl_utf8_valid(d.text, d.len));
            CHECK(!memcmp(d.text, s, d.len));   /* a prefix of the input, never a cut character */
            if (d.det.npend > (size_t)max_held) max_held = (int)d.det.npend;
            prev = d.len;
        }
        CHECK(textdec_finish(&d) == 0);
        CHECK(d.len == len && !memcmp(d.text, s, len));
        textdec_free(&d);
        free(ids);
        free(want);
        free(s);
    }
    CHECK(max_held > 0);   /* some token ended inside a character and was held back */

    /* a multi-byte character over single-byte tokens: held back until complete */
    int32_t e4 = id_of_bytes(ref, "\xe4", 1), b8 = id_of_bytes(ref, "\xb8", 1), ad = id_of_bytes(ref, "\xad", 1);
    int32_t ff = id_of_bytes(ref, "\xff", 1), a = id_of_bytes(ref, "A", 1), f0 = id_of_bytes(ref, "\xf0", 1);
    int32_t n9f = id_of_bytes(ref, "\x9f", 1);
    CHECK(e4 >= 0 && b8 >= 0 && ad >= 0 && ff >= 0 && a >= 0 && f0 >= 0 && n9f >= 0);
    if (e4 >= 0 && b8 >= 0 && ad >= 0 && ff >= 0 && a >= 0 && f0 >= 0 && n9f >= 0) {
        sl_textdec d;
        textdec_init(&d, tc);
        char *stop[] = {"\xe4\xb8\xad"};   /* 中: matched only once its last byte arrives */
        size_t stop_len[] = {3};
        CHECK(textdec_push(&d, a) == 0 && d.len == 1);
        CHECK(textdec_push(&d, e4) == 0 && d.len == 1);
        CHECK(stop_find(d.text, d.len, 1, stop, stop_len, 1) == -1);
        CHECK(textdec_push(&d, b8) == 0 && d.len == 1);
        CHECK(textdec_push(&d, ad) == 0 && d.len == 4 && !strcmp(d.text, "A\xe4\xb8\xad"));
        CHECK(stop_find(d.text, d.len, 1, stop, stop_len, 1) == 1);
        /* invalid: a lone FF, a cut sequence followed by ASCII, a cut sequence at the end */
        CHECK(textdec_push(&d, ff) == 0 && !strcmp(d.text, "A\xe4\xb8\xad\xef\xbf\xbd"));
        CHECK(textdec_push(&d, e4) == 0 && textdec_push(&d, b8) == 0 && textdec_push(&d, a) == 0);
        CHECK(!strcmp(d.text, "A\xe4\xb8\xad\xef\xbf\xbd\xef\xbf\xbd" "A"));
        CHECK(textdec_push(&d, 1) == 0);   /* EOS / special: no text, and the held bytes stay held */
        CHECK(textdec_push(&d, f0) == 0 && textdec_push(&d, n9f) == 0 && textdec_push(&d, 1) == 0);
        CHECK(!strcmp(d.text, "A\xe4\xb8\xad\xef\xbf\xbd\xef\xbf\xbd" "A"));
        CHECK(textdec_finish(&d) == 0);
        CHECK(!strcmp(d.text, "A\xe4\xb8\xad\xef\xbf\xbd\xef\xbf\xbd" "A\xef\xbf\xbd"));
        /* matches the tokenizers library's decode of the same ids (no specials among them) */
        int32_t seq[] = {a, e4, b8, ad, ff, e4, b8, a, f0, n9f};
        char *whole;
        size_t wl;
        CHECK(sl_tokenizer_decode(ref, seq, 10, &whole, &wl) == 0 && wl == d.len && !memcmp(whole, d.text, wl));
        free(whole);
        textdec_free(&d);
    }

    /* special tokens: no text */
    CHECK(textcodec_silent(tc, 0) && textcodec_silent(tc, 1) && textcodec_silent(tc, 3));
    CHECK(a >= 0 && !textcodec_silent(tc, a));

    /* a stop string across a token boundary, found on the token that completes it */
    int found = 0;
    for (int it = 0; it < 100 && found < 20; it++) {
        size_t len;
        char *s = rand_text(&len);
        int32_t *ids;
        int n;
        CHECK(textcodec_encode(tc, s, len, &ids, &n, err, sizeof(err)) == 0);
        size_t *end = malloc(((size_t)n + 1) * sizeof(size_t));   /* text length after each token */
        if (!end) abort();
        sl_textdec d;
        textdec_init(&d, tc);
        for (int i = 0; i < n; i++) {
            CHECK(textdec_push(&d, ids[i]) == 0);
            end[i] = d.len;
        }
        textdec_free(&d);
        for (int i = 0; i + 1 < n; i++) {
            size_t b = end[i], from = i ? end[i - 1] : 0;
            if (b - from < 2 || end[i + 1] - b < 2 || ((unsigned char)s[b - 2] & 0xC0) == 0x80 ||
                ((unsigned char)s[b + 1] & 0xC0) == 0x80)
                continue;
            char stop_s[4] = {s[b - 2], s[b - 1], s[b], s[b + 1]};   /* two bytes each side of the boundary */
            char *stop[] = {"\x01never", stop_s};
            size_t stop_len[] = {6, 4};
            long first = -1;
            int at_tok = -1;
            textdec_init(&d, tc);
            for (int k = 0; k < n && at_tok < 0; k++) {
                size_t before = d.len;
                CHECK(textdec_push(&d, ids[k]) == 0);
                long m = stop_find(d.text, d.len, before, stop, stop_len, 2);
                if (m >= 0) first = m, at_tok = k;
            }
            textdec_free(&d);
            /* the first occurrence in the text decides where it is found */
            const char *occ = memmem(s, len, stop_s, 4);
            CHECK(occ && first == occ - s);
            if (occ == s + b - 2) CHECK(at_tok == i + 1);
            found++;
            break;
        }
        free(end);
        free(ids);
        free(s);
    }
    CHECK(found >= 10);

    /* ids the model cannot take: a clear error */
    textcodec_close(tc);
    CHECK(textcodec_open(dir, 300, &eos, 1, &tc, err, sizeof(err)) == 0);
    int32_t *ids;
    int n;
    CHECK(textcodec_encode(tc, "the cat 中文字", strlen("the cat 中文字"), &ids, &n, err, sizeof(err)) == -1 &&
          strstr(err, "outside the model vocabulary") && ids == NULL);
    CHECK(textcodec_encode(tc, "a\xff", 2, &ids, &n, err, sizeof(err)) == -1 && ids == NULL);   /* invalid UTF-8 */
    textcodec_close(tc);
    sl_tokenizer_free(ref);
}

static void test_bytes_and_errors(void) {
    int eos = 2;
    char err[512];
    sl_textcodec *tc = NULL;
    CHECK(textcodec_open("/nonexistent", 256, &eos, 1, &tc, err, sizeof(err)) == 0 && tc && !strcmp(tc->name, "bytes"));
    sl_textcodec *none = (sl_textcodec *)1;
    CHECK(textcodec_open("/nonexistent", 100, &eos, 1, &none, err, sizeof(err)) == 1 && none == NULL &&
          strstr(err, "token ids"));
    /* a tokenizer.json that is there but broken: an error, not a silent fallback */
    char dir[] = "/tmp/sluice-textcodec-XXXXXX", path[64];
    if (mkdtemp(dir)) {
        snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs("{\"model\": ", f);
            fclose(f);
        }
        CHECK(textcodec_open(dir, 256, &eos, 1, &none, err, sizeof(err)) == -1 && none == NULL && err[0]);
        remove(path);
        rmdir(dir);
    }
    if (!tc) return;
    struct {
        const char *in, *out;
    } cases[] = {
        {"abc", "abc"},
        {"\xc3\xa9", "\xc3\xa9"},
        {"\xe2\x82\xac!", "\xe2\x82\xac!"},
        {"\xe2\x82" "A", "\xef\xbf\xbd" "A"},                      /* truncated sequence: one U+FFFD */
        {"\xf0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  /* F0 80: 80 is not allowed after F0 */
        {"\xff" "a\x80", "\xef\xbf\xbd" "a\xef\xbf\xbd"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  /* surrogate */
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
        {"x\x02y", "xy"},                                          /* eos renders as nothing */
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},                          /* cut at the end: flushed as one U+FFFD */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        sl_textdec d;
        textdec_init(&d, tc);
        for (const char *p = cases[k].in; *p; p++) CHECK(textdec_push(&d, (uint8_t)*p) == 0);
        CHECK(textdec_finish(&d) == 0);
        if (strcmp(d.text, cases[k].out)) {
            fprintf(stderr, "utf8 case %zu: got '%s'\n", k, d.text);
            fails++;
        }
        textdec_free(&d);
    }
    sl_textdec d;
    textdec_init(&d, tc);
    CHECK(textdec_finish(&d) == 0 && d.text && d.len == 0);   /* no tokens: "" */
    textdec_free(&d);
    int32_t *ids;
    int n;
    CHECK(textcodec_encode(tc, "h\0i", 3, &ids, &n, NULL, 0) == 0 && n == 3 && ids[0] == 'h' && ids[1] == 0 &&
          ids[2] == 'i');
    free(ids);
    textcodec_close(tc);

    char *stops[] = {"END", "\n\n"};
    size_t sl[] = {3, 2};
    const char *t = "abc\nxyEN";
    CHECK(stop_find(t, strlen(t), 0, stops, sl, 2) == -1);
    t = "abc\nxyEND";
    CHECK(stop_find(t, strlen(t), 8, stops, sl, 2) == 6);
    t = "a\n\nEND";
    CHECK(stop_find(t, strlen(t), 0, stops, sl, 2) == 1);
    CHECK(stop_find(t, strlen(t), 5, stops, sl, 2) == 3);   /* only matches ending after `from` count */
    CHECK(stop_find(t, strlen(t), 6, stops, sl, 2) == -1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_textcodec DATA_DIR\n");
        return 2;
    }
    rng_state = (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ull;
    printf("seed %llu\n", (unsigned long long)rng_state);
    test_tokenizer_json(argv[1]);
    test_bytes_and_errors();
    printf("%s (%d failures)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
