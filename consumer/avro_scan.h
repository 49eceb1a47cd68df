/* avro_scan.h — bounds-checked walking of Avro binary data, before avro-c decodes it.
 *
 * avro-c allocates a string's buffer before reading its bytes and leaks it when the read fails; a forged
 * length thus costs memory per hostile message. The decoders walk the bytes first with these helpers
 * (every length within the bytes left, union branches known, no trailing bytes), so avro-c only ever
 * decodes well-formed input. codec.c walks the built-in Job layout, job_resolver.c any writer schema.
 */
#ifndef SLUICE_AVRO_SCAN_H
#define SLUICE_AVRO_SCAN_H

#include <stdint.h>

typedef struct {
    const uint8_t *p, *end;
    const char *what;                /* the field being walked (for the error line) */
} scan;

/* A zig-zag varint of at most maxbytes bytes (5 for an int, 10 for a long). */
static inline int scan_long(scan *s, int64_t *out, int maxbytes) {
    uint64_t v = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (s->p >= s->end) return -1;
        uint8_t b = *s->p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

static inline int scan_skip(scan *s, int64_t n) {
    if (n < 0 || n > s->end - s->p) return -1;
    s->p += n;
    return 0;
}

/* A string or bytes: length, then that many bytes. */
static inline int scan_string(scan *s) {
    int64_t n;
    return scan_long(s, &n, 10) || scan_skip(s, n);
}

static inline int scan_union(scan *s, int64_t *branch, int64_t n) {
    return scan_long(s, branch, 10) || *branch < 0 || *branch >= n ? -1 : 0;
}

/* The header of an array or map block: its item count (0 ends the array or map). A negative count is
 * followed by the block's size in bytes. Every item must take at least one byte, so a forged count
 * cannot make the decoder append more items than the message has bytes. (A writer schema's items may
 * take none, e.g. null: job_resolver.c also bounds the items of all blocks together.) */
static inline int scan_block_count(scan *s, int64_t *count) {
    int64_t bytes;
    if (scan_long(s, count, 10)) return -1;
    if (*count < 0) {
        if (*count == INT64_MIN || scan_long(s, &bytes, 10)) return -1;
        *count = -*count;
    }
    return *count > s->end - s->p ? -1 : 0;
}

#endif
