/* fuzz_tokenizer_load.c — libFuzzer target for engine/tokenizer_load.c: the input is a
 * tokenizer.json text, loaded by sl_tokenizer_load_json as a model's tokenizer is. Any input must
 * give a tokenizer or one error line, never a crash, leak or undefined behaviour. A loaded
 * tokenizer is then used as the worker uses it: a short text (with an added-token-like piece and
 * multi-byte characters) encoded with and without special tokens, every id inside the vocabulary,
 * decoded to valid UTF-8, and every id's bytes looked up. A violation aborts.
 */
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tokenizer_load: %s\n", what);
    abort();
}

static void use(sl_tokenizer *t, const char *s, size_t n, int add_special)
{
    int32_t *ids;
    size_t ni;
    char err[256], *text;
    size_t len;
    if (sl_tokenizer_encode(t, s, n, add_special, &ids, &ni, err, sizeof err)) return;   /* e.g. no merges fit */
    int n_ids = sl_tokenizer_n_ids(t);
    for (size_t i = 0; i < ni; i++)
        if (ids[i] < 0 || ids[i] >= n_ids) fail("encode gave an id outside the vocabulary");
    if (sl_tokenizer_decode(t, ids, ni, &text, &len)) fail("decode of encoded ids failed");
    if (!sl_utf8_valid(text, len)) fail("decode is not valid UTF-8");
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_tokenizer *t;
    char err[512];
    if (sl_tokenizer_load_json((const char *)data, size, &t, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err) || !err[0]) fail("error without a message");
        return 0;
    }
    int n_ids = sl_tokenizer_n_ids(t);
    if (n_ids < 0) fail("negative vocabulary size");
    for (int32_t i = 0; i < n_ids && i < 4096; i++) {
        size_t bl;
        const char *b = sl_tokenizer_token_bytes(t, i, &bl);
        if (b && bl) (void)((volatile const char *)b)[bl - 1];
        (void)sl_tokenizer_is_special(t, i);
    }
    static const char text[] = "Hello world, ab <s> 中文 😀\n\t  x'll 123";
    use(t, text, sizeof text - 1, 0);
    use(t, text, sizeof text - 1, 1);
    int32_t some[] = {0, 1, 2, 3, n_ids - 1, n_ids, -1};
    char *out;
    size_t len;
    if (sl_tokenizer_decode(t, some, sizeof some / sizeof *some, &out, &len)) fail("decode failed");
    if (!sl_utf8_valid(out, len)) fail("decode is not valid UTF-8");
    free(out);
    sl_tokenizer_free(t);
    return 0;
}
