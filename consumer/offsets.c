/* offsets.c — see offsets.h. */
#include "offsets.h"

#include <stdlib.h>
#include <string.h>

void offsets_init(offset_tracker *t) { memset(t, 0, sizeof(*t)); }

void offsets_free(offset_tracker *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->p[i].off);
        free(t->p[i].done);
    }
    free(t->p);
    memset(t, 0, sizeof(*t));
}

static part_track *find(offset_tracker *t, int32_t partition, int create) {
    for (int i = 0; i < t->n; i++)
        if (t->p[i].partition == partition) return &t->p[i];
    if (!create) return NULL;
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 8;
        part_track *p = realloc(t->p, (size_t)cap * sizeof(*p));
        if (!p) return NULL;
        t->p = p;
        t->cap = cap;
    }
    part_track *pt = &t->p[t->n++];
    memset(pt, 0, sizeof(*pt));
    pt->partition = partition;
    return pt;
}

int offsets_add(offset_tracker *t, int32_t partition, int64_t offset) {
    part_track *p = find(t, partition, 1);
    if (!p) return -1;
    if (p->tail - p->head == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 256;
        int64_t *off = malloc((size_t)cap * sizeof(int64_t));
        uint8_t *done = malloc((size_t)cap);
        if (!off || !done) {
            free(off);
            free(done);
            return -1;
        }
        int64_t n = p->tail - p->head;
        for (int64_t i = 0; i < n; i++) {
            off[i] = p->off[(p->head + i) % p->cap];
            done[i] = p->done[(p->head + i) % p->cap];
        }
        free(p->off);
        free(p->done);
        p->off = off;
        p->done = done;
        p->head = 0;
        p->tail = n;
        p->cap = cap;
    }
    p->off[p->tail % p->cap] = offset;
    p->done[p->tail % p->cap] = 0;
    p->tail++;
    return 0;
}

int64_t offsets_done(offset_tracker *t, int32_t partition, int64_t offset) {
    part_track *p = find(t, partition, 0);
    if (!p || p->tail == p->head) return -1;
    /* binary search: offsets are increasing in [head, tail) */
    int64_t lo = p->head, hi = p->tail - 1, at = -1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int64_t o = p->off[mid % p->cap];
        if (o == offset) {
            at = mid;
            break;
        }
        if (o < offset) lo = mid + 1;
        else hi = mid - 1;
    }
    if (at < 0) return -1;
    p->done[at % p->cap] = 1;
    int64_t store = -1;
    while (p->head < p->tail && p->done[p->head % p->cap]) {
        store = p->off[p->head % p->cap] + 1;
        p->head++;
    }
    return store;
}

void offsets_drop(offset_tracker *t, int32_t partition) {
    for (int i = 0; i < t->n; i++) {
        if (t->p[i].partition == partition) {
            free(t->p[i].off);
            free(t->p[i].done);
            t->p[i] = t->p[--t->n];
            return;
        }
    }
}

int64_t offsets_pending(const offset_tracker *t) {
    int64_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->p[i].tail - t->p[i].head;
    return n;
}
