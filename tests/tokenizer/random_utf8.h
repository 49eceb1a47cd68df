/* random_utf8.h — fresh random text for the tokenizer tests: a seeded xorshift64 (`rng`, set it
 * from the test's seed) and a code point -> UTF-8 writer. Each test picks its own code point ranges. */
#ifndef SLUICE_TEST_RANDOM_UTF8_H
#define SLUICE_TEST_RANDOM_UTF8_H

#include <stddef.h>
#include <stdint.h>

static uint64_t rng;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Write code point c as UTF-8 at o; returns its length (1..4). */
static size_t put_cp(char *o, uint32_t c)
{
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000) return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | ((c >> 6) & 63)), o[2] = (char)(0x80 | (c & 63)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | ((c >> 12) & 63));
    o[2] = (char)(0x80 | ((c >> 6) & 63)), o[3] = (char)(0x80 | (c & 63));
    return 4;
}

#endif
