/* bench_util.h — the clock and the qsort order the host-side benchmarks (bench_*.c) share. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include <time.h>

/* Monotonic time in ms. */
static inline double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* qsort order of doubles, ascending. */
static inline int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
