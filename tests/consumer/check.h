/* check.h — assertions and a seeded generator shared by the consumer's C unit tests. */
#ifndef SLUICE_TEST_CONSUMER_CHECK_H
#define SLUICE_TEST_CONSUMER_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int fails;
#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
            fails++;                                                              \
        }                                                                         \
    } while (0)

/* PCG-style LCG; set rng_state from the test's seed */
static uint64_t rng_state;
static inline uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* bytes of a hex string (the python3-avro-written vectors) into out; their count */
static inline size_t unhex(const char *h, uint8_t *out) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

#endif
