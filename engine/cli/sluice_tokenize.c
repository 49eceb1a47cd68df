/* sluice-tokenize — encode/decode with a checkpoint's tokenizer.json (engine/tokenizer.h).
 *
 *   sluice-tokenize --tokenizer PATH --encode [--add-special]   stdin: one JSON string a line
 *                                                                 stdout: one JSON array of ids a line
 *   sluice-tokenize --tokenizer PATH --decode                    stdin: one JSON array of ids a line
 *                                                                 stdout: one JSON string a line
 *   sluice-tokenize --tokenizer PATH --bench FILE [--repeat N]   encode FILE line by line, one core;
 *                                                                 prints a JSON line with MB/s
 *   sluice-tokenize --chat FILE.json                             FILE: {"messages": [...], "thinking": bool}
 *                                                                 stdout: the DeepSeek-V4 prompt (engine/chat.h)
 *                                                                 as raw UTF-8, then one newline
 * PATH is a tokenizer.json or a checkpoint directory (its tokenizer.json and tokenizer_config.json,
 * or the byte tokenizer when it has none and config.json's vocab_size >= 256).
 * --encode adds no special tokens unless --add-special (special tokens written in the text are
 * still matched); --decode keeps special tokens and turns invalid UTF-8 into U+FFFD.
 * --chat needs no tokenizer; FILE "-" is stdin.
 * A line that is not the expected JSON is an error naming the line; the exit status is then 1.
 */
#include "chat.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice-tokenize --tokenizer PATH (--encode [--add-special] | --decode | --bench FILE "
               "[--repeat N])\n"
               "       sluice-tokenize --chat FILE.json\n"
               "  PATH: tokenizer.json or a checkpoint directory\n"
               "  --encode: stdin JSON strings, one a line -> JSON arrays of ids\n"
               "  --decode: stdin JSON arrays of ids, one a line -> JSON strings\n"
               "  --bench FILE: encode FILE's lines (one core), print MB/s as JSON\n"
               "  --chat FILE.json: {\"messages\": [{\"role\", \"content\", \"reasoning_content\"}...], \"thinking\": "
               "bool}\n"
               "      -> the DeepSeek-V4 chat prompt as raw UTF-8 and a newline (no tokenizer needed; - = stdin)\n");
}

/* Print the rendered chat prompt of FILE ({"messages": [...], "thinking": bool}). */
static int do_chat(const char *file)
{
    json_error_t je;
    json_t *j = !strcmp(file, "-") ? json_loadf(stdin, JSON_ALLOW_NUL, &je) : json_load_file(file, JSON_ALLOW_NUL, &je);
    if (!j) {
        fprintf(stderr, "sluice-tokenize: %s: line %d: %s\n", file, je.line, je.text);
        return 1;
    }
    json_t *th = json_object_get(j, "thinking");
    if (!json_is_object(j) || (th && !json_is_boolean(th) && !json_is_null(th))) {
        fprintf(stderr, "sluice-tokenize: %s: expected {\"messages\": [...], \"thinking\": true|false}\n", file);
        json_decref(j);
        return 1;
    }
    sl_chat_msg *m;
    int n;
    char err[512], *out;
    size_t len;
    if (sl_chat_from_json(json_object_get(j, "messages"), &m, &n, err, sizeof err)) {
        fprintf(stderr, "sluice-tokenize: %s: %s\n", file, err);
        json_decref(j);
        return 1;
    }
    int rc = sl_chat_render(m, n, json_is_true(th), &out, &len, err, sizeof err);
    free(m);
    json_decref(j);
    if (rc) {
        fprintf(stderr, "sluice-tokenize: %s: %s\n", file, err);
        return 1;
    }
    fwrite(out, 1, len, stdout);
    putchar('\n');
    free(out);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "sluice-tokenize: write error\n");
        return 1;
    }
    return 0;
}

static int open_tokenizer(const char *path, sl_tokenizer **t, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: not found", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return sl_tokenizer_load(path, t, err, errlen);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    int vocab = 0;
    json_t *c = json_load_file(cfg, 0, NULL);
    if (c) vocab = (int)json_integer_value(json_object_get(c, "vocab_size"));
    json_decref(c);
    return sl_tokenizer_open_for_model(path, vocab, t, err, errlen);
}

static int do_encode(sl_tokenizer *t, int add_special)
{
    char *line = NULL, err[256];
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j || !json_is_string(j)) {
            fprintf(stderr, "sluice-tokenize: line %ld: expected a JSON string%s%s\n", lineno, j ? "" : ": ",
                    j ? "" : je.text);
            json_decref(j);
            rc = 1;
            break;
        }
        int32_t *ids;
        size_t nids;
        if (sl_tokenizer_encode(t, json_string_value(j), json_string_length(j), add_special, &ids, &nids, err,
                                sizeof err)) {
            fprintf(stderr, "sluice-tokenize: line %ld: %s\n", lineno, err);
            json_decref(j);
            rc = 1;
            break;
        }
        json_decref(j);
        putchar('[');
        for (size_t i = 0; i < nids; i++) printf(i ? ",%d" : "%d", ids[i]);
        fputs("]\n", stdout);
        free(ids);
    }
    free(line);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "sluice-tokenize: write error\n");
        rc = 1;
    }
    return rc;
}

static int do_decode(sl_tokenizer *t)
{
    char *line = NULL;
    size_t cap = 0, icap = 0;
    int32_t *ids = NULL;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, JSON_DECODE_ANY, &je);
        if (!j || !json_is_array(j)) {
            fprintf(stderr, "sluice-tokenize: line %ld: expected a JSON array of ids%s%s\n", lineno, j ? "" : ": ",
                    j ? "" : je.text);
            json_decref(j);
            rc = 1;
            break;
        }
        size_t k = json_array_size(j), i;
        json_t *v;
        if (k > icap) {
            icap = k;
            int32_t *ni = realloc(ids, icap * sizeof *ids);
            if (!ni) {
                fprintf(stderr, "sluice-tokenize: out of memory\n");
                json_decref(j);
                rc = 1;
                break;
            }
            ids = ni;
        }
        json_array_foreach(j, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                fprintf(stderr, "sluice-tokenize: line %ld: element %zu is not a token id (integer >= 0)\n", lineno, i);
                rc = 1;
                break;
            }
            ids[i] = (int32_t)json_integer_value(v);
        }
        json_decref(j);
        if (rc) break;
        char *text;
        size_t len;
        if (sl_tokenizer_decode(t, ids, k, &text, &len)) {
            fprintf(stderr, "sluice-tokenize: out of memory\n");
            rc = 1;
            break;
        }
        json_t *s = json_stringn_nocheck(text, len);
        char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        if (!out) {
            fprintf(stderr, "sluice-tokenize: line %ld: cannot write the result\n", lineno);
            rc = 1;
        } else {
            fputs(out, stdout);
            putchar('\n');
        }
        free(out);
        json_decref(s);
        free(text);
    }
    free(line);
    free(ids);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "sluice-tokenize: write error\n");
        rc = 1;
    }
    return rc;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encode each line of FILE (without its '\n'), as the Rust peer encodes the same lines. */
static int do_bench(sl_tokenizer *t, const char *file, int repeat)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "sluice-tokenize: %s: cannot open\n", file);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "sluice-tokenize: %s: read error\n", file);
        fclose(f);
        free(buf);
        return 1;
    }
    fclose(f);
    printf("{\"file\": \"%s\", \"runs\": [", file);
    double best = 0;
    size_t bytes = 0, tokens = 0, lines = 0;
    for (int r = 0; r < repeat; r++) {
        bytes = tokens = lines = 0;
        double t0 = now();
        for (char *p = buf, *end = buf + sz; p < end;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            int32_t *ids;
            size_t nids;
            char err[256];
            if (sl_tokenizer_encode(t, p, n, 0, &ids, &nids, err, sizeof err)) {
                fprintf(stderr, "sluice-tokenize: %s: line %zu: %s\n", file, lines + 1, err);
                free(buf);
                return 1;
            }
            free(ids);
            bytes += n, tokens += nids, lines++;
            p += n + 1;
        }
        double dt = now() - t0;
        printf("%s{\"seconds\": %.4f, \"MBps\": %.3f}", r ? ", " : "", dt, (double)bytes / dt / 1e6);
        if (r == 0 || dt < best) best = dt;
    }
    printf("], \"lines\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"best_seconds\": %.4f, \"MBps\": %.3f}\n", lines,
           bytes, tokens, best, (double)bytes / best / 1e6);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *bench = NULL, *chat = NULL;
    int mode = 0, add_special = 0, repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "--encode")) {
            mode = 'e';
        } else if (!strcmp(argv[i], "--decode")) {
            mode = 'd';
        } else if (!strcmp(argv[i], "--bench") && i + 1 < argc) {
            mode = 'b', bench = argv[++i];
        } else if (!strcmp(argv[i], "--chat") && i + 1 < argc) {
            chat = argv[++i];
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--add-special")) {
            add_special = 1;
        } else {
            fprintf(stderr, "sluice-tokenize: unknown or incomplete argument %s (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (chat && !mode && !path) return do_chat(chat);
    if (chat || !path || !mode || repeat < 1) {
        usage(stderr);
        return 2;
    }
    sl_tokenizer *t;
    char err[512];
    if (open_tokenizer(path, &t, err, sizeof err)) {
        fprintf(stderr, "sluice-tokenize: %s\n", err);
        return 1;
    }
    int rc = mode == 'e' ? do_encode(t, add_special) : mode == 'd' ? do_decode(t) : do_bench(t, bench, repeat);
    sl_tokenizer_free(t);
    return rc;
}
