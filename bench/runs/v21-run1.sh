#!/usr/bin/env bash
# v21 run 1 (bench/NOTES.md v21 (1)-(2)), prepared in sessions 11-12, not yet run. One device call (~5 min).
# (1) Is the layer slower as a CUDA graph than issued on the stream? (the "stage breakdown" lines of every
# committed run read 732-740 us at batch 64 in stream mode against 755-810 us for the graph). Per batch: the
# graph replays, the same forward issued on the stream (--stream) and both stage traces, for the shared expert
# forked before the router (FK 1, default), forked and joined before the routed launches (FK 4, new), and in
# the layer's stream (FK 0); two rounds; then the layer without its shared expert.
# (2) Does where the weights land make the 5 % spread between bench processes at 64-128 (v19 (8), v20 (4))?
# Two processes, each measuring 4 placements of the same weight sets interleaved over 3 rounds (--placements).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run1.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
V="1,16,33,4/1,16,33,4,16,0,32,0,16,4/1,16,33,4,16,0,32,0,16,0"
VARIANTS="base:" TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 16,32,64,128,256,512 --routing random --reps 12 --stream --stages --variants $V" \
  bash bench/moe_ab.sh | grep -v "^batch\|random"
timeout 120 /tmp/moe-ab/base/sluice-bench moe --batches 64,128,512 --routing random --reps 12 --stream --stages --no-shared > $OUT/bench-noshared.log 2>&1
for p in 1 2; do
  timeout 150 /tmp/moe-ab/base/sluice-bench moe --batches 8,64,128 --reps 12 --placements 4 > $OUT/bench-place-$p.log 2>&1
done
for f in $OUT/bench-base-1.log $OUT/bench-base-2.log $OUT/bench-noshared.log; do
  echo "== $f"; grep -E "^variant|^ +[0-9]+ +random|stream [0-9]+ random" $f | sed -E 's/^variant: early PDL 1.*shared expert launches from batch 16 \(second stream ([0-9])\).*/variant FK \1/'
done
for f in $OUT/bench-base-1.log $OUT/bench-noshared.log; do
  echo "== stages $f"; grep -E "^variant|stages(-stream)? (64|128|512) random" $f | sed -E 's/^variant: early PDL 1.*shared expert launches from batch 16 \(second stream ([0-9])\).*/variant FK \1/'
done
for p in 1 2; do echo "== placements, process $p"; grep -E "^gpu|^placement|^round" $OUT/bench-place-$p.log; done
cd $OUT && tar czf run1.tgz --remove-files bench-*.log
