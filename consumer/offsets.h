/* offsets.h — per-partition contiguous low-water mark of finished messages.
 *
 * Every consumed message is added (in offset order per partition) and later marked finished, in any
 * order. offsets_done() returns the offset to store (last contiguous finished offset + 1) when the
 * low-water mark moved, so a message is never committed before every earlier one in its partition
 * has finished. Partitions are dropped on revoke. One thread only.
 */
#ifndef SLUICE_OFFSETS_H
#define SLUICE_OFFSETS_H

#include <stdint.h>

typedef struct {
    int32_t partition;
    int64_t *off;
    uint8_t *done;
    int64_t head, tail, cap;         /* ring indices: live entries are [head, tail) */
} part_track;

typedef struct {
    part_track *p;
    int n, cap;
} offset_tracker;

void offsets_init(offset_tracker *t);
void offsets_free(offset_tracker *t);
int offsets_add(offset_tracker *t, int32_t partition, int64_t offset);   /* 0 or -1 (out of memory) */
/* Mark finished; returns the new offset to store, or -1 when the low-water mark did not move. */
int64_t offsets_done(offset_tracker *t, int32_t partition, int64_t offset);
void offsets_drop(offset_tracker *t, int32_t partition);
int64_t offsets_pending(const offset_tracker *t);                       /* entries not yet released */

#endif
