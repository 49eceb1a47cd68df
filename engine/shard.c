/* shard.c — the tensor-parallel split of a V4 model across ranks (shard.h). */
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int v4_shard_plan(const v4_config *c, int shared_inter, int n, int rank, v4_shard *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    const char *what = NULL;
    int total = 0;
    if (n < 1 || n > SL_MAX_RANKS || rank < 0 || rank >= n) {
        snprintf(err, errlen, "rank %d of %d: between 1 and %d ranks", rank, n, SL_MAX_RANKS);
        return -1;
    }
    if (c->n_heads % n) what = "num_attention_heads", total = c->n_heads;
    else if (c->o_groups % n) what = "o_groups", total = c->o_groups;
    else if (c->moe_inter % n) what = "moe_intermediate_size", total = c->moe_inter;
    else if (shared_inter % n) what = "the shared expert's width", total = shared_inter;
    if (what) {
        snprintf(err, errlen, "%d GPUs do not divide the model's %s (%d): the heads, output groups and expert widths "
                 "are split evenly across them", n, what, total);
        return -1;
    }
    s->rank = rank;
    s->n = n;
    s->nh = c->n_heads / n;
    s->h0 = rank * s->nh;
    s->ng = c->o_groups / n;
    s->g0 = rank * s->ng;
    s->ni = c->moe_inter / n;
    s->i0 = rank * s->ni;
    s->sni = shared_inter / n;
    s->si0 = rank * s->sni;
    return 0;
}

int sl_parse_devices(const char *s, int *dev, char *err, size_t errlen)
{
    if (!s || !*s || !strcmp(s, "all")) return 0;
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 255 || (*end && *end != ',')) {
            snprintf(err, errlen, "engine.devices '%s': expected 'all' or CUDA device numbers separated by commas", s);
            return -1;
        }
        if (n == SL_MAX_RANKS) {
            snprintf(err, errlen, "engine.devices '%s': at most %d GPUs", s, SL_MAX_RANKS);
            return -1;
        }
        dev[n++] = (int)v;
        if (!*end) break;
        p = end + 1;
    }
    int same = 1, dup = 0;
    for (int i = 1; i < n; i++) same &= dev[i] == dev[0];
    for (int i = 0; i < n && !same; i++)
        for (int j = 0; j < i; j++) dup |= dev[i] == dev[j];
    if (dup) {
        snprintf(err, errlen, "engine.devices '%s': a GPU listed twice (only one GPU repeated for every rank, a test "
                 "layout, may repeat)", s);
        return -1;
    }
    return n;
}
