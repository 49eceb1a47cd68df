/* safetensors.h — memory-mapped safetensors files, single or sharded.
 *
 * Opens `model.safetensors` or every shard named by `model.safetensors.index.json`, validates each
 * header (JSON well-formed, dtype known, shape × dtype size == byte length, offsets inside the file,
 * no overlap past the data section) so a hostile file gives an error, never a crash.
 */
#ifndef SLUICE_SAFETENSORS_H
#define SLUICE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_F32 = 0, ST_BF16, ST_F16, ST_F8_E4M3, ST_F8_E8M0, ST_I8, ST_U8, ST_I64, ST_I32, ST_DTYPE_COUNT
} st_dtype;

#define ST_MAX_DIMS 4

typedef struct {
    const char *name;       /* owned by the st_model */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;       /* inside the mmap */
    size_t nbytes;
} st_tensor;

typedef struct st_model st_model;

/* Open dir/model.safetensors, or dir/model.safetensors.index.json and its shards. */
int st_open_dir(const char *dir, st_model **out, char *err, size_t errlen);
/* Open one file (tests). */
int st_open_file(const char *path, st_model **out, char *err, size_t errlen);
void st_close(st_model *m);

const st_tensor *st_find(const st_model *m, const char *name); /* NULL if absent */
int st_count(const st_model *m);
const st_tensor *st_at(const st_model *m, int i);

size_t st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);

#endif
