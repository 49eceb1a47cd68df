/* fuzz_tokenizer.c — libFuzzer target for engine/tokenizer: encode -> decode round trip exactness,
 * streaming decode == whole decode, decode of arbitrary ids always valid UTF-8, invalid UTF-8
 * input refused (never crashed on). Any violation aborts.
 *
 * Input: byte 0 picks the mode, the rest is the payload.
 *   0: payload made valid UTF-8 (lossy) -> encode -> decode must give it back
 *   1: payload as little-endian u16 ids (some past the vocab) -> decode, streaming
 *   2: payload encoded as is: an error iff it is not valid UTF-8, else as mode 0
 * Tokenizer: $SLUICE_TOKENIZER, else the test tokenizer (tests/data/tokenizer/tokenizer.json).
 * Built with SLUICE_FUZZ_MAIN it is a plain program replaying files and then random inputs for a
 * bounded time (the ctest run by any compiler):  fuzz_tokenizer_replay [--seconds S] [FILE|DIR]...
 */
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_TEST_DATA
#define SLUICE_TEST_DATA "tests/data"
#endif

static sl_tokenizer *tok;

static void die(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_tokenizer: %s (input of %zu bytes)\n", what, size);
    (void)data;
    abort();
}

static void load(void)
{
    if (tok) return;
    const char *p = getenv("SLUICE_TOKENIZER");
    char err[512];
    if (sl_tokenizer_load(p ? p : SLUICE_TEST_DATA "/tokenizer/tokenizer.json", &tok, err, sizeof err)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        exit(1);
    }
}

static void check_stream(const int32_t *ids, size_t n, const char *whole, size_t wlen, const uint8_t *d, size_t sz)
{
    sl_detok dt;
    sl_detok_init(&dt, tok);
    size_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t pn;
        if ((i < n ? sl_detok_push(&dt, ids[i], &p, &pn) : sl_detok_flush(&dt, &p, &pn)) != 0) die("detok failed", d, sz);
        if (!sl_utf8_valid(p, pn)) die("streamed chunk is not valid UTF-8", d, sz);
        if (k + pn > wlen || memcmp(whole + k, p, pn) != 0) die("streaming decode differs from decode", d, sz);
        k += pn;
    }
    if (k != wlen) die("streaming decode is short", d, sz);
    sl_detok_free(&dt);
}

static void round_trip(const char *s, size_t n, const uint8_t *d, size_t sz)
{
    int32_t *ids;
    size_t ni;
    char err[256], *text;
    size_t len;
    if (sl_tokenizer_encode(tok, s, n, 0, &ids, &ni, err, sizeof err)) die(err, d, sz);
    if (sl_tokenizer_decode(tok, ids, ni, &text, &len)) die("decode failed", d, sz);
    /* lstrip/rstrip added tokens (the test tokenizer's <mask>, <rs>) eat spaces by design */
    int strips = memmem(s, n, "<mask>", 6) || memmem(s, n, "<rs>", 4);
    if (!strips && (len != n || memcmp(text, s, n) != 0)) die("decode(encode(x)) != x", d, sz);
    check_stream(ids, ni, text, len, d, sz);
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load();
    if (size == 0) return 0;
    int mode = data[0] % 3;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (mode == 1) {
        size_t k = n / 2;
        int32_t *ids = malloc((k + 1) * sizeof *ids);
        for (size_t i = 0; i < k; i++)
            ids[i] = (int32_t)((uint32_t)(uint8_t)p[2 * i] | (uint32_t)(uint8_t)p[2 * i + 1] << 8) %
                     (sl_tokenizer_n_ids(tok) + 64);
        char *text;
        size_t len;
        if (sl_tokenizer_decode(tok, ids, k, &text, &len)) die("decode failed", data, size);
        if (!sl_utf8_valid(text, len) || strlen(text) > len) die("decode is not valid UTF-8", data, size);
        check_stream(ids, k, text, len, data, size);
        free(text);
        free(ids);
        return 0;
    }
    if (mode == 2) {
        int32_t *ids;
        size_t ni;
        char err[256];
        int valid = sl_utf8_valid(p, n);
        int r = sl_tokenizer_encode(tok, p, n, 0, &ids, &ni, err, sizeof err);
        if (r == 0) free(ids);
        if ((r == 0) != valid) die("encode accepted invalid UTF-8 or refused valid", data, size);
        if (valid) round_trip(p, n, data, size);
        return 0;
    }
    char *s = NULL;
    size_t sl = 0, cap = 0, held;
    if (sl_utf8_lossy_append(p, n, 0, &s, &sl, &cap, &held)) die("lossy failed", data, size);
    if (!sl_utf8_valid(s, sl)) die("lossy output is not valid UTF-8", data, size);
    round_trip(s, sl, data, size);
    free(s);
    return 0;
}

#ifdef SLUICE_FUZZ_MAIN
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>

static long run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 1;
}

int main(int argc, char **argv)
{
    double seconds = 5;
    long files = 0, random_runs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
            continue;
        }
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_tokenizer_replay: %s: not found\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            files += run_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            files += run_file(p);
        }
        if (d) closedir(d);
    }
    /* random inputs: mostly UTF-8-ish text built from pieces the tokenizer cares about */
    static const char *pieces[] = {" ", "  ", "\n", "\r\n", "\t", "a", "Hello", " world", "123", "4567", "中文", "日本語",
                                   "カタカナ", "한국", "مرحبا", "😀", "👨‍👩‍👧", "\xEF\xB8\x8F", "\xCC\x81", "<｜User｜>", "<tag>",
                                   "<tag>ab", "[WORD]", "hello_world", "<mask>", "<rs>", "'s", "'ll", "\xC3", "\x80",
                                   "\xF0\x9F", "\0", "{", "}", "(", "->", "...", "\xE3\x80\x80", "\xC2\xA0"};
    uint64_t r = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1;
    printf("fuzz_tokenizer_replay: seed %llu\n", (unsigned long long)r);
    clock_t end = clock() + (clock_t)(seconds * CLOCKS_PER_SEC);
    uint8_t buf[4096];
    while (clock() < end) {
        size_t n = 0;
        buf[n++] = (uint8_t)(r % 3);
        int k = (int)((r >> 8) % 60);
        for (int i = 0; i < k; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            const char *s = pieces[r % (sizeof pieces / sizeof *pieces)];
            size_t sl = s[0] ? strlen(s) : 1;
            if ((r >> 40) % 7 == 0) {
                buf[n++] = (uint8_t)(r >> 20);
            } else if (n + sl < sizeof buf) {
                memcpy(buf + n, s, sl);
                n += sl;
            }
        }
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        LLVMFuzzerTestOneInput(buf, n);
        random_runs++;
    }
    printf("fuzz_tokenizer_replay: %ld files, %ld random inputs, no failure\n", files, random_runs);
    sl_tokenizer_free(tok);
    return 0;
}
#endif
