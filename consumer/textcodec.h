/* textcodec.h — text <-> token ids for the worker, on the model's tokenizer (engine/tokenizer.h).
 *
 * Contract:
 * - textcodec_open: the model directory's tokenizer.json when present (BOS/EOS per its
 *   tokenizer_config.json), else the byte tokenizer (id = byte) when vocab_size >= 256, else no text
 *   support (the worker then rejects text prompts and stop strings per job; token-id prompts work).
 *   A tokenizer.json that is present but cannot be loaded is an error (the worker does not start).
 * - textcodec_encode: prompt text -> ids exactly as sl_tokenizer_encode(text, add_special=1), the
 *   same ids `sluice-generate --prompt` feeds the engine; every id must lie inside the model vocab.
 * - Decoding (textdec_*): the text of generated ids is Tokenizer.decode(ids, skip_special_tokens=True)
 *   of the tokenizers library, with the model's EOS ids also skipped (they matter for the byte
 *   tokenizer, which has no special tokens): special tokens and EOS give no text. Streaming: the text
 *   grows token by token and never ends inside a UTF-8 character (an incomplete one is held back until
 *   the next token completes it; textdec_finish turns a leftover into U+FFFD). Invalid bytes become
 *   U+FFFD as in from_utf8_lossy. The final text equals the whole-sequence decode.
 * - stop_find: stop strings are matched on that decoded text, so a stop string spanning tokens (or
 *   ending inside a multi-byte character) is found on the token that completes it.
 * - Chat jobs: textcodec_encode_messages renders the messages with DeepSeek-V4's chat encoding
 *   (engine/chat.h) and encodes the text without the post-processor (the rendered text already starts
 *   with BOS); textcodec_chat_answer splits the final text into content and reasoning_content at the
 *   end of thinking, as DeepSeek's API does.
 * Threads: one codec per worker; encode and the decoders are used from the worker's main thread.
 */
#ifndef SLUICE_TEXTCODEC_H
#define SLUICE_TEXTCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "tokenizer.h"

typedef struct sl_textcodec {
    const char *name;                /* "tokenizer.json" or "bytes" */
    sl_tokenizer *tok;
    int vocab_size;
    int eos_ids[8];
    int n_eos;
    int32_t think_end_id;            /* the tokenizer's `</think>` token, -1 if none */
} sl_textcodec;

/* 0 with *out set; 1 when the model has no text support (*out NULL, err says why); -1 when a
 * tokenizer.json is present but unusable (err names the problem). */
int textcodec_open(const char *model_path, int vocab_size, const int *eos_ids, int n_eos, sl_textcodec **out,
                   char *err, size_t errlen);
void textcodec_close(sl_textcodec *tc);
/* Prompt text -> ids (malloc'd, free them). 0, or -1 with one line in err (invalid UTF-8, an id outside
 * the model vocab, too long). */
int textcodec_encode(sl_textcodec *tc, const char *text, size_t len, int32_t **ids, int *n, char *err,
                     size_t errlen);
/* A chat job's messages -> ids (malloc'd). 0, or -1 with one line in err naming the message: a role other
 * than system/user/assistant/developer, invalid UTF-8, a last message that is not from the user (or
 * developer), an empty developer message, an id outside the model vocab. */
int textcodec_encode_messages(sl_textcodec *tc, const sl_job_message *msgs, int n, int thinking, int32_t **ids,
                              int *n_ids, char *err, size_t errlen);

/* The answer of a chat job, pointing into its final text. Thinking off: content = the text, reasoning
 * NULL. Thinking on: reasoning = the text before the end of thinking, content = the text after it; no
 * end of thinking yet (max_tokens reached while reasoning): reasoning = the text, content NULL. The end
 * of thinking is the first `</think>` token among tokens when the tokenizer has one that decodes to no
 * text (a special token), else the first `</think>` in the text. */
typedef struct {
    const char *content;
    size_t content_len;
    const char *reasoning;
    size_t reasoning_len;
} sl_chat_answer;
void textcodec_chat_answer(const sl_textcodec *tc, int thinking, const int32_t *tokens, int n_tokens,
                           const char *text, size_t len, sl_chat_answer *out);

/* 1 if id gives no text (a special token or an EOS id). */
int textcodec_silent(const sl_textcodec *tc, int32_t id);

/* Incremental decoder for one job: push token ids, read the decoded text so far (valid UTF-8). */
typedef struct {
    const sl_textcodec *tc;
    sl_detok det;                    /* holds back an incomplete UTF-8 character */
    char *text;                      /* valid UTF-8, NUL-terminated once anything was pushed/finished */
    size_t len, cap;
} sl_textdec;

void textdec_init(sl_textdec *d, const sl_textcodec *tc);
void textdec_free(sl_textdec *d);
/* Append one token's text; 0 or -1 on out of memory. */
int textdec_push(sl_textdec *d, int32_t id);
/* Flush a held-back incomplete character as U+FFFD (end of generation); makes text "" if empty. */
int textdec_finish(sl_textdec *d);
/* Forget held-back bytes (after a stop string cut the text). */
void textdec_drop_pending(sl_textdec *d);

/* First occurrence of any stop string in text[0..len) that ends after `from` (i.e. uses text added
 * since then); returns the match start or -1. */
long stop_find(const char *text, size_t len, size_t from, char *const *stop, const size_t *stop_len, int n_stop);

#endif
