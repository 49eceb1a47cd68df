/* test_cli.c — the sluice-generate command-line contract.
 *
 * Greedy generation of every public-fixture prompt (chunked prefill) prints a JSON last line with
 * the fixture's tokens; --logits-out rows match logits_i.f32 within 1e-4; --prompt uses byte
 * tokens on a 256-vocab model without tokenizer.json; FP8 KV and FP8 index keys run on a model with 64-dim blocks;
 * bad arguments (FP8 storage a model cannot keep among them), a missing or corrupt checkpoint and an unavailable
 * backend exit non-zero with exactly one line on stderr.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

#ifndef SLUICE_GENERATE
#error "SLUICE_GENERATE must name the sluice-generate binary"
#endif

static int failures = 0;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static char tmpdir[64];

static char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = 0;
    fclose(f);
    if (len) *len = n;
    return b;
}

/* Run sluice-generate with args; returns the exit status; stdout/stderr texts (malloc'd). */
static int gen(const char *args, char **out, char **err) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/out' 2>'%s/err'", SLUICE_GENERATE, args, tmpdir, tmpdir);
    int st = system(cmd);
    char p[128];
    snprintf(p, sizeof p, "%s/out", tmpdir);
    *out = slurp(p, NULL);
    snprintf(p, sizeof p, "%s/err", tmpdir);
    *err = slurp(p, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static json_t *last_json_line(const char *out) {
    if (!out) return NULL;
    const char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') end--;
    const char *start = end;
    while (start > out && start[-1] != '\n') start--;
    return json_loadb(start, (size_t)(end - start), 0, NULL);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

static void expect_error(const char *args) {
    char *out, *err;
    int rc = gen(args, &out, &err);
    if (!(rc != 0 && err && count_lines(err) == 1 && strlen(err) > 10)) {
        fprintf(stderr, "args [%s]: exit %d, stderr: %s\n", args, rc, err ? err : "(none)");
        failures++;
    }
    free(out);
    free(err);
}

int main(void) {
    const char *dir = SLUICE_TEST_DATA "/tiny-v4-public";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-cli-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    fx_fixture f;
    if (fx_load(dir, "tiny-v4-public", &f)) return 1;
    char args[6000], *out, *err;
    double md = 0.0;

    for (int k = 0; k < f.n; k++) {
        const fx_prompt *p = &f.p[k];
        int n = snprintf(args, sizeof args, "--model '%s' --max-new-tokens %d --ignore-eos --chunk %d --logprobs "
                         "--logits-out '%s/rows' --tokens ", dir, p->n_greedy, 1 + 2 * k, tmpdir);
        for (int i = 0; i < p->n_prompt; i++) n += snprintf(args + n, sizeof args - n, i ? ",%d" : "%d", p->seq[i]);
        int rc = gen(args, &out, &err);
        CHECK(rc == 0);
        json_t *j = last_json_line(out);
        CHECK(j != NULL);
        json_t *t = json_object_get(j, "tokens"), *lp = json_object_get(j, "logprobs");
        CHECK(json_is_array(t) && (int)json_array_size(t) == p->n_greedy);
        for (int i = 0; i < p->n_greedy && json_is_array(t) && i < (int)json_array_size(t); i++)
            CHECK(json_integer_value(json_array_get(t, i)) == p->seq[p->n_prompt + i]);
        CHECK(json_is_array(lp) && (int)json_array_size(lp) == p->n_greedy);
        CHECK(json_is_string(json_object_get(j, "finish_reason")) &&
              !strcmp(json_string_value(json_object_get(j, "finish_reason")), "length"));
        CHECK(json_is_object(json_object_get(j, "timings")));
        json_decref(j);
        char rp[128];
        long len = 0;
        snprintf(rp, sizeof rp, "%s/rows", tmpdir);
        float *rows = (float *)slurp(rp, &len);
        CHECK(rows && len == (long)p->rows * f.vocab * 4);
        if (rows && len == (long)p->rows * f.vocab * 4) {
            double d = fx_maxdiff(rows, p->logits, p->rows * f.vocab);
            if (!(d <= md)) md = d;
        }
        free(rows);
        if (rc) fprintf(stderr, "stderr: %s\n", err ? err : "");
        free(out);
        free(err);
    }
    printf("sluice-generate --logits-out max abs diff %.3g\n", md);
    CHECK(md <= 1e-4);

    /* --prompt: byte tokens; default greedy stops after eos or at max */
    snprintf(args, sizeof args, "--model '%s' --prompt 'hello' --max-new-tokens 6 --seed 3 --temperature 0.7 --top-k 20 "
             "--top-p 0.9 --min-p 0.01 --repetition-penalty 1.1 --threads 2", dir);
    CHECK(gen(args, &out, &err) == 0);
    json_t *j = last_json_line(out);
    CHECK(j && json_array_size(json_object_get(j, "tokens")) >= 1 && json_array_size(json_object_get(j, "tokens")) <= 6);
    json_decref(j);
    free(out);
    free(err);
    CHECK(gen("--help", &out, &err) == 0 && out && strstr(out, "--max-new-tokens"));
    free(out);
    free(err);

    /* errors: one line, non-zero exit */
    expect_error("");
    snprintf(args, sizeof args, "--model /nonexistent/model --tokens 1,2 --max-new-tokens 3"); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,,2 --max-new-tokens 3", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,300 --max-new-tokens 3", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 0", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --temperature -1", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --top-p 2", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --frobnicate 1", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --prompt x --max-new-tokens 3", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --backend tpu", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --quantize-experts int3", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --logits-out /nonexistent/dir/x", dir); expect_error(args);
#ifndef SLUICE_HAVE_CUDA_BACKEND
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --backend cuda", dir); expect_error(args);
#endif
    /* FP8 KV and FP8 index keys: a model with blocks of 64 runs with both; this one's 24 + 8 head dims and 16-dim index
     * keys refuse them, as does a dtype that is not one */
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --kv-dtype fp8", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --index-key-dtype fp8", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3 --kv-dtype fp16", dir); expect_error(args);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2,3 --max-new-tokens 4 --ignore-eos --kv-dtype fp8 --index-key-dtype fp8",
             SLUICE_TEST_DATA "/tiny-v4-hub-fp8-mxfp4");
    CHECK(gen(args, &out, &err) == 0);
    j = last_json_line(out);
    CHECK(j && json_array_size(json_object_get(j, "tokens")) == 4);
    json_decref(j);
    free(out);
    free(err);
    /* corrupt checkpoints: truncated safetensors; garbage config */
    char cdir[128], path[256], cmd[1024];
    snprintf(cdir, sizeof cdir, "%s/bad", tmpdir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/' && head -c 5000 '%s/model.safetensors' > '%s/model.safetensors'",
             cdir, dir, cdir, dir, cdir);
    CHECK(system(cmd) == 0);
    snprintf(args, sizeof args, "--model '%s' --tokens 1,2 --max-new-tokens 3", cdir); expect_error(args);
    snprintf(path, sizeof path, "%s/config.json", cdir);
    FILE *fp = fopen(path, "w");
    if (fp) { fputs("{\"hidden_size\": 64,", fp); fclose(fp); }
    expect_error(args);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
    fx_free(&f);
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
