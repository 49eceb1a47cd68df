/* fuzz_safetensors_index.c — libFuzzer target for the sharded checkpoint path of
 * engine/safetensors.c: the input is a model.safetensors.index.json text, opened by st_open_dir in a
 * directory that also holds two valid shards (s1.safetensors: tensors a and b; s2.safetensors:
 * tensor c). Any input must give a model or an error, never a crash, leak or undefined behaviour,
 * and never a file outside the directory (weight_map names plain file names only). An opened model
 * holds every tensor the index names, each once; a violation aborts.
 * The directory is made once per process under $TMPDIR (else /tmp) and removed at exit.
 */
#include "safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

static char dir[256], idx[300];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors_index: %s\n", what);
    abort();
}

static void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f)) fail("cannot write a file in the scratch directory");
}

static void shard(const char *name, const char *header, size_t data_bytes)
{
    char path[300];
    size_t h = strlen(header);
    uint8_t *b = calloc(1, 8 + h + data_bytes);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, b, 8 + h + data_bytes);
    free(b);
}

static void cleanup(void)
{
    char path[300];
    const char *names[] = {"s1.safetensors", "s2.safetensors", "model.safetensors.index.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void setup(void)
{
    if (dir[0]) return;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_st_XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir)) fail("mkdtemp failed");
    atexit(cleanup);
    shard("s1.safetensors",
          "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}",
          16);
    shard("s2.safetensors", "{\"c\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    write_file(idx, data, size);
    st_model *m;
    char err[512];
    if (st_open_dir(dir, &m, err, sizeof err)) return 0;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) fail("opened without a weight_map object");
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!st_find(m, key)) fail("a tensor the index names is missing");
    }
    for (int i = 1; i < st_count(m); i++)
        if (!strcmp(st_at(m, i)->name, st_at(m, i - 1)->name)) fail("a tensor appears twice");
    json_decref(root);
    st_close(m);
    return 0;
}
