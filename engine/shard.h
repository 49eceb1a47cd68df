/* shard.h — how one V4 model is split across the GPUs of one host (the cuda backend's ranks).
 *
 * The layout (bench/multigpu_model.py chose it from the byte and collective-latency model): every rank keeps the
 * whole residual stream and runs, on the same inputs, everything a token's attention needs whole — mHC, the norms,
 * wq_a, wkv, the compressors, the lightning indexer and its top-k — so every rank holds the full KV state and picks
 * the same entries; the attention heads are split (wq_b's rows, the sinks, wo_a's groups, wo_b's columns), and each
 * expert, routed and shared, is split along its intermediate dimension (w1 and w3 rows, w2 columns) with the router
 * whole on every rank. Each rank's wo_b and its MoE then give a partial sum of the sublayer's output; one all-reduce
 * after each makes the residual stream whole again: two a layer. Splitting every expert rather than placing whole
 * experts keeps the ranks even at small batches, where six experts rarely divide evenly (the model's "expert TP"
 * rows), and needs no token dispatch. The LM head and sampling run on rank 0.
 */
#ifndef SLUICE_SHARD_H
#define SLUICE_SHARD_H

#include <stddef.h>

#include "config.h"

#define SL_MAX_RANKS 8

typedef struct {
    int rank, n;            /* this rank of n */
    int h0, nh;             /* attention heads [h0, h0 + nh) */
    int g0, ng;             /* wo_a's output groups [g0, g0 + ng): the same heads */
    int i0, ni;             /* each routed expert's intermediate units [i0, i0 + ni) */
    int si0, sni;           /* the shared expert's [si0, si0 + sni) (shared_inter: its width) */
} v4_shard;

/* Rank `rank` of n of a model whose shared expert is shared_inter wide (0: none). 0, or -1 with one line in err
 * naming what n does not divide. n = 1 is the whole model. */
int v4_shard_plan(const v4_config *c, int shared_inter, int n, int rank, v4_shard *s, char *err, size_t errlen);

/* engine.devices: "" or "all" = every visible GPU (returns 0 devices); else comma-separated CUDA device ordinals,
 * at most SL_MAX_RANKS, each listed once, or one ordinal repeated (every rank on that GPU: the layout a test of the
 * split runs on one GPU). Returns the count, or -1 with one line in err. */
int sl_parse_devices(const char *s, int *dev, char *err, size_t errlen);

#endif
