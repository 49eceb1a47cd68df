#!/usr/bin/env bash
# bench/NOTES.md v19 run 3. Run from the repo root on the GPU machine (run tool, carry [".ab"]).
# v19 run 3: T1 16 up to 128 with the shared expert forked after the logits (FK 3), at high priority (SP 1),
# and the shared down released at the shared gate/up's start (-DSH_EARLY=1)
export PATH=$PATH:/usr/local/cuda/bin
P=1,16,33,4,16,0,32,0,16          # fields 0-8
Q=1,256,0,0,8,24,3,16,32          # fields 10-18
R=8,2,1,4,2,2                     # fields 20-25
B=$P,1,$Q,0,$R,8,1073741824,1
T=$P,1,$Q,0,$R,16,128,1
F=$P,3,$Q,0,$R,16,128,1
S=$P,1,$Q,1,$R,16,128,1
VARIANTS="new: she:-DSH_EARLY=1" TESTS=new TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 32,64,128,256 --routing random --stages --variants $B/$T/$F/$S/$B" \
  bash bench/moe_ab.sh
grep -h -E 'FAIL|passed|failed' $OUT/test-new.log | tail -5
