/* check.h — assertions for the tokenizer's C tests: count failures, print where and a printf message. */
#ifndef SLUICE_TEST_TOKENIZER_CHECK_H
#define SLUICE_TEST_TOKENIZER_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(c, ...)                                                                          \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

/* main's last step: the failure count on stderr and exit status 1, or "ok" and 0 */
#define CHECK_DONE()                                        \
    do {                                                    \
        if (failures) {                                     \
            fprintf(stderr, "%d failures\n", failures);     \
            return 1;                                       \
        }                                                   \
        printf("ok\n");                                     \
        return 0;                                           \
    } while (0)

#endif
