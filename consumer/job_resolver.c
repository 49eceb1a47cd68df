/* job_resolver.c — see job_resolver.h. */
#include "job_resolver.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_scan.h"
#include "schemas_gen.h"   /* SL_JOB_AVSC: the reader schema */

/* Nesting a writer's bytes may have (a recursive writer schema could otherwise exhaust the stack). */
enum { WALK_MAX_DEPTH = 64 };

struct sl_job_resolver {
    avro_schema_t writer, reader, narrowed;
    json_t *reader_json;             /* schemas/job.avsc as JSON: the defaults */
    avro_value_iface_t *writer_iface, *resolved_iface;
    avro_value_t writer_value;       /* the bytes as written */
    avro_value_t resolved_value;     /* writer_value seen through the narrowed reader schema */
    avro_reader_t in;
};

// ---------------------------------------------------------------- checking and narrowing the pair

typedef struct {
    char path[192];                  /* where the check is, e.g. "messages[].role" */
    char *err;
    size_t errlen;
} ctx;

static avro_schema_t fail(ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static avro_schema_t fail(ctx *cx, const char *fmt, ...) {
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    if (cx->path[0])
        snprintf(cx->err, cx->errlen, "field '%s': %s", cx->path, m);
    else
        snprintf(cx->err, cx->errlen, "%s", m);
    return NULL;
}

static avro_schema_t deref(avro_schema_t s) { return is_avro_link(s) ? avro_schema_link_target(s) : s; }

static int promotes(avro_type_t w, avro_type_t r) {
    if (w == r) return 1;
    if (w == AVRO_INT32) return r == AVRO_INT64 || r == AVRO_FLOAT || r == AVRO_DOUBLE;
    if (w == AVRO_INT64) return r == AVRO_FLOAT || r == AVRO_DOUBLE;
    return w == AVRO_FLOAT && r == AVRO_DOUBLE;
}

static avro_schema_t narrow(ctx *cx, avro_schema_t w, avro_schema_t r, json_t *rj);

/* narrow() of a union branch: the branch must need no narrowing, because a union is passed on to avro-c
 * as it is (the worker's Job schema has no record inside a union). */
static int resolves_whole(ctx *cx, avro_schema_t w, avro_schema_t r, json_t *rj) {
    avro_schema_t n = narrow(cx, w, r, rj);
    if (!n) return 0;
    int same = avro_schema_equal(n, r);
    avro_schema_decref(n);
    if (!same) fail(cx, "a record inside a union lacks fields of the reader's (not supported)");
    return same;
}

/* Reader record r narrowed to the fields writer record w has; each missing one must have a default. */
static avro_schema_t narrow_record(ctx *cx, avro_schema_t w, avro_schema_t r, json_t *rj) {
    if (!is_avro_record(w) || strcmp(avro_schema_name(w), avro_schema_name(r)) != 0)
        return fail(cx, "writer type %s is not the reader's record %s", avro_schema_type_name(w),
                    avro_schema_name(r));
    avro_schema_t out = avro_schema_record(avro_schema_name(r), avro_schema_namespace(r));
    if (!out) return fail(cx, "out of memory");
    json_t *fields = json_object_get(rj, "fields");
    size_t at = strlen(cx->path);
    for (size_t i = 0; i < avro_schema_record_size(r); i++) {
        const char *name = avro_schema_record_field_name(r, (int)i);
        json_t *fj = json_array_get(fields, i);
        int wi = avro_schema_record_field_get_index(w, name);
        if (wi < 0) {
            if (json_object_get(fj, "default")) continue;   /* filled in by copy_value */
            avro_schema_decref(out);
            return fail(cx, "the writer schema lacks field '%s', which has no default", name);
        }
        snprintf(cx->path + at, sizeof(cx->path) - at, "%s%s", at ? "." : "", name);
        avro_schema_t n = narrow(cx, avro_schema_record_field_get_by_index(w, wi),
                                 avro_schema_record_field_get_by_index(r, (int)i), json_object_get(fj, "type"));
        if (!n) {
            avro_schema_decref(out);
            return NULL;
        }
        cx->path[at] = 0;
        int rc = avro_schema_record_field_append(out, name, n);
        avro_schema_decref(n);
        if (rc) {
            avro_schema_decref(out);
            return fail(cx, "out of memory");
        }
    }
    return out;
}

/* The reader schema r narrowed to what the writer schema w has, or NULL with cx->err when w does not
 * resolve to r. rj is r's JSON (records' defaults). */
static avro_schema_t narrow(ctx *cx, avro_schema_t w, avro_schema_t r, json_t *rj) {
    w = deref(w);
    if (is_avro_union(w)) {   /* every writer branch must resolve */
        for (size_t i = 0; i < avro_schema_union_size(w); i++)
            if (!resolves_whole(cx, avro_schema_union_branch(w, (int)i), r, rj)) return NULL;
        return avro_schema_incref(r);
    }
    if (is_avro_union(r)) {   /* the first reader branch w resolves to */
        for (size_t i = 0; i < avro_schema_union_size(r); i++) {
            char scratch[256];
            ctx trial = *cx;
            trial.err = scratch;
            trial.errlen = sizeof(scratch);
            if (resolves_whole(&trial, w, avro_schema_union_branch(r, (int)i), json_array_get(rj, i)))
                return avro_schema_incref(r);
        }
        return fail(cx, "writer type %s matches no branch of the reader's union", avro_schema_type_name(w));
    }
    size_t at = strlen(cx->path);
    avro_schema_t n, out;
    switch (avro_typeof(r)) {
    case AVRO_RECORD:
        return narrow_record(cx, w, r, rj);
    case AVRO_ARRAY:
    case AVRO_MAP:
        if (avro_typeof(w) != avro_typeof(r)) break;
        snprintf(cx->path + at, sizeof(cx->path) - at, is_avro_array(r) ? "[]" : "{}");
        n = is_avro_array(r) ? narrow(cx, avro_schema_array_items(w), avro_schema_array_items(r),
                                      json_object_get(rj, "items"))
                             : narrow(cx, avro_schema_map_values(w), avro_schema_map_values(r),
                                      json_object_get(rj, "values"));
        if (!n) return NULL;
        cx->path[at] = 0;
        out = is_avro_array(r) ? avro_schema_array(n) : avro_schema_map(n);
        avro_schema_decref(n);
        return out ? out : fail(cx, "out of memory");
    case AVRO_ENUM:
    case AVRO_FIXED:
        if (avro_schema_equal(w, r)) return avro_schema_incref(r);
        break;
    default:   /* primitives */
        if (promotes(avro_typeof(w), avro_typeof(r))) return avro_schema_incref(r);
        break;
    }
    return fail(cx, "writer type %s does not resolve to reader type %s", avro_schema_type_name(w),
                avro_schema_type_name(r));
}

// ---------------------------------------------------------------- reading

/* The writer's bytes against its schema (avro_scan.h): lengths within the message, known union
 * branches and enum symbols, no more array and map items in all than the message has bytes
 * (*items_left starts at its length), and no more values in all than VALUES_PER_BYTE per byte plus
 * VALUES_BASE (*values_left). A writer schema may have items that take no bytes (null, a record of
 * nulls, fixed of size 0), and scan_block_count bounds only one block: without the item total, a few
 * KB of block headers, each claiming the bytes left, would make avro-c build arrays of millions of
 * such items; without the value total, each of those items could be a record of thousands of null
 * fields (the registry serves schemas of megabytes), so the work would grow with message x schema.
 * A Job holds well under one value per byte (its strings carry the bytes). */
#define VALUES_PER_BYTE 4
#define VALUES_BASE 4096
static int walk(scan *s, avro_schema_t t, int depth, int64_t *items_left, int64_t *values_left) {
    int64_t x, count;
    if (depth > WALK_MAX_DEPTH) return -1;
    if (--*values_left < 0) {
        s->what = "more values than the message's bytes allow (a writer schema of many empty fields)";
        return -1;
    }
    t = deref(t);
    switch (avro_typeof(t)) {
    case AVRO_NULL:
        return 0;
    case AVRO_BOOLEAN:
        return s->p < s->end && *s->p <= 1 ? (s->p++, 0) : -1;
    case AVRO_INT32:
        return scan_long(s, &x, 5);
    case AVRO_INT64:
        return scan_long(s, &x, 10);
    case AVRO_FLOAT:
        return scan_skip(s, 4);
    case AVRO_DOUBLE:
        return scan_skip(s, 8);
    case AVRO_STRING:
    case AVRO_BYTES:
        return scan_string(s);
    case AVRO_FIXED:
        return scan_skip(s, avro_schema_fixed_size(t));
    case AVRO_ENUM:
        return scan_long(s, &x, 10) || x < 0 || x >= avro_schema_enum_number_of_symbols(t) ? -1 : 0;
    case AVRO_UNION:
        return scan_union(s, &x, (int64_t)avro_schema_union_size(t)) ||
               walk(s, avro_schema_union_branch(t, (int)x), depth + 1, items_left, values_left);
    case AVRO_RECORD:
        for (size_t i = 0; i < avro_schema_record_size(t); i++)
            if (walk(s, avro_schema_record_field_get_by_index(t, (int)i), depth + 1, items_left, values_left))
                return -1;
        return 0;
    case AVRO_ARRAY:
    case AVRO_MAP:
        for (;;) {
            if (scan_block_count(s, &count)) return -1;
            if (count == 0) return 0;
            if (count > *items_left) {
                s->what = "more array and map items than the message has bytes";
                return -1;
            }
            *items_left -= count;
            for (int64_t i = 0; i < count; i++) {
                if (is_avro_map(t) && scan_string(s)) return -1;
                if (walk(s, is_avro_map(t) ? avro_schema_map_values(t) : avro_schema_array_items(t), depth + 1,
                         items_left, values_left))
                    return -1;
            }
        }
    default:
        return -1;
    }
}

/* A default from the reader schema's JSON into dst (Avro's JSON encoding of defaults; a union's default
 * is of its first branch). The worker's schema has no bytes, enum or fixed defaults. */
static int set_default(avro_value_t *dst, json_t *def) {
    avro_value_t d;
    size_t i;
    json_t *e;
    const char *key;
    if (!def) return -1;
    switch (avro_value_get_type(dst)) {
    case AVRO_NULL:
        return avro_value_set_null(dst);
    case AVRO_BOOLEAN:
        return avro_value_set_boolean(dst, json_is_true(def));
    case AVRO_INT32:
        return avro_value_set_int(dst, (int32_t)json_integer_value(def));
    case AVRO_INT64:
        return avro_value_set_long(dst, json_integer_value(def));
    case AVRO_FLOAT:
        return avro_value_set_float(dst, (float)json_number_value(def));
    case AVRO_DOUBLE:
        return avro_value_set_double(dst, json_number_value(def));
    case AVRO_STRING:   /* avro-c takes the size with the NUL, which jansson keeps after the text */
        return json_is_string(def) ? avro_value_set_string_len(dst, json_string_value(def), json_string_length(def) + 1)
                                   : -1;
    case AVRO_ARRAY:
        json_array_foreach(def, i, e) {
            if (avro_value_append(dst, &d, NULL) || set_default(&d, e)) return -1;
        }
        return 0;
    case AVRO_MAP:
        json_object_foreach(def, key, e) {
            if (avro_value_add(dst, key, &d, NULL, NULL) || set_default(&d, e)) return -1;
        }
        return 0;
    case AVRO_UNION:
        return avro_value_set_branch(dst, 0, &d) || set_default(&d, def);
    case AVRO_RECORD:
        if (avro_value_get_size(dst, &i)) return -1;
        for (size_t k = 0; k < i; k++) {
            if (avro_value_get_by_index(dst, k, &d, &key) || set_default(&d, json_object_get(def, key))) return -1;
        }
        return 0;
    default:
        return -1;
    }
}

/* dst (a value of the worker's schema) = src (the resolved reader's view of the writer's value); the
 * fields src lacks take their defaults from rj, the JSON of dst's schema. */
static int copy_value(avro_value_t *dst, avro_value_t *src, json_t *rj) {
    avro_value_t d, s;
    size_t n;
    const char *name;
    switch (avro_value_get_type(dst)) {
    case AVRO_RECORD: {
        json_t *fields = json_object_get(rj, "fields");
        if (avro_value_get_size(dst, &n)) return -1;
        for (size_t i = 0; i < n; i++) {
            json_t *fj = json_array_get(fields, i);
            if (avro_value_get_by_index(dst, i, &d, &name)) return -1;
            if (avro_value_get_by_name(src, name, &s, NULL) == 0) {
                if (copy_value(&d, &s, json_object_get(fj, "type"))) return -1;
            } else if (set_default(&d, json_object_get(fj, "default"))) {
                return -1;
            }
        }
        return 0;
    }
    case AVRO_ARRAY:
        if (avro_value_get_size(src, &n)) return -1;
        for (size_t i = 0; i < n; i++) {
            if (avro_value_get_by_index(src, i, &s, NULL) || avro_value_append(dst, &d, NULL) ||
                copy_value(&d, &s, json_object_get(rj, "items")))
                return -1;
        }
        return 0;
    case AVRO_MAP:
        if (avro_value_get_size(src, &n)) return -1;
        for (size_t i = 0; i < n; i++) {
            if (avro_value_get_by_index(src, i, &s, &name) || avro_value_add(dst, name, &d, NULL, NULL) ||
                copy_value(&d, &s, json_object_get(rj, "values")))
                return -1;
        }
        return 0;
    case AVRO_UNION: {
        int disc;
        if (avro_value_get_discriminant(src, &disc) || avro_value_get_current_branch(src, &s) ||
            avro_value_set_branch(dst, disc, &d))
            return -1;
        return copy_value(&d, &s, json_array_get(rj, (size_t)disc));
    }
    case AVRO_NULL:
        return avro_value_get_null(src) || avro_value_set_null(dst);
    case AVRO_BOOLEAN: {
        int b;
        return avro_value_get_boolean(src, &b) || avro_value_set_boolean(dst, b);
    }
    case AVRO_INT32: {
        int32_t x;
        return avro_value_get_int(src, &x) || avro_value_set_int(dst, x);
    }
    case AVRO_INT64: {
        int64_t x;
        return avro_value_get_long(src, &x) || avro_value_set_long(dst, x);
    }
    case AVRO_FLOAT: {
        float x;
        return avro_value_get_float(src, &x) || avro_value_set_float(dst, x);
    }
    case AVRO_DOUBLE: {
        double x;
        return avro_value_get_double(src, &x) || avro_value_set_double(dst, x);
    }
    case AVRO_STRING: {
        const char *p;
        return avro_value_get_string(src, &p, &n) || avro_value_set_string_len(dst, p, n);
    }
    case AVRO_BYTES: {
        const void *p;
        return avro_value_get_bytes(src, &p, &n) || avro_value_set_bytes(dst, (void *)p, n);
    }
    case AVRO_ENUM: {
        int x;
        return avro_value_get_enum(src, &x) || avro_value_set_enum(dst, x);
    }
    case AVRO_FIXED: {
        const void *p;
        return avro_value_get_fixed(src, &p, &n) || avro_value_set_fixed(dst, (void *)p, n);
    }
    default:
        return -1;
    }
}

int job_resolver_read(sl_job_resolver *r, const void *buf, size_t len, avro_value_t *dst, char *err,
                      size_t errlen) {
    scan s = {buf, (const uint8_t *)buf + len, NULL};
    int64_t items_left = (int64_t)len, values_left = (int64_t)len * VALUES_PER_BYTE + VALUES_BASE;
    if (walk(&s, r->writer, 0, &items_left, &values_left)) {
        snprintf(err, errlen, "avro: cannot decode Job with its writer schema: %s at byte %zu",
                 s.what ? s.what : "truncated or malformed", (size_t)(s.p - (const uint8_t *)buf));
        return -1;
    }
    if (s.p != s.end) {
        snprintf(err, errlen, "avro: %zu trailing bytes after the Job record (wrong schema id?)",
                 (size_t)(s.end - s.p));
        return -1;
    }
    avro_value_reset(&r->resolved_value);   /* its wrappers, then the writer value */
    avro_value_reset(dst);
    avro_reader_memory_set_source(r->in, buf, (int64_t)len);
    if (avro_value_read(r->in, &r->writer_value) || copy_value(dst, &r->resolved_value, r->reader_json)) {
        const char *m = avro_strerror();
        snprintf(err, errlen, "avro: cannot decode Job with its writer schema: %s", m && m[0] ? m : "out of memory");
        avro_value_reset(dst);
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- setup

int job_resolver_new(const char *writer_json, size_t len, sl_job_resolver **out, char *err, size_t errlen) {
    sl_job_resolver *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_error_t je;
    if (avro_schema_from_json_length(SL_JOB_AVSC, strlen(SL_JOB_AVSC), &r->reader) ||
        !(r->reader_json = json_loads(SL_JOB_AVSC, 0, &je))) {
        snprintf(err, errlen, "bad built-in Job schema");
        goto bad;
    }
    if (avro_schema_from_json_length(writer_json, len, &r->writer)) {
        snprintf(err, errlen, "the writer schema does not parse: %s", avro_strerror());
        goto bad;
    }
    ctx cx = {.path = "", .err = err, .errlen = errlen};
    if (!(r->narrowed = narrow(&cx, r->writer, r->reader, r->reader_json))) goto bad;
    r->writer_iface = avro_generic_class_from_schema(r->writer);
    r->resolved_iface = r->writer_iface ? avro_resolved_reader_new(r->writer, r->narrowed) : NULL;
    if (!r->resolved_iface || avro_generic_value_new(r->writer_iface, &r->writer_value) ||
        avro_resolved_reader_new_value(r->resolved_iface, &r->resolved_value) ||
        !(r->in = avro_reader_memory("", 0))) {
        snprintf(err, errlen, "avro: cannot build the resolved reader: %s", avro_strerror());
        goto bad;
    }
    avro_resolved_reader_set_source(&r->resolved_value, &r->writer_value);
    *out = r;
    return 0;
bad:
    job_resolver_free(r);
    return -1;
}

void job_resolver_free(sl_job_resolver *r) {
    if (!r) return;
    if (r->resolved_value.self) avro_value_decref(&r->resolved_value);   /* holds a reference to writer_value */
    if (r->writer_value.self) avro_value_decref(&r->writer_value);
    if (r->resolved_iface) avro_value_iface_decref(r->resolved_iface);
    if (r->writer_iface) avro_value_iface_decref(r->writer_iface);
    if (r->narrowed) avro_schema_decref(r->narrowed);
    if (r->writer) avro_schema_decref(r->writer);
    if (r->reader) avro_schema_decref(r->reader);
    json_decref(r->reader_json);
    if (r->in) avro_reader_free(r->in);
    free(r);
}
