#!/usr/bin/env bash
# v21 run 1 (bench/NOTES.md v21 (1)): is the layer slower as a CUDA graph than issued on the stream? (the "stage
# breakdown" lines of every committed run read 732-740 us at batch 64 in stream mode against 755-810 us for the
# graph). Per batch: the graph replays, the same forward issued on the stream (--stream) and both stage traces,
# for the shared expert forked before the router (FK 1, default), forked and joined before the routed launches
# (FK 4, new), and in the layer's stream (FK 0); two rounds; then the layer without its shared expert.
# Run from the repo root on the GPU machine (nothing to carry).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
V="1,16,33,4/1,16,33,4,16,0,32,0,16,4/1,16,33,4,16,0,32,0,16,0"
VARIANTS="base:" TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 16,32,64,128,256,512 --routing random --reps 12 --stream --stages --variants $V" \
  bash bench/moe_ab.sh | grep -v "^batch\|random"
/tmp/moe-ab/base/sluice-bench moe --batches 64,128,512 --routing random --reps 12 --stream --stages --no-shared > $OUT/bench-noshared.log 2>&1
for f in $OUT/bench-base-1.log $OUT/bench-base-2.log $OUT/bench-noshared.log; do
  echo "== $f"; grep -E "^variant|^ +[0-9]+ +random|stream [0-9]+ random" $f | sed -E 's/^variant: early PDL 1.*shared expert launches from batch 16 \(second stream ([0-9])\).*/variant FK \1/'
done
for f in $OUT/bench-base-1.log $OUT/bench-noshared.log; do
  echo "== stages $f"; grep -E "^variant|stages(-stream)? (64|128|512) random" $f | sed -E 's/^variant: early PDL 1.*shared expert launches from batch 16 \(second stream ([0-9])\).*/variant FK \1/'
done
cd $OUT && tar czf ab.tgz --remove-files bench-*.log
