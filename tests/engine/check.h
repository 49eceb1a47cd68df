/* check.h — minimal assertions for the engine unit tests (count failures, print where) and their random inputs. */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static int check_failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, \
                    #a, a_, #b, b_);                                                               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* same value, bit for bit (NaN == NaN) */
#define CHECK_SAME(a, b)                                                                              \
    do {                                                                                              \
        float a_ = (a), b_ = (b);                                                                     \
        if (!((a_ != a_ && b_ != b_) || (a_ == b_ && !!signbit(a_) == !!signbit(b_)))) {                  \
            fprintf(stderr, "%s:%d: CHECK_SAME failed: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, #a, \
                    (double)a_, #b, (double)b_);                                                      \
            check_failures++;                                                                         \
        }                                                                                             \
    } while (0)

/* xorshift32 test inputs: fresh random values, the same every run */
static uint32_t check_rng = 0x9E3779B9u;
static inline uint32_t rnd(void)
{
    check_rng ^= check_rng << 13;
    check_rng ^= check_rng >> 17;
    check_rng ^= check_rng << 5;
    return check_rng;
}
/* uniform in [-1, 1) */
static inline float rndf(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }

#define CHECK_DONE()                                                     \
    do {                                                                 \
        if (check_failures) fprintf(stderr, "%d failures\n", check_failures); \
        else printf("ok\n");                                             \
        return check_failures ? 1 : 0;                                   \
    } while (0)

#endif
