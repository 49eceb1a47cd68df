#!/usr/bin/env python3
"""bench/multigpu_model.py: its one-GPU bytes are the decode benchmark's byte floor at full depth (11.3 GB a token at
batch 1, the figure the GPU-engine issue quotes); the built layout's (tp-etp) 2-GPU floors stay what bench/README.md
shows (1.53, 14.2, 18.8 ms at batch 1, 64, 256: the multi-GPU issue's ~1.3 / 14 / 18 with the weights every head
needs whole kept on both GPUs and the LM head on one); whole experts (tp-ep) read more on the busiest GPU at batch 1
(3.9 of 6 experts on 2 GPUs); splitting over more GPUs never adds bytes; --json writes every row."""
import json
import os
import subprocess
import sys
import tempfile

from bench_check import check, finish   # tests/bench/bench_check.py

model = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "m.json")
    subprocess.run([sys.executable, model, "--gpus", "1,2,4", "--batches", "1,64,256", "--json", out], check=True,
                   stdout=subprocess.DEVNULL)
    rows = json.load(open(out))["rows"]
by = {(r["layout"], r["gpus"], r["batch"]): r for r in rows}


def near(what, got, want, tol):
    check(abs(got - want) <= tol, "%s: %.3f, expected %.3f +- %.3f" % (what, got, want, tol))


near("one GPU, batch 1, GB", by[("one GPU", 1, 1)]["gb_per_gpu"], 11.32, 0.05)
for b, ms in ((1, 1.532), (64, 14.245), (256, 18.793)):
    near("tp-etp 2 GPUs, batch %d, bytes ms" % b, by[("tp-etp", 2, b)]["bytes_ms"], ms, 0.01)
    check(by[("tp-ep", 2, b)]["bytes_ms"] >= by[("tp-etp", 2, b)]["bytes_ms"],
          "batch %d: whole experts read at least as much on the busiest GPU as split ones" % b)
check(by[("tp-ep", 2, 1)]["bytes_ms"] > 1.05 * by[("tp-etp", 2, 1)]["bytes_ms"],
      "batch 1: splitting every expert beats placing whole experts (%.3f vs %.3f ms)"
      % (by[("tp-etp", 2, 1)]["bytes_ms"], by[("tp-ep", 2, 1)]["bytes_ms"]))
for layout in ("ep-replicated", "ep-dp", "tp-ep", "tp-etp"):
    for b in (1, 64, 256):
        check(by[(layout, 4, b)]["gb_per_gpu"] <= by[(layout, 2, b)]["gb_per_gpu"] <= by[("one GPU", 1, b)]["gb_per_gpu"],
              "%s batch %d: more GPUs read no more bytes each" % (layout, b))
check(by[("tp-ep", 2, 1)]["tpot_ms"] < by[("ep-replicated", 2, 1)]["tpot_ms"],
      "tensor-parallel dense wins batch 1 on 2 GPUs")
check(len(rows) == 3 * 1 + 4 * 2 * 3, "%d rows, expected 27" % len(rows))
finish("multigpu_model")
