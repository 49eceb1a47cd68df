/* state.h — per-sequence incremental decoder state for DeepSeek-V4 (V4_SPEC.md §3), in pages.
 *
 * Every sequence has
 *   - a FIXED part (one malloc per sequence): per layer the sliding-window ring of `window` kv rows
 *     (head_dim floats each, slot = position mod window), and per CSA/HCA layer the compressor
 *     buffers: the rows (C | Z+ape) of the open window, and for CSA (overlapping windows) also the
 *     previous window's rows, whose "a" halves the next entry pools. Two row buffers are used
 *     alternately by window parity, so nothing is copied when a window closes.
 *   - GROWING parts in fixed-size pages from one pool: compressed main entries (one per `ratio`
 *     tokens, head_dim floats) and, for CSA layers, indexer keys (index_head_dim floats). A page
 *     covers `block_tokens` consecutive positions (a multiple of every compress ratio) for ALL
 *     layers at once, so entry w of a layer with ratio r lives in page blocks[w*r / block_tokens].
 *     The block table is per sequence; page ids come from the pool (later: shared with refcounts).
 *   - the position counter `pos` (tokens already consumed; the entry index is pos div ratio).
 *
 * The pool accounts everything (fixed parts and pages) against one byte budget; the scheduler asks
 * v4_seq_reserve() before each step and preempts when it fails. The scheduler owns the accounting
 * (budget, page ids, block tables); the backend owns the storage. By default the storage is float32
 * host memory in the layout above (the CPU reference backend reads it through the accessors below);
 * a backend that keeps state elsewhere (device memory) registers a v4_state_store, whose sizes then
 * drive the accounting and whose ops open/close a sequence's fixed part and back each page id.
 */
#ifndef SLUICE_STATE_H
#define SLUICE_STATE_H

#include <stddef.h>
#include "config.h"

typedef struct {
    int ratio;            /* 0 | 4 | r */
    int coff;             /* compressor width factor: 2 for CSA (ratio 4), 1 for HCA */
    int nbuf;             /* compressor row buffers: 2 for CSA (prev + open window), 1 for HCA */
    size_t ring_off;      /* fixed: window x head_dim */
    size_t cbuf_off;      /* fixed: nbuf x ratio x (2*coff*head_dim)   rows = [C | Z+ape] */
    size_t ibuf_off;      /* fixed: 2 x 4 x (2*2*index_head_dim)        (CSA only) */
    size_t page_off;      /* page: (block_tokens/ratio) x head_dim       main entries */
    size_t ipage_off;     /* page: (block_tokens/4) x index_head_dim     indexer keys (CSA only) */
} v4_layer_layout;

typedef struct v4_seq_state v4_seq_state;

/* Storage owned by a backend. Page ids are dense from 0 and are reused through the pool's free list,
 * never handed back to the store. */
typedef struct {
    /* Fresh zeroed storage for s's fixed part (set s->slot). 0, or -1 when none is left. */
    int (*seq_open)(void *ctx, v4_seq_state *s);
    void (*seq_close)(void *ctx, v4_seq_state *s);
    /* Back page id `id` (called once per id, ids in increasing order). 0, or -1 when none is left. */
    int (*page_add)(void *ctx, int id);
    size_t fixed_bytes;   /* one sequence's fixed part */
    size_t page_bytes;    /* one page */
} v4_state_store;

typedef struct {
    const v4_config *cfg;
    int block_tokens;     /* positions per page */
    size_t fixed_floats;  /* per sequence */
    size_t page_floats;   /* per page (0 when the model has no compressed layers) */
    size_t budget;        /* bytes */
    size_t used;          /* bytes charged now */
    v4_layer_layout layer[V4_MAX_LAYERS];
    /* pages: mem[id] is allocated on first use and kept on the free list when released */
    float **mem;
    int n_ids, cap_ids;
    int *free_ids;
    int n_free;
    const v4_state_store *store;   /* NULL: float32 host memory (mem[], fixed) */
    void *store_ctx;
} v4_state_pool;

struct v4_seq_state {
    int pos;              /* tokens consumed */
    int open;             /* 1 while admitted (fixed part held) */
    float *fixed;         /* host store: fixed_floats, NULL while not admitted */
    int slot;             /* backend store: its index of the fixed part */
    int *blocks;          /* page ids, one per block_tokens positions */
    int n_blocks, cap_blocks;
};

/* Lay out the state for `cfg` (kept by pointer) under a budget of `budget_bytes`. 0 or -1. */
int v4_pool_init(v4_state_pool *p, const v4_config *cfg, size_t budget_bytes, char *err, size_t errlen);
void v4_pool_free(v4_state_pool *p);
/* Hand the storage to a backend (before any sequence is opened). */
void v4_pool_set_store(v4_state_pool *p, const v4_state_store *store, void *ctx);
/* Bytes a sequence of n_tokens positions needs in total (fixed part + pages). */
size_t v4_pool_bytes_for(const v4_state_pool *p, int n_tokens);

/* Start an empty sequence state (charges the fixed part). 0, or -1 when the budget is exhausted
 * or memory fails (state left empty). */
int v4_seq_init(v4_state_pool *p, v4_seq_state *s);
/* Make sure pages exist for positions [0, n_tokens). 0, or -1 when the budget is exhausted
 * (pages already held are kept). */
int v4_seq_reserve(v4_state_pool *p, v4_seq_state *s, int n_tokens);
/* Release everything (pages back to the pool); the state becomes empty, pos = 0. */
void v4_seq_free(v4_state_pool *p, v4_seq_state *s);

/* Accessors (no checks; the backend only touches reserved positions). */
static inline float *v4_ring(const v4_state_pool *p, const v4_seq_state *s, int layer) {
    return s->fixed + p->layer[layer].ring_off;
}
static inline float *v4_cbuf(const v4_state_pool *p, const v4_seq_state *s, int layer) {
    return s->fixed + p->layer[layer].cbuf_off;
}
static inline float *v4_ibuf(const v4_state_pool *p, const v4_seq_state *s, int layer) {
    return s->fixed + p->layer[layer].ibuf_off;
}
/* Main compressed entry w of `layer` (head_dim floats). */
static inline float *v4_entry(const v4_state_pool *p, const v4_seq_state *s, int layer, int w) {
    const v4_layer_layout *L = &p->layer[layer];
    int tok = w * L->ratio, b = tok / p->block_tokens;
    int k = (tok - b * p->block_tokens) / L->ratio;
    return p->mem[s->blocks[b]] + L->page_off + (size_t)k * p->cfg->head_dim;
}
/* Indexer key w of a CSA `layer` (index_head_dim floats). */
static inline float *v4_ikey(const v4_state_pool *p, const v4_seq_state *s, int layer, int w) {
    const v4_layer_layout *L = &p->layer[layer];
    int tok = w * 4, b = tok / p->block_tokens;
    int k = (tok - b * p->block_tokens) / 4;
    return p->mem[s->blocks[b]] + L->ipage_off + (size_t)k * p->cfg->index_head_dim;
}

#endif
