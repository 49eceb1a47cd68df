/* textcodec.h — text <-> token ids for the worker, behind one small interface.
 *
 * A text codec has two functions: encode (UTF-8 text -> token ids) and token_bytes (one id -> the raw
 * bytes it stands for; special tokens such as eos give no bytes). Everything else — incremental
 * decoding to valid UTF-8 with U+FFFD for invalid bytes, and stop-string matching on the decoded text —
 * is built on token_bytes here, so plugging in the real tokenizer (engine/tokenizer.h) is a one-function
 * swap in textcodec_open(). Until then the byte codec serves byte-sized vocabularies (vocab_size 256:
 * id = byte); other models accept token-id prompts only and return text = null.
 */
#ifndef SLUICE_TEXTCODEC_H
#define SLUICE_TEXTCODEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_textcodec {
    const char *name;
    /* ids: malloc'ed array; 0 or -1 with err. */
    int (*encode)(struct sl_textcodec *tc, const char *text, size_t len, int32_t **ids, int *n, char *err,
                  size_t errlen);
    /* Bytes of one token into buf (cap >= 64); returns the byte count (0 for special tokens), -1 if unknown. */
    int (*token_bytes)(struct sl_textcodec *tc, int32_t id, uint8_t *buf, size_t cap);
    void (*close)(struct sl_textcodec *tc);
    void *impl;
    int eos_ids[8];
    int n_eos;
} sl_textcodec;

/* The codec for a model directory; NULL (no text support) when none fits. */
sl_textcodec *textcodec_open(const char *model_path, int vocab_size, const int *eos_ids, int n_eos);
void textcodec_close(sl_textcodec *tc);

/* Incremental decoder for one job: feed token ids, get the decoded text so far as valid UTF-8. */
typedef struct {
    uint8_t pending[8];              /* an incomplete UTF-8 sequence waiting for its next bytes */
    int n_pending;
    char *text;                      /* valid UTF-8, NUL-terminated */
    size_t len, cap;
} sl_textdec;

void textdec_init(sl_textdec *d);
void textdec_free(sl_textdec *d);
/* Append one token's text; 0 or -1 on out of memory. */
int textdec_push(sl_textdec *d, sl_textcodec *tc, int32_t id);
/* Flush an incomplete trailing sequence as U+FFFD (at the end of generation). */
int textdec_finish(sl_textdec *d);
/* Append raw bytes (test hook and token_bytes sink). */
int textdec_push_bytes(sl_textdec *d, const uint8_t *b, size_t n);

/* First occurrence of any stop string in text[0..len) that ends at or after `from`; returns the
 * match start or -1. */
long stop_find(const char *text, size_t len, size_t from, char *const *stop, const size_t *stop_len, int n_stop);

#endif
