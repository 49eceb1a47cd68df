/* DeepSeek-V4 chat encoding (engine/chat.c): every case of chat_cases.jsonl (prompts made with DeepSeek's
 * encoder by make_chat_cases.py) rendered byte for byte; the JSON reader's and renderer's errors.
 *   test_chat CASES.jsonl */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "check.h"

static void test_cases(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int cases = 0, thinking_cases = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *c = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        CHECK(c != NULL, "%s: bad JSON: %s", path, je.text);
        if (!c) continue;
        const char *name = json_string_value(json_object_get(c, "name"));
        int thinking = json_is_true(json_object_get(c, "thinking"));
        json_t *want = json_object_get(c, "prompt");
        sl_chat_msg *m;
        int nm;
        char err[256] = "", *out = NULL;
        size_t len = 0;
        int rc = sl_chat_from_json(json_object_get(c, "messages"), &m, &nm, err, sizeof err);
        CHECK(rc == 0, "%s: %s", name, err);
        if (rc == 0) {
            rc = sl_chat_render(m, nm, thinking, &out, &len, err, sizeof err);
            CHECK(rc == 0, "%s: %s", name, err);
            CHECK(rc == 0 && len == json_string_length(want) && !memcmp(out, json_string_value(want), len),
                  "%s thinking=%d:\n got  %.*s\n want %s", name, thinking, (int)len, out ? out : "",
                  json_string_value(want));
            CHECK(out && out[len] == 0, "%s: not NUL-terminated", name);
            free(out);
            free(m);
        }
        cases++;
        thinking_cases += thinking;
        json_decref(c);
    }
    free(line);
    fclose(f);
    CHECK(cases >= 40 && thinking_cases * 2 == cases, "%d cases, %d with thinking", cases, thinking_cases);
}

static int from_json_err(const char *js, const char *want) {
    json_t *j = json_loads(js, 0, NULL);
    sl_chat_msg *m = NULL;
    int n;
    char err[256] = "";
    int rc = sl_chat_from_json(j, &m, &n, err, sizeof err);
    json_decref(j);
    free(m);
    CHECK(rc == -1 && strstr(err, want), "%s: rc %d err '%s', want '%s'", js, rc, err, want);
    return rc;
}

static void test_errors(void) {
    from_json_err("{}", "must be an array");
    from_json_err("[1]", "messages[0]: not an object");
    from_json_err("[{\"role\": \"tool\", \"content\": \"x\"}]", "messages[0]: \"role\" must be one of");
    from_json_err("[{\"role\": \"user\"}]", "messages[0]: \"content\" must be a string");
    from_json_err("[{\"role\": \"user\", \"content\": null}]", "\"content\" must be a string");
    from_json_err("[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\", "
                  "\"reasoning_content\": 3}]",
                  "messages[1]: \"reasoning_content\" must be a string or null");
    from_json_err("[{\"role\": \"system\", \"content\": \"a\", \"tools\": []}]", "messages[0]: \"tools\" is not supported");
    from_json_err("[{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{}]}]", "\"tool_calls\" is not supported");

    /* extra fields are ignored; null reasoning is none */
    json_t *j = json_loads("[{\"role\": \"user\", \"content\": \"hi\", \"name\": \"bob\"}, {\"role\": \"assistant\", "
                           "\"content\": \"yo\", \"reasoning_content\": null}]",
                           0, NULL);
    sl_chat_msg *m;
    int n;
    char err[256] = "", *out;
    size_t len;
    CHECK(sl_chat_from_json(j, &m, &n, err, sizeof err) == 0 && n == 2 && !m[1].reasoning, "%s", err);
    CHECK(sl_chat_render(m, n, 1, &out, &len, err, sizeof err) == 0, "%s", err);
    const char *want = SL_CHAT_BOS SL_CHAT_USER "hi" SL_CHAT_ASSISTANT SL_CHAT_THINK_START SL_CHAT_THINK_END
        "yo" SL_CHAT_EOS;
    CHECK(len == strlen(want) && !strcmp(out, want), "got %s", out);
    free(out);
    free(m);
    json_decref(j);

    /* the renderer's own checks (callers that do not come through JSON) */
    sl_chat_msg bad_role[] = {{"user", "a", 1, NULL, 0}, {"robot", "b", 1, NULL, 0}};
    CHECK(sl_chat_render(bad_role, 2, 0, &out, &len, err, sizeof err) == -1 && strstr(err, "messages[1]: role 'robot'"),
          "%s", err);
    sl_chat_msg empty_dev[] = {{"developer", "", 0, NULL, 0}};
    CHECK(sl_chat_render(empty_dev, 1, 0, &out, &len, err, sizeof err) == -1 &&
              strstr(err, "messages[0]: a developer message needs content"),
          "%s", err);
    /* an empty developer message is an error only where it is rendered: thinking drops it before the last
     * user message (DeepSeek's encoder asserts on it in chat mode, and renders this in thinking mode) */
    sl_chat_msg dev_then_user[] = {{"developer", "", 0, NULL, 0}, {"user", "q", 1, NULL, 0}};
    CHECK(sl_chat_render(dev_then_user, 2, 0, &out, &len, err, sizeof err) == -1 &&
              strstr(err, "messages[0]: a developer message needs content"),
          "%s", err);
    CHECK(sl_chat_render(dev_then_user, 2, 1, &out, &len, err, sizeof err) == 0 &&
              !strcmp(out, SL_CHAT_BOS SL_CHAT_USER "q" SL_CHAT_ASSISTANT SL_CHAT_THINK_START),
          "%s", err);
    free(out);
    CHECK(sl_chat_role_ok("system") && sl_chat_role_ok("developer") && !sl_chat_role_ok("tool") && !sl_chat_role_ok(NULL),
          "role_ok");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat CASES.jsonl\n");
        return 2;
    }
    test_cases(argv[1]);
    test_errors();
    CHECK_DONE();
}
