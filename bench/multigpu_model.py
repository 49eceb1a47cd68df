#!/usr/bin/env python3
"""Byte and collective-latency model of a V4-Flash decode step spread over the GPUs of one host (issue: expert and
tensor parallelism over NCCL). It chose the layout the cuda backend builds (engine/shard.h, tp-etp below); nothing
here is measured.

Per GPU and step it counts the bytes that GPU must read (the same byte model as `sluice-bench decode`'s floor:
dense weights in the checkpoint's dtypes, the shared expert, the routed experts touched under uniform top-6 routing
at 0.53125 bytes per MXFP4 weight, the bf16 window, the selected CSA entries and FP8 index keys or every HCA entry
per sequence, the bf16 head) and the collectives on the step's critical path, for three layouts:

  ep-replicated  routed experts split E/N a GPU (expert parallel); everything else replicated: every GPU runs
                 every token's attention, mHC and dense projections (its own copy of every sequence's state), its
                 local experts for all tokens, then one all-reduce of the MoE output a layer.
  ep-dp          routed experts split; each GPU runs attention and the dense projections for its B/N sequences
                 (their state on it alone); the MoE needs the tokens of every GPU: an all-gather before, a
                 reduce-scatter after (two collectives a layer). At batch 1 one GPU does all the dense work.
  tp-ep          the attention heads split N ways (wq_b by columns, wo_a / wo_b by rows: an all-reduce after the
                 output projection), routed experts split, the shared expert split; what every head needs whole
                 (wq_a, wkv, the compressors, the indexer) and the one shared KV head's state on every GPU; two
                 all-reduces a layer.
  (Where experts are placed whole, the step waits for the GPU whose experts the batch touches most: at batch 1 the
  six experts rarely split evenly; on 2 GPUs the busier reads 3.9 of them on average, not 3.)
  tp-etp         tp-ep with every expert, routed and shared, split N ways along its intermediate units instead of
                 placed whole: every GPU reads 1/N of each touched expert, so the GPUs are even at any batch, and no
                 token moves between GPUs before the MoE (the built layout).

time = bytes / read rate + collectives x latency (no overlap of the two, no launch gaps: a floor). The read rate
and the latency are arguments: the defaults are an H200's measured read ceiling (4.5 TB/s) and 10 us for a small
NCCL all-reduce / all-gather over NVLink (LL protocol); --latency 4 models a one-shot all-reduce through NVLink
peer access. Prints one table; --json writes the rows.

Usage: python3 bench/multigpu_model.py [--gpus 1,2,4] [--batches 1,64,256] [--context 8192] [--layers 43]
       [--tbps 4.5] [--latency 10] [--json FILE]
"""
import argparse
import json
import random

# V4-Flash (shared/reference/v4_flash_config.json)
D, H, HD, QL, G, OL = 4096, 64, 512, 1024, 8, 1024
DI, NI, TOPK, WIN = 128, 64, 512, 128
I, E, ACTIVE, HC, VOCAB = 2048, 256, 6, 4, 129280
MXFP4 = 0.53125


def ratio(layer):
    """V4-Flash's compress ratio of a layer: 0 and 1 sliding window only, then CSA (4) and HCA (128) alternating."""
    return 0 if layer < 2 else (4 if layer % 2 == 0 else 128)


def touched(experts, batch):
    """Expected experts read among `experts` of E under uniform top-6 routing of `batch` tokens."""
    return experts * (1.0 - ((E - ACTIVE) / E) ** batch)


def busiest(n, batch, trials=400):
    """Expected experts touched on the busiest of n GPUs holding E/n whole experts each, uniform top-6 routing of
    `batch` tokens (Monte Carlo with a fixed seed: the same figure every run)."""
    if n == 1:
        return touched(E, batch)
    rng, per, acc = random.Random(1), E // n, 0
    for _ in range(trials):
        hit = set()
        for _ in range(batch):
            hit.update(rng.sample(range(E), ACTIVE))
        counts = [0] * n
        for e in hit:
            counts[e // per] += 1
        acc += max(counts)
    return acc / trials


def layer_parts(r):
    """Bytes of one layer's weights by kind, and of one sequence's attention state read at context ctx (a function).
    heads: the projections a tensor-parallel layout splits by heads (wq_b, wo_a, wo_b, FP8); rest: the ones every
    head needs whole (wq_a, wkv, the compressors and the indexer's projections), which it keeps on every GPU;
    small: mHC and the router (fp32); shared: the shared expert (FP8); expert: one routed expert (MXFP4)."""
    heads = H * HD * QL + G * OL * (H * HD // G) + D * G * OL
    rest = QL * D + HD * D
    small = 2 * (2 + HC) * HC * HC * D * 4 + E * D * 4
    if r == 4:
        rest += 2 * 2 * HD * D * 2 + 2 * 2 * DI * D * 2 + NI * D * 2 + NI * DI * QL
    elif r > 0:
        rest += 2 * HD * D * 2
    shared = 3 * I * D
    expert = 3 * I * D * MXFP4

    def state(ctx):
        s = WIN * HD * 2
        if r == 4:
            n = ctx // 4
            s += min(n, TOPK) * HD * 2 + n * DI
        elif r > 0:
            s += (ctx // r) * HD * 2
        return s
    return heads, rest, small, shared, expert, state


def step(layout, n, batch, ctx, layers):
    """(bytes per GPU, collectives on the critical path) of one decode step."""
    total, coll = 0.0, 0
    local_batch = batch if layout == "ep-replicated" else -(-batch // n)   # ep-dp: the busiest GPU's share
    most = busiest(n, batch) if layout != "tp-etp" else 0.0   # whole experts: the busiest GPU's
    for layer in range(layers):
        heads, rest, small, shared, expert, state = layer_parts(ratio(layer))
        if layout == "ep-replicated":
            total += heads + rest + small + shared + most * expert + batch * state(ctx)
            coll += 1 if n > 1 else 0
        elif layout == "ep-dp":
            total += heads + rest + small + shared + most * expert + local_batch * state(ctx)
            coll += 2 if n > 1 else 0
        elif layout == "tp-ep":
            total += heads / n + rest + small + shared / n + most * expert + batch * state(ctx)
            coll += 2 if n > 1 else 0
        else:  # tp-etp
            total += heads / n + rest + small + shared / n + touched(E, batch) * expert / n + batch * state(ctx)
            coll += 2 if n > 1 else 0
    head = VOCAB * D * 2   # on one GPU (the built layout's rank 0; a vocab split would spread it, plus a gather)
    return total + head, coll


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default="1,2,4")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=43)
    ap.add_argument("--tbps", type=float, default=4.5, help="read rate per GPU, TB/s")
    ap.add_argument("--latency", type=float, default=10.0, help="one collective on the critical path, us")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    gpus = [int(x) for x in a.gpus.split(",")]
    batches = [int(x) for x in a.batches.split(",")]
    rows = []
    print("V4-Flash, %d layers, context %d, %.2f TB/s a GPU, %.1f us a collective (a floor: no overlap, no gaps)"
          % (a.layers, a.context, a.tbps, a.latency))
    print("%-14s %4s %6s %10s %11s %12s %9s" % ("layout", "gpus", "batch", "GB/GPU", "bytes ms", "collectives", "TPOT ms"))
    for layout in ("ep-replicated", "ep-dp", "tp-ep", "tp-etp"):
        for n in gpus:
            if n == 1 and layout != "ep-replicated":
                continue
            for b in batches:
                by, c = step(layout, n, b, a.context, a.layers)
                bms = by / (a.tbps * 1e12) * 1e3
                tpot = bms + c * a.latency * 1e-3
                rows.append({"layout": layout if n > 1 else "one GPU", "gpus": n, "batch": b, "gb_per_gpu": by / 1e9,
                             "bytes_ms": bms, "collectives": c, "tpot_ms": tpot})
                print("%-14s %4d %6d %10.2f %11.3f %12d %9.3f" % (layout if n > 1 else "one GPU", n, b, by / 1e9, bms,
                                                               c, tpot))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"context": a.context, "layers": a.layers, "tb_per_s": a.tbps, "latency_us": a.latency,
                       "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
