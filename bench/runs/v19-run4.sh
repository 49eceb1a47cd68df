#!/usr/bin/env bash
# bench/NOTES.md v19 run 4. Run from the repo root on the GPU machine (run tool, carry [".ab"]).
# v19 run 4: what the shared expert costs at 32-128 (--no-shared), and it in the layer's stream (FK 0)
export PATH=$PATH:/usr/local/cuda/bin
P=1,16,33,4,16,0,32,0,16
Q=1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2
VARIANTS="new:" TESTS=none ROUNDS=1 BENCH_ARGS="--batches 32,64,128 --routing random --stages --variants $P,1,$Q/$P,0,$Q/$P,1,$Q" \
  bash bench/moe_ab.sh > /dev/null 2>&1
for r in 1 2; do
  /tmp/moe-ab/new/sluice-bench moe --batches 32,64,128 --routing random --stages --no-shared > $OUT/noshared-$r.log 2>&1
  /tmp/moe-ab/new/sluice-bench moe --batches 32,64,128 --routing random --stages > $OUT/shared-$r.log 2>&1
done
grep -hE '^ +[0-9]+ +random' $OUT/*.log
