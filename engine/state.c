/* state.c — page pool and per-sequence V4 decoder state (see state.h). */
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long gcd_l(long a, long b) {
    while (b) { long t = a % b; a = b; b = t; }
    return a;
}

int v4_pool_init(v4_state_pool *p, const v4_config *cfg, size_t budget_bytes, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->budget = budget_bytes;
    if (cfg->n_layers <= 0 || cfg->n_layers > V4_MAX_LAYERS || cfg->window <= 0 || cfg->head_dim <= 0) {
        snprintf(err, errlen, "state: bad config (layers %d, window %d, head_dim %d)",
                 cfg->n_layers, cfg->window, cfg->head_dim);
        return -1;
    }
    /* block_tokens: lcm of all compress ratios, grown to at least 32 positions */
    long bt = 1;
    for (int l = 0; l < cfg->n_layers; l++) {
        int r = cfg->compress_ratio[l];
        if (r < 0) { snprintf(err, errlen, "state: layer %d has compress ratio %d", l, r); return -1; }
        if (r > 0) bt = bt / gcd_l(bt, r) * r;
        if (bt > (1L << 20)) { snprintf(err, errlen, "state: compress ratios have a huge lcm"); return -1; }
    }
    while (bt < 32) bt *= 2;
    p->block_tokens = (int)bt;

    size_t hd = (size_t)cfg->head_dim, dI = (size_t)cfg->index_head_dim;
    size_t fixed = 0, page = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_layout *L = &p->layer[l];
        int r = cfg->compress_ratio[l];
        L->ratio = r;
        L->coff = r == 4 ? 2 : 1;
        L->nbuf = r == 4 ? 2 : 1;
        L->ring_off = fixed;
        fixed += (size_t)cfg->window * hd;
        if (r > 0) {
            L->cbuf_off = fixed;
            fixed += (size_t)L->nbuf * r * 2 * L->coff * hd;
            L->page_off = page;
            page += (size_t)(bt / r) * hd;
        }
        if (r == 4) {
            L->ibuf_off = fixed;
            fixed += 2 * 4 * 4 * dI;
            L->ipage_off = page;
            page += (size_t)(bt / 4) * dI;
        }
    }
    p->fixed_floats = fixed;
    p->page_floats = page;
    return 0;
}

void v4_pool_free(v4_state_pool *p) {
    for (int i = 0; i < p->n_ids; i++) free(p->mem[i]);
    free(p->mem);
    free(p->free_ids);
    memset(p, 0, sizeof *p);
}

void v4_pool_set_store(v4_state_pool *p, const v4_state_store *store, void *ctx) {
    p->store = store;
    p->store_ctx = ctx;
}

static size_t page_bytes(const v4_state_pool *p) {
    return p->store ? p->store->page_bytes : p->page_floats * sizeof(float);
}
static size_t fixed_bytes(const v4_state_pool *p) {
    return p->store ? p->store->fixed_bytes : p->fixed_floats * sizeof(float);
}

size_t v4_pool_bytes_for(const v4_state_pool *p, int n_tokens) {
    size_t pages = p->page_floats ? (size_t)(n_tokens + p->block_tokens - 1) / p->block_tokens : 0;
    return fixed_bytes(p) + pages * page_bytes(p);
}

int v4_seq_init(v4_state_pool *p, v4_seq_state *s) {
    memset(s, 0, sizeof *s);
    size_t b = fixed_bytes(p);
    if (p->used + b > p->budget) return -1;
    if (p->store) {
        if (p->store->seq_open(p->store_ctx, s)) return -1;
    } else {
        s->fixed = calloc(p->fixed_floats ? p->fixed_floats : 1, sizeof(float));
        if (!s->fixed) return -1;
    }
    s->open = 1;
    p->used += b;
    return 0;
}

/* Take a page id from the free list or make a new one. -1 on budget/memory exhaustion. */
static int page_take(v4_state_pool *p) {
    if (p->used + page_bytes(p) > p->budget) return -1;
    int id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
    } else {
        if (p->n_ids == p->cap_ids) {
            int cap = p->cap_ids ? 2 * p->cap_ids : 64;
            float **m = realloc(p->mem, (size_t)cap * sizeof *m);
            if (!m) return -1;
            p->mem = m;
            int *f = realloc(p->free_ids, (size_t)cap * sizeof *f);
            if (!f) return -1;
            p->free_ids = f;
            p->cap_ids = cap;
        }
        float *pg = NULL;
        if (p->store) {
            if (p->store->page_add(p->store_ctx, p->n_ids)) return -1;
        } else if (!(pg = malloc(page_bytes(p)))) {
            return -1;
        }
        id = p->n_ids++;
        p->mem[id] = pg;
    }
    p->used += page_bytes(p);
    return id;
}

int v4_seq_reserve(v4_state_pool *p, v4_seq_state *s, int n_tokens) {
    if (!p->page_floats) return 0;
    int need = (n_tokens + p->block_tokens - 1) / p->block_tokens;
    if (need > s->cap_blocks) {
        int cap = s->cap_blocks ? s->cap_blocks : 8;
        while (cap < need) cap *= 2;
        int *b = realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b) return -1;
        s->blocks = b;
        s->cap_blocks = cap;
    }
    while (s->n_blocks < need) {
        int id = page_take(p);
        if (id < 0) return -1;
        s->blocks[s->n_blocks++] = id;
    }
    return 0;
}

void v4_seq_free(v4_state_pool *p, v4_seq_state *s) {
    for (int i = 0; i < s->n_blocks; i++) {
        p->free_ids[p->n_free++] = s->blocks[i];
        p->used -= page_bytes(p);
    }
    if (s->open) {
        p->used -= fixed_bytes(p);
        if (p->store) p->store->seq_close(p->store_ctx, s);
    }
    free(s->fixed);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
