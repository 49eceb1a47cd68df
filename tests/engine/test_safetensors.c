/* test_safetensors.c — valid single and sharded files read back exactly; hostile files (truncated,
 * header past EOF, bad JSON, offsets out of range, size mismatch, overflowing shapes, unknown dtype,
 * overlap, path tricks in the index, random corruption) give one error line, never a crash. */
#include "check.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* header JSON + data -> a safetensors file image (header padded with spaces to 8) */
static size_t image(unsigned char *out, const char *hdr, const void *data, size_t dn, int64_t hlen_override)
{
    size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8;
    uint64_t h = hlen_override >= 0 ? (uint64_t)hlen_override : hl + pad;
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(h >> (8 * i));
    memcpy(out + 8, hdr, hl);
    memset(out + 8 + hl, ' ', pad);
    memcpy(out + 8 + hl + pad, data, dn);
    return 8 + hl + pad + dn;
}

static const char *path_of(const char *name)
{
    static char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
    return p;
}

/* Opening must fail with one error line containing `needle`. */
static void expect_fail_file(const char *hdr, const void *data, size_t dn, int64_t hlen, const char *needle)
{
    static unsigned char buf[1 << 16];
    size_t n = image(buf, hdr, data, dn, hlen);
    write_bytes(path_of("bad.safetensors"), buf, n);
    st_model *m = (st_model *)1;
    char err[512] = "";
    int rc = st_open_file(path_of("bad.safetensors"), &m, err, sizeof(err));
    if (rc != -1 || m != NULL || !err[0] || strchr(err, '\n') || (needle && !strstr(err, needle))) {
        fprintf(stderr, "expected failure with \"%s\" for header %.80s: rc %d err \"%s\"\n", needle ? needle : "",
                hdr, rc, err);
        check_failures++;
    }
    if (rc == 0) st_close(m);
}

static const float F[6] = {1.5f, -2.25f, 3.0f, 0.125f, -7.0f, 1e-3f};

static void test_valid(void)
{
    unsigned char data[64], buf[1024];
    memcpy(data, F, 24);                      /* a: F32 [2,3] at 0..24 */
    uint16_t bf[4] = {0x3F80, 0xC000, 0x4040, 0x0000};
    memcpy(data + 24, bf, 8);                 /* b: BF16 [4] at 24..32 */
    int64_t ids[2] = {7, -3};
    memcpy(data + 32, ids, 16);               /* c: I64 [2] at 32..48 */
    data[48] = 0x38;                          /* d: F8_E4M3 [] at 48..49 */
    const char *hdr = "{\"__metadata__\": {\"format\": \"pt\"}, "
                      "\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}, "
                      "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]}, "
                      "\"c\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [32, 48]}, "
                      "\"d\": {\"dtype\": \"F8_E4M3\", \"shape\": [], \"data_offsets\": [48, 49]}, "
                      "\"e\": {\"dtype\": \"U8\", \"shape\": [0, 5], \"data_offsets\": [49, 49]}}";
    size_t n = image(buf, hdr, data, 49, -1);
    write_bytes(path_of("ok.safetensors"), buf, n);
    st_model *m;
    char err[512];
    int rc = st_open_file(path_of("ok.safetensors"), &m, err, sizeof(err));
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    if (rc) return;
    CHECK(st_count(m) == 5);
    const st_tensor *a = st_find(m, "a"), *b = st_find(m, "b"), *c = st_find(m, "c"), *d = st_find(m, "d");
    CHECK(a && a->dtype == ST_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24);
    CHECK(a && !memcmp(a->data, F, 24));
    CHECK(b && b->dtype == ST_BF16 && b->nbytes == 8 && !memcmp(b->data, bf, 8));
    CHECK(c && c->dtype == ST_I64 && !memcmp(c->data, ids, 16));
    CHECK(d && d->ndim == 0 && d->nbytes == 1 && *(const uint8_t *)d->data == 0x38);
    CHECK(st_find(m, "__metadata__") == NULL && st_find(m, "z") == NULL && st_find(m, "") == NULL);
    CHECK(st_at(m, 0) && !strcmp(st_at(m, 0)->name, "a") && st_at(m, 5) == NULL && st_at(m, -1) == NULL);
    st_close(m);
    CHECK(st_dtype_size(ST_F32) == 4 && st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F8_E8M0) == 1 &&
          st_dtype_size(ST_I64) == 8 && st_dtype_size(ST_I32) == 4);
    CHECK(!strcmp(st_dtype_name(ST_F8_E4M3), "F8_E4M3") && !strcmp(st_dtype_name(ST_I8), "I8"));
}

static void test_hostile(void)
{
    unsigned char data[64] = {0};
    const char *ok1 = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}}";
    /* files too small */
    write_bytes(path_of("empty.safetensors"), "", 0);
    st_model *m;
    char err[256];
    CHECK(st_open_file(path_of("empty.safetensors"), &m, err, sizeof(err)) == -1 && strstr(err, "too small"));
    write_bytes(path_of("seven.safetensors"), "\x10\0\0\0\0\0\0", 7);
    CHECK(st_open_file(path_of("seven.safetensors"), &m, err, sizeof(err)) == -1);
    CHECK(st_open_file(path_of("missing.safetensors"), &m, err, sizeof(err)) == -1 && strstr(err, "cannot open"));
    CHECK(st_open_file(tmpdir, &m, err, sizeof(err)) == -1); /* a directory */

    expect_fail_file(ok1, data, 24, 100000, "past the end");
    expect_fail_file(ok1, data, 24, INT64_MAX, "past the end");
    expect_fail_file(ok1, data, 24, 0, "too small");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]", data, 24, -1, "JSON");
    expect_fail_file("[1, 2, 3]", data, 24, -1, "not a JSON object");
    expect_fail_file("{\"a\": 5}", data, 24, -1, "'a'");
    /* data_offsets outside the data section / reversed / malformed */
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}}", data, 20, -1, "outside");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [24, 0]}}", data, 24, -1, "outside");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [18446744073709551612, 18446744073709551616]}}",
                     data, 24, -1, NULL); /* jansson: integer too big */
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", data, 24, -1, "data_offsets");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", data, 24, -1, "data_offsets");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4.5]}}", data, 24, -1, "data_offsets");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", data, 24, -1, "'a'");
    /* shape x dtype size != bytes */
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 24]}}", data, 24, -1, "needs 16");
    expect_fail_file("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}}", data, 24, -1, "needs 12");
    /* overflowing / negative / non-integer shapes */
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 1099511627776, 1099511627776], "
                     "\"data_offsets\": [0, 24]}}", data, 24, -1, "overflow");
    expect_fail_file("{\"a\": {\"dtype\": \"I64\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 0]}}",
                     data, 24, -1, "'a'");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2305843009213693952, 2], \"data_offsets\": [0, 16]}}",
                     data, 24, -1, "'a'");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [-2, -3], \"data_offsets\": [0, 24]}}", data, 24, -1, "shape");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2.0, 3], \"data_offsets\": [0, 24]}}", data, 24, -1, "shape");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 6], \"data_offsets\": [0, 24]}}", data, 24, -1,
                     "dimensions");
    /* dtypes */
    expect_fail_file("{\"a\": {\"dtype\": \"F64\", \"shape\": [3], \"data_offsets\": [0, 24]}}", data, 24, -1, "dtype 'F64'");
    expect_fail_file("{\"a\": {\"dtype\": \"Q4_K\", \"shape\": [3], \"data_offsets\": [0, 24]}}", data, 24, -1, "dtype");
    expect_fail_file("{\"a\": {\"dtype\": 4, \"shape\": [3], \"data_offsets\": [0, 24]}}", data, 24, -1, "dtype");
    /* a name with a newline still gives one error line */
    expect_fail_file("{\"a\\nb\": {\"dtype\": \"F64\", \"shape\": [3], \"data_offsets\": [0, 24]}}", data, 24, -1, "'a?b'");
    /* two tensors sharing bytes; a duplicate key */
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
                     "\"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", data, 24, -1, "overlap");
    expect_fail_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                     "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", data, 24, -1, NULL);

    /* truncation of a valid file at every length: an error (or success only if nothing is cut) */
    unsigned char buf[512];
    size_t n = image(buf, ok1, F, 24, -1);
    for (size_t cut = 0; cut < n; cut++) {
        write_bytes(path_of("cut.safetensors"), buf, cut);
        m = NULL;
        CHECK(st_open_file(path_of("cut.safetensors"), &m, err, sizeof(err)) == -1 && m == NULL);
    }

    /* random corruption of header bytes: never a crash; a success must still be self-consistent */
    uint32_t s = 2463534242u;
    for (int it = 0; it < 800; it++) {
        unsigned char b2[512];
        memcpy(b2, buf, n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            size_t pos = s % (n - 24);
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            b2[pos] = it & 1 ? (unsigned char)s : (unsigned char)"0123456789[]{},:\"-e"[s % 19];
        }
        write_bytes(path_of("fuzz.safetensors"), b2, n);
        m = NULL;
        if (st_open_file(path_of("fuzz.safetensors"), &m, err, sizeof(err)) == 0) {
            for (int i = 0; i < st_count(m); i++) {
                const st_tensor *t = st_at(m, i);
                size_t numel = 1;
                for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
                CHECK(numel * st_dtype_size(t->dtype) == t->nbytes);
            }
            st_close(m);
        } else {
            CHECK(m == NULL && err[0] && !strchr(err, '\n'));
        }
    }
}

static void write_shard(const char *name, const char *hdr, const void *data, size_t dn)
{
    unsigned char buf[2048];
    size_t n = image(buf, hdr, data, dn, -1);
    write_bytes(path_of(name), buf, n);
}

static void expect_fail_dir(const char *index, const char *needle)
{
    write_bytes(path_of("model.safetensors.index.json"), index, strlen(index));
    st_model *m = (st_model *)1;
    char err[512] = "";
    int rc = st_open_dir(tmpdir, &m, err, sizeof(err));
    if (rc != -1 || m != NULL || !err[0] || strchr(err, '\n') || !strstr(err, needle)) {
        fprintf(stderr, "expected dir failure with \"%s\": rc %d err \"%s\"\n", needle, rc, err);
        check_failures++;
    }
    if (rc == 0) st_close(m);
}

static void test_sharded(void)
{
    st_model *m;
    char err[512];
    unsigned char d2[17];
    memcpy(d2, F + 2, 16);
    d2[16] = 127;
    CHECK(st_open_dir(tmpdir, &m, err, sizeof(err)) == -1 && strstr(err, "no model.safetensors"));
    write_shard("model-00001-of-00002.safetensors",
                "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", F, 8);
    write_shard("model-00002-of-00002.safetensors",
                "{\"y.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
                "\"y.scale\": {\"dtype\": \"F8_E8M0\", \"shape\": [1, 1], \"data_offsets\": [16, 17]}}",
                d2, 17);
    const char *idx = "{\"metadata\": {\"total_size\": 25}, \"weight_map\": {"
                      "\"x.weight\": \"model-00001-of-00002.safetensors\", "
                      "\"y.weight\": \"model-00002-of-00002.safetensors\", "
                      "\"y.scale\": \"model-00002-of-00002.safetensors\"}}";
    write_bytes(path_of("model.safetensors.index.json"), idx, strlen(idx));
    int rc = st_open_dir(tmpdir, &m, err, sizeof(err));
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    if (rc == 0) {
        CHECK(st_count(m) == 3);
        const st_tensor *x = st_find(m, "x.weight"), *y = st_find(m, "y.weight");
        CHECK(x && !memcmp(x->data, F, 8) && y && !memcmp(y->data, F + 2, 16) && st_find(m, "y.scale"));
        st_close(m);
    }
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"model-00002-of-00002.safetensors\"}}", "not in it");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"../model-00001-of-00002.safetensors\"}}", "plain file name");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"/etc/passwd\"}}", "plain file name");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"..\"}}", "plain file name");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": 3}}", "plain file name");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"model-00009-of-00009.safetensors\"}}", "cannot open");
    expect_fail_dir("{\"weight_map\": {}}", "weight_map");
    expect_fail_dir("{\"weight\": {}}", "weight_map");
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"model-00001", "invalid JSON");
    /* the same tensor in two shards */
    write_shard("model-00003-of-00003.safetensors",
                "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", F, 8);
    expect_fail_dir("{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\", "
                    "\"z\": \"model-00003-of-00003.safetensors\"}}",
                    "appears twice");
    unlink(path_of("model.safetensors.index.json"));
    unlink(path_of("model-00001-of-00002.safetensors"));
    unlink(path_of("model-00002-of-00002.safetensors"));
    unlink(path_of("model-00003-of-00003.safetensors"));
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "%s", "st_test_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_valid();
    test_hostile();
    test_sharded();
    static const char *files[] = {"ok.safetensors", "bad.safetensors", "empty.safetensors", "seven.safetensors",
                                  "cut.safetensors", "fuzz.safetensors", NULL};
    for (int i = 0; files[i]; i++) unlink(path_of(files[i]));
    rmdir(tmpdir);
    CHECK_DONE();
}
