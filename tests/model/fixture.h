/* fixture.h — helpers for the model tests: find every fixture under tests/data that has an
 * oracle.json, and read its prompts, greedy continuations and reference logits rows.
 *
 * Layout (see ../shared/fixtures/README.md): oracle.json {prompts, greedy, rows, ...};
 * logits_i.f32 = rows[i] little-endian float32 rows of vocab floats; row t = next-token logits
 * after (prompts[i] + greedy[i])[0..t].
 */
#ifndef SLUICE_TEST_FIXTURE_H
#define SLUICE_TEST_FIXTURE_H

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FX_MAX 32
#define FX_MAX_PROMPTS 16

typedef struct {
    int n_prompt, n_greedy, rows;
    int32_t *seq;          /* prompt + greedy */
    float *logits;         /* rows x vocab */
} fx_prompt;

typedef struct {
    char dir[1024];
    char name[256];
    int n;
    int vocab;
    fx_prompt p[FX_MAX_PROMPTS];
} fx_fixture;

static inline int fx_read_ints(json_t *a, int32_t *out, int max) {
    if (!json_is_array(a) || (int)json_array_size(a) > max) return -1;
    for (size_t i = 0; i < json_array_size(a); i++) out[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return (int)json_array_size(a);
}

static inline int fx_load(const char *dir, const char *name, fx_fixture *f) {
    memset(f, 0, sizeof *f);
    char path[1200];
    if (snprintf(f->dir, sizeof f->dir, "%s", dir) >= (int)sizeof f->dir ||
        snprintf(f->name, sizeof f->name, "%s", name) >= (int)sizeof f->name ||
        snprintf(path, sizeof path, "%s/oracle.json", dir) >= (int)sizeof path)
        return -1;
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) { fprintf(stderr, "%s: %s\n", path, je.text); return -1; }
    json_t *pr = json_object_get(o, "prompts"), *gr = json_object_get(o, "greedy"), *rw = json_object_get(o, "rows");
    if (!json_is_array(pr) || !json_is_array(gr) || !json_is_array(rw)) { json_decref(o); return -1; }
    f->n = (int)json_array_size(pr);
    if (f->n > FX_MAX_PROMPTS) f->n = FX_MAX_PROMPTS;
    for (int i = 0; i < f->n; i++) {
        fx_prompt *p = &f->p[i];
        json_t *a = json_array_get(pr, i), *g = json_array_get(gr, i);
        int np = (int)json_array_size(a), ng = (int)json_array_size(g);
        p->seq = malloc((size_t)(np + ng) * sizeof(int32_t));
        p->n_prompt = fx_read_ints(a, p->seq, np);
        p->n_greedy = fx_read_ints(g, p->seq + np, ng);
        p->rows = (int)json_integer_value(json_array_get(rw, i));
        if (snprintf(path, sizeof path, "%s/logits_%d.f32", dir, i) >= (int)sizeof path) { json_decref(o); return -1; }
        FILE *fp = fopen(path, "rb");
        if (!fp) { fprintf(stderr, "%s: missing\n", path); json_decref(o); return -1; }
        fseek(fp, 0, SEEK_END);
        long sz = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        p->logits = malloc((size_t)sz);
        if (fread(p->logits, 1, (size_t)sz, fp) != (size_t)sz) { fclose(fp); json_decref(o); return -1; }
        fclose(fp);
        f->vocab = (int)(sz / 4 / p->rows);
    }
    json_decref(o);
    return 0;
}

static inline void fx_free(fx_fixture *f) {
    for (int i = 0; i < f->n; i++) { free(f->p[i].seq); free(f->p[i].logits); }
}

/* Names of fixture dirs under root with an oracle.json, sorted. Returns the count. */
static inline int fx_list(const char *root, char names[][256], int max) {
    DIR *d = opendir(root);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char path[1400];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/oracle.json", root, e->d_name);
        if (stat(path, &sb) == 0) snprintf(names[n++], 256, "%s", e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], 256); memcpy(names[j], names[j - 1], 256); memcpy(names[j - 1], t, 256);
        }
    return n;
}

/* Bytes of the checkpoint's *.safetensors files (the CPU cost of a forward grows with it). */
static inline long long fx_weight_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        char path[1400];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path && stat(path, &sb) == 0) n += sb.st_size;
    }
    closedir(d);
    return n;
}

/* Test selection by argument: "fast" = checkpoints under 4 MiB (ASan-friendly, label unit),
 * "slow" = the others, any other text = fixture names containing it, none = all. */
static inline int fx_selected(const char *root, const char *name, const char *sel) {
    if (!sel) return 1;
    int fast = !strcmp(sel, "fast"), slow = !strcmp(sel, "slow");
    if (!fast && !slow) return strstr(name, sel) != NULL;
    char dir[1400];
    if (snprintf(dir, sizeof dir, "%s/%s", root, name) >= (int)sizeof dir) return 0;
    int small = fx_weight_bytes(dir) < (4LL << 20);
    return fast ? small : !small;
}

static inline int fx_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[b]) b = i;
    return b;
}

static inline double fx_maxdiff(const float *a, const float *b, int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;      /* NaN propagates as a failure */
    }
    return m;
}

#endif
