/* check.h — minimal assertions for the engine unit tests: count failures, print where. */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <math.h>
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

#define CHECK_DONE()                                                     \
    do {                                                                 \
        if (check_failures) fprintf(stderr, "%d failures\n", check_failures); \
        else printf("ok\n");                                             \
        return check_failures ? 1 : 0;                                   \
    } while (0)

#endif
