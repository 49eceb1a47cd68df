/* safetensors.c — mmap'ed safetensors files with a validated header (see safetensors.h).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data section; offsets are relative to the data section.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (256u << 20) /* 256 MiB of JSON is far beyond any real checkpoint */
#define ST_MAX_SHARDS 4096

typedef struct {
    void *map;
    size_t size;
} st_file;

struct st_model {
    st_file *files;
    int n_files;
    st_tensor *tensors; /* sorted by name */
    int n_tensors, cap_tensors;
};

static const char *DTYPE_NAMES[ST_DTYPE_COUNT] = {"F32", "BF16", "F16", "F8_E4M3", "F8_E8M0",
                                                  "I8",  "U8",   "I64", "I32"};
static const size_t DTYPE_SIZES[ST_DTYPE_COUNT] = {4, 2, 2, 1, 1, 1, 1, 8, 4};

size_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? DTYPE_SIZES[t] : 0; }
const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? DTYPE_NAMES[t] : "?"; }

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++) /* one line, whatever names a hostile file holds */
        if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
}

void st_close(st_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_tensors; i++) free((char *)m->tensors[i].name);
    free(m->tensors);
    for (int i = 0; i < m->n_files; i++)
        if (m->files[i].map) munmap(m->files[i].map, m->files[i].size);
    free(m->files);
    free(m);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_name_key(const void *key, const void *b)
{
    return strcmp((const char *)key, ((const st_tensor *)b)->name);
}

const st_tensor *st_find(const st_model *m, const char *name)
{
    if (!m || !name || !m->n_tensors) return NULL;
    return bsearch(name, m->tensors, (size_t)m->n_tensors, sizeof(st_tensor), cmp_name_key);
}

int st_count(const st_model *m) { return m ? m->n_tensors : 0; }
const st_tensor *st_at(const st_model *m, int i) { return m && i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL; }

// ----------------------------------------------------------------------------
// one file

/* A JSON integer in [0, 2^62]. */
static int json_u62(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > (1ull << 62)) return -1;
    *out = (uint64_t)x;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

/* Parse the header of an mmap'ed file and append its tensors to m. */
static int parse_file(st_model *m, const char *path, const unsigned char *base, size_t size, char *err,
                      size_t errlen)
{
    if (size < 8) {
        seterr(err, errlen, "%s: file too small for a safetensors header (%zu bytes)", path, size);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | base[i];
    if (hlen > size - 8 || hlen > ST_MAX_HEADER) {
        seterr(err, errlen, "%s: header length %llu runs past the end of the file (%zu bytes)", path,
               (unsigned long long)hlen, size);
        return -1;
    }
    if (hlen < 2) {
        seterr(err, errlen, "%s: header length %llu too small", path, (unsigned long long)hlen);
        return -1;
    }
    const unsigned char *data = base + 8 + hlen;
    uint64_t dsize = size - 8 - hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        seterr(err, errlen, "%s: header is not valid JSON (%s, at byte %d)", path, je.text, je.position);
        return -1;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        seterr(err, errlen, "%s: header is not a JSON object", path);
        return -1;
    }
    size_t n = json_object_size(root);
    span *sp = calloc(n ? n : 1, sizeof(span));
    if (!sp) {
        json_decref(root);
        seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int nsp = 0, rc = -1;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        if (!json_is_object(val)) {
            seterr(err, errlen, "%s: tensor '%s': entry is not an object", path, key);
            goto out;
        }
        const json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
                     *jo = json_object_get(val, "data_offsets");
        if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
            seterr(err, errlen, "%s: tensor '%s': needs dtype (string), shape and data_offsets (lists)", path, key);
            goto out;
        }
        st_tensor t;
        memset(&t, 0, sizeof(t));
        const char *dn = json_string_value(jd);
        int dt = -1;
        for (int d = 0; d < ST_DTYPE_COUNT; d++)
            if (!strcmp(dn, DTYPE_NAMES[d])) dt = d;
        if (dt < 0) {
            seterr(err, errlen, "%s: tensor '%s': unsupported dtype '%s'", path, key, dn);
            goto out;
        }
        t.dtype = (st_dtype)dt;
        size_t nd = json_array_size(js);
        if (nd > ST_MAX_DIMS) {
            seterr(err, errlen, "%s: tensor '%s': %zu dimensions (at most %d)", path, key, nd, ST_MAX_DIMS);
            goto out;
        }
        t.ndim = (int)nd;
        uint64_t numel = 1;
        for (size_t d = 0; d < nd; d++) {
            uint64_t v;
            if (json_u62(json_array_get(js, d), &v)) {
                seterr(err, errlen, "%s: tensor '%s': shape[%zu] is not a non-negative integer", path, key, d);
                goto out;
            }
            t.shape[d] = (int64_t)v;
            if (v && numel > (1ull << 62) / v) {
                seterr(err, errlen, "%s: tensor '%s': shape product overflows", path, key);
                goto out;
            }
            numel *= v;
        }
        uint64_t b, e;
        if (json_array_size(jo) != 2 || json_u62(json_array_get(jo, 0), &b) || json_u62(json_array_get(jo, 1), &e)) {
            seterr(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end]", path, key);
            goto out;
        }
        if (b > e || e > dsize) {
            seterr(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu bytes)",
                   path, key, (unsigned long long)b, (unsigned long long)e, (unsigned long long)dsize);
            goto out;
        }
        uint64_t esz = DTYPE_SIZES[dt];
        if (numel > (1ull << 62) / esz || numel * esz != e - b) {
            seterr(err, errlen, "%s: tensor '%s': %llu bytes, shape x %s needs %s%llu", path, key,
                   (unsigned long long)(e - b), dn, numel > (1ull << 62) / esz ? "more than " : "",
                   (unsigned long long)(numel > (1ull << 62) / esz ? (1ull << 62) : numel * esz));
            goto out;
        }
        t.data = data + b;
        t.nbytes = (size_t)(e - b);
        if (m->n_tensors == m->cap_tensors) {
            int nc = m->cap_tensors ? m->cap_tensors * 2 : 256;
            st_tensor *nt = realloc(m->tensors, (size_t)nc * sizeof(st_tensor));
            if (!nt) {
                seterr(err, errlen, "%s: out of memory", path);
                goto out;
            }
            m->tensors = nt;
            m->cap_tensors = nc;
        }
        t.name = strdup(key);
        if (!t.name) {
            seterr(err, errlen, "%s: out of memory", path);
            goto out;
        }
        sp[nsp].begin = b;
        sp[nsp].end = e;
        sp[nsp].idx = m->n_tensors;
        nsp++;
        m->tensors[m->n_tensors++] = t;
    }
    /* no two tensors may share bytes */
    qsort(sp, (size_t)nsp, sizeof(span), cmp_span);
    for (int i = 1; i < nsp; i++) {
        if (sp[i].begin < sp[i - 1].end && sp[i].begin < sp[i].end) {
            seterr(err, errlen, "%s: tensors '%s' and '%s' overlap", path, m->tensors[sp[i - 1].idx].name,
                   m->tensors[sp[i].idx].name);
            goto out;
        }
    }
    rc = 0;
out:
    free(sp);
    json_decref(root);
    return rc;
}

static int map_file(st_model *m, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        seterr(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            seterr(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
            return -1;
        }
    }
    close(fd);
    st_file *nf = realloc(m->files, (size_t)(m->n_files + 1) * sizeof(st_file));
    if (!nf) {
        if (map) munmap(map, size);
        seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    m->files = nf;
    m->files[m->n_files].map = map;
    m->files[m->n_files].size = size;
    m->n_files++;
    return parse_file(m, path, map, size, err, errlen);
}

/* Sort by name; a name that appears twice (e.g. in two shards) is an error. */
static int finish(st_model *m, char *err, size_t errlen)
{
    if (m->n_tensors > 1) qsort(m->tensors, (size_t)m->n_tensors, sizeof(st_tensor), cmp_tensor);
    for (int i = 1; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, m->tensors[i - 1].name)) {
            seterr(err, errlen, "tensor '%s' appears twice", m->tensors[i].name);
            return -1;
        }
    return 0;
}

int st_open_file(const char *path, st_model **out, char *err, size_t errlen)
{
    *out = NULL;
    st_model *m = calloc(1, sizeof(*m));
    if (!m) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    if (map_file(m, path, err, errlen) || finish(m, err, errlen)) {
        st_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

// ----------------------------------------------------------------------------
// a checkpoint directory

static char *read_small(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        seterr(err, errlen, "%s: cannot seek", path);
        return NULL;
    }
    long sz = ftell(f);
    if (sz < 0 || sz > (64l << 20)) {
        fclose(f);
        seterr(err, errlen, "%s: size %ld out of range", path, sz);
        return NULL;
    }
    rewind(f);
    char *buf = malloc((size_t)sz + 1);
    if (!buf) {
        fclose(f);
        seterr(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    size_t r = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (r != (size_t)sz) {
        free(buf);
        seterr(err, errlen, "%s: short read", path);
        return NULL;
    }
    buf[sz] = 0;
    *len = (size_t)sz;
    return buf;
}

static int open_sharded(st_model *m, const char *dir, const char *idx, char *err, size_t errlen)
{
    size_t len = 0;
    char *txt = read_small(idx, &len, err, errlen);
    if (!txt) return -1;
    json_error_t je;
    json_t *root = json_loadb(txt, len, JSON_REJECT_DUPLICATES, &je);
    free(txt);
    if (!root) {
        seterr(err, errlen, "%s: invalid JSON (%s, line %d)", idx, je.text, je.line);
        return -1;
    }
    int rc = -1;
    const char **shards = NULL;
    int ns = 0;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        seterr(err, errlen, "%s: field 'weight_map' missing or empty", idx);
        goto out;
    }
    shards = calloc(json_object_size(wm), sizeof(char *));
    if (!shards) {
        seterr(err, errlen, "out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        const char *fn = json_is_string(val) ? json_string_value(val) : NULL;
        if (!fn || !fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..") ||
            json_string_length(val) != strlen(fn)) {
            seterr(err, errlen, "%s: weight_map['%s'] is not a plain file name", idx, key);
            goto out;
        }
        int seen = 0;
        for (int i = 0; i < ns && !seen; i++) seen = !strcmp(shards[i], fn);
        if (!seen) {
            if (ns >= ST_MAX_SHARDS) {
                seterr(err, errlen, "%s: more than %d shards", idx, ST_MAX_SHARDS);
                goto out;
            }
            shards[ns++] = fn;
        }
    }
    for (int i = 0; i < ns; i++) {
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", dir, shards[i]) >= (int)sizeof(path)) {
            seterr(err, errlen, "%s: path too long", shards[i]);
            goto out;
        }
        if (map_file(m, path, err, errlen)) goto out;
    }
    if (finish(m, err, errlen)) goto out;
    /* every tensor the index names must be where it says */
    json_object_foreach(wm, key, val) {
        if (!st_find(m, key)) {
            seterr(err, errlen, "%s: tensor '%s' is listed for %s but not in it", idx, key, json_string_value(val));
            goto out;
        }
    }
    rc = 0;
out:
    free(shards);
    json_decref(root);
    return rc;
}

int st_open_dir(const char *dir, st_model **out, char *err, size_t errlen)
{
    *out = NULL;
    char idx[4096], single[4096];
    if (snprintf(idx, sizeof(idx), "%s/model.safetensors.index.json", dir) >= (int)sizeof(idx) ||
        snprintf(single, sizeof(single), "%s/model.safetensors", dir) >= (int)sizeof(single)) {
        seterr(err, errlen, "%s: path too long", dir);
        return -1;
    }
    if (access(idx, F_OK) == 0) {
        st_model *m = calloc(1, sizeof(*m));
        if (!m) {
            seterr(err, errlen, "out of memory");
            return -1;
        }
        if (open_sharded(m, dir, idx, err, errlen)) {
            st_close(m);
            return -1;
        }
        *out = m;
        return 0;
    }
    if (access(single, F_OK) != 0) {
        seterr(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
        return -1;
    }
    return st_open_file(single, out, err, errlen);
}
