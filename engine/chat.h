/* chat.h — DeepSeek-V4's chat encoding: a list of messages -> the prompt text the model was trained on.
 *
 * The rules are DeepSeek's reference encoder, `encode_messages(messages, thinking_mode,
 * drop_thinking=True, add_default_bos_token=True)` of `encoding/encoding_dsv4.py` in the model
 * repository (deepseek-ai/DeepSeek-V4-Flash, -Pro), for messages without tools, tool calls, tasks or a
 * reasoning-effort prefix:
 *
 *   - the prompt starts with BOS `<｜begin▁of▁sentence｜>`;
 *   - system: its content as is; user: `<｜User｜>` + content; developer: `<｜User｜>` + content (must not
 *     be empty); consecutive user messages are merged into one, their contents joined by "\n\n";
 *   - a user/developer message that is the last one or is followed by an assistant message is followed
 *     by `<｜Assistant｜>` and then `<think>` (thinking on and it is the last user/developer message) or
 *     `</think>` (otherwise), so that in chat mode the model answers at once;
 *   - assistant: [reasoning_content + `</think>`] + content + `<｜end▁of▁sentence｜>`, the bracketed part
 *     only with thinking on and only after the last user/developer message;
 *   - thinking on: reasoning of assistant turns before the last user/developer message is dropped, and
 *     so are developer messages before it.
 *
 * The text is returned as is (special tokens are plain text here; the tokenizer matches them).
 * Errors: a role other than system/user/assistant/developer, an empty developer message that is
 * rendered (one dropped in thinking mode may be empty, as in DeepSeek's encoder).
 * tests/tokenizer/chat_cases.jsonl holds prompts made with DeepSeek's encoder (make_chat_cases.py).
 */
#ifndef SLUICE_CHAT_H
#define SLUICE_CHAT_H

#include <stddef.h>

typedef struct {
    const char *role;                /* NUL-terminated */
    const char *content;             /* content_len bytes (may hold U+0000) */
    size_t content_len;
    const char *reasoning;           /* reasoning_content, reasoning_len bytes; NULL = none */
    size_t reasoning_len;
} sl_chat_msg;

#define SL_CHAT_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define SL_CHAT_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define SL_CHAT_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define SL_CHAT_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define SL_CHAT_THINK_START "<think>"
#define SL_CHAT_THINK_END "</think>"

/* Render n messages. *out is malloc'd and NUL-terminated (*len excludes the NUL). 0, or -1 with one line
 * in err naming the message (messages[i]: ...). */
int sl_chat_render(const sl_chat_msg *m, int n, int thinking, char **out, size_t *len, char *err, size_t errlen);

/* 1 if role is one sl_chat_render accepts. */
int sl_chat_role_ok(const char *role);

/* A JSON array of messages ({"role", "content", optional "reasoning_content"}, OpenAI/DeepSeek API style)
 * -> *out (malloc'd; the strings point into the JSON, valid while it lives). Fields that would change the
 * encoding in ways not implemented here (tools, tool_calls, task, ...) are errors, other fields are
 * ignored. 0, or -1 with one line in err. */
struct json_t;
int sl_chat_from_json(struct json_t *messages, sl_chat_msg **out, int *n, char *err, size_t errlen);

#endif
