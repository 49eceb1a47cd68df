#!/usr/bin/env python3
"""Kernel timeline of chosen forwards from an nsys cuda_gpu_trace CSV (graph nodes traced one by one):
   nsys profile -t cuda --cuda-graph-trace=node -o R sluice-bench moe --batches 1,64 --reps 1 --routing random
   nsys stats --report cuda_gpu_trace --format csv -o R R.nsys-rep
   python3 bench/nsys_timeline.py R_cuda_gpu_trace.csv 12 28
A forward starts at a router logits kernel (the shared expert's launches, forked before it, may start
earlier: they are listed with negative offsets); each kernel: start and end in us from that start."""
import csv, sys

rows = []
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        name = r.get("Name") or r.get("Kernel Name") or ""
        if not name or "memcpy" in name.lower() or "memset" in name.lower():
            continue
        rows.append((int(r["Start (ns)"]), int(r["Duration (ns)"]), name.split("(")[0].split("<")[0].replace("void ", "")))
rows.sort()
starts = [i for i, r in enumerate(rows) if r[2].startswith("k_router_logits")]
for want in map(int, sys.argv[2:]):
    if want >= len(starts):
        print(f"forward {want}: only {len(starts)} forwards")
        continue
    i0 = starts[want]
    i1 = starts[want + 1] if want + 1 < len(starts) else len(rows)
    t0 = rows[i0][0]
    # the shared expert's kernels of this forward may precede its logits kernel
    lo = i0
    while lo > 0 and rows[lo - 1][2].startswith("k_shared") and t0 - rows[lo - 1][0] < 50000:
        lo -= 1
    end = max(r[0] + r[1] for r in rows[lo:i1])
    print(f"forward {want}: {(end - t0) / 1e3:.1f} us from the logits start")
    for s, d, n in rows[lo:i1]:
        print(f"  {n:24s} {(s - t0) / 1e3:8.1f} {(s + d - t0) / 1e3:8.1f}  ({d / 1e3:.1f})")
