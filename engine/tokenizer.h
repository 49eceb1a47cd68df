/* tokenizer.h — Hugging Face tokenizer.json (byte-level BPE) in C, exact against `tokenizers`.
 *
 * Contract: sl_tokenizer_encode(text, add_special=0) gives the ids that
 * `Tokenizer.encode(text, add_special_tokens=False).ids` gives in the Rust `tokenizers` library for
 * the same tokenizer.json, and sl_tokenizer_decode gives `Tokenizer.decode(ids,
 * skip_special_tokens=False)` byte for byte (ids the tokenizer does not know are skipped; invalid
 * UTF-8 becomes U+FFFD, one per maximal ill-formed subsequence, as Rust's from_utf8_lossy does).
 *
 * Supported components (anything else is refused at load with an error naming it):
 *   model          BPE: vocab, merges ("a b" strings or ["a","b"] pairs), byte_fallback,
 *                  ignore_merges, unk_token, fuse_unk (no dropout, no subword prefix/suffix)
 *   normalizer     null, NFC, NFD, NFKC, NFKD (libunistring's u8_normalize), Sequence of those
 *                  (empty: DeepSeek-V3's); applied to the text between normalized=false added
 *                  tokens, before normalized=true ones are matched (by their normalized content)
 *   pre_tokenizer  null, Split (Regex or String pattern; Isolated, Removed, MergedWithPrevious,
 *                  MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex
 *                  with the GPT-2 pattern), Sequence of those
 *   added_tokens   matched before pre-tokenisation, leftmost-longest; single_word, lstrip,
 *                  rstrip, normalized honoured
 *   post_processor null, ByteLevel (no ids), TemplateProcessing (single), Roberta/BertProcessing,
 *                  Sequence of those — only when add_special is set
 *   decoder        null (tokens joined by " ") or ByteLevel
 * Regexes run on Oniguruma with the syntax and options the Rust binding uses (ONIG_SYNTAX_DEFAULT,
 * ONIG_OPTION_NONE, UTF-8), so patterns mean what they mean in `tokenizers`.
 *
 * Threads: encode uses a per-tokenizer cache and scratch: one thread at a time per tokenizer.
 * Decode and the streaming decoder only read the tokenizer: any number of threads.
 * Errors: functions return 0 or -1 with one line in err (when err is not NULL).
 */
#ifndef SLUICE_TOKENIZER_H
#define SLUICE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_tokenizer sl_tokenizer;

/* Load a tokenizer.json file, or the JSON text of one. */
int sl_tokenizer_load(const char *path, sl_tokenizer **out, char *err, size_t errlen);
int sl_tokenizer_load_json(const char *text, size_t len, sl_tokenizer **out, char *err, size_t errlen);
/* The byte tokenizer: id = byte (encode), ids 0..255 -> bytes (decode, other ids skipped). */
int sl_tokenizer_bytes(sl_tokenizer **out, char *err, size_t errlen);
/* For a checkpoint directory: dir/tokenizer.json when present (with dir/tokenizer_config.json's
 * add_bos_token / add_eos_token applied to add_special, as transformers does), else the byte
 * tokenizer when vocab_size >= 256, else an error asking for token-id prompts. */
int sl_tokenizer_open_for_model(const char *dir, int vocab_size, sl_tokenizer **out, char *err,
                                size_t errlen);
void sl_tokenizer_free(sl_tokenizer *t);

/* Encode len bytes of UTF-8 (may hold U+0000; invalid UTF-8 is an error). *ids is malloc'd
 * (free it; non-NULL even when *n == 0). add_special: apply the post-processor (BOS/EOS). */
int sl_tokenizer_encode(sl_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n, char *err, size_t errlen);
/* Decode to valid UTF-8, NUL-terminated, malloc'd (*len excludes the NUL). -1 only on OOM. */
int sl_tokenizer_decode(const sl_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len);

int sl_tokenizer_n_ids(const sl_tokenizer *t);          /* largest id + 1 */
/* What the decoder makes of one token: its bytes (ByteLevel: raw bytes, maybe a partial UTF-8
 * character), valid while t lives; NULL for an id the tokenizer does not know. Concatenating these
 * and converting lossily equals sl_tokenizer_decode for the ByteLevel decoder and the byte
 * tokenizer (the null decoder also puts " " between tokens). */
const char *sl_tokenizer_token_bytes(const sl_tokenizer *t, int32_t id, size_t *len);
/* 1 if id is an added token marked "special" (BOS, EOS, <｜User｜>, ...), else 0. */
int sl_tokenizer_is_special(const sl_tokenizer *t, int32_t id);
int sl_tokenizer_is_bytes(const sl_tokenizer *t);       /* 1: the byte fallback */
/* Id of a token (added tokens first, then the model vocab, model-space spelling), or -1. */
int32_t sl_tokenizer_token_id(const sl_tokenizer *t, const char *tok, size_t len);

/* Streaming decode: push ids one at a time, get the text they complete. The concatenation of
 * every push and the final flush equals sl_tokenizer_decode of all ids; an incomplete UTF-8
 * character at the end is held back until the next id completes it (or flush turns it into
 * U+FFFD). The returned pointer stays valid until the next call on the same sl_detok. */
typedef struct {
    const sl_tokenizer *t;
    char *pend;                  /* held-back bytes (at most 3) */
    size_t npend;
    char *out;                   /* last returned text */
    size_t outcap;
    int ntok;                    /* tokens pushed (the null decoder joins with " ") */
} sl_detok;

void sl_detok_init(sl_detok *d, const sl_tokenizer *t);
int sl_detok_push(sl_detok *d, int32_t id, const char **text, size_t *len);
int sl_detok_flush(sl_detok *d, const char **text, size_t *len);
void sl_detok_free(sl_detok *d);

/* UTF-8 helpers (shared with the worker): 1 if s[0..n) is valid UTF-8; lossy copy as above. */
int sl_utf8_valid(const char *s, size_t n);
/* Appends the lossy conversion of s[0..n) to *buf (realloc'd, *blen and *bcap updated); if
 * hold_tail, a final incomplete-but-valid prefix is not converted and its length is returned
 * in *held (else *held = 0). -1 on OOM. */
int sl_utf8_lossy_append(const char *s, size_t n, int hold_tail, char **buf, size_t *blen,
                         size_t *bcap, size_t *held);

#endif
