/* fuzz_safetensors.c — libFuzzer target for engine/safetensors.c: the input is a whole
 * model.safetensors file (8-byte little-endian header length, JSON header, data section), opened
 * through st_open_file as the engine opens a model. Any input must give a model or an error, never
 * a crash, leak or undefined behaviour. An opened model must hold what the header promised: each
 * tensor's byte length equal to shape x dtype size, its bytes inside the data section and shared
 * with no other tensor, and st_find finding it by name; a violation aborts.
 * The file lives in a memfd opened by its /proc/self/fd path (no disk I/O per input).
 */
#include "safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int fd = -1;
static char path[64];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fd < 0) {
        fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
        if (fd < 0) fail("memfd_create failed");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) fail("cannot write the memfd");
    st_model *m;
    char err[512];
    if (st_open_file(path, &m, err, sizeof err)) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | data[i];   /* opened: size >= 8 */
    size_t dsize = size - 8 - (size_t)hlen, total = 0;
    int n = st_count(m);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_at(m, i);
        uint64_t numel = 1;
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) fail("ndim out of range");
        for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
        if (numel * st_dtype_size(t->dtype) != t->nbytes) fail("byte length is not shape x dtype size");
        total += t->nbytes;
        if (t->nbytes > dsize || total > dsize) fail("tensors hold more bytes than the data section");
        if (st_find(m, t->name) != t) fail("st_find does not find a tensor by its name");
        if (t->nbytes) {   /* first and last byte readable (a page past the mapping faults) */
            volatile const uint8_t *b = t->data;
            (void)b[0];
            (void)b[t->nbytes - 1];
        }
    }
    st_close(m);
    return 0;
}
