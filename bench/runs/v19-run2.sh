#!/usr/bin/env bash
# bench/NOTES.md v19 run 2. Run from the repo root on the GPU machine (run tool, carry [".ab"]).
# Needs .ab/head (0f41ddb's sources) made here first: mkdir -p .ab/head && git archive 0f41ddb kernels engine tests/gpu bench | tar -x -C .ab/head
# v19 run 2: no spills (item_tables1 not inlined), A/B against HEAD (0f41ddb): T1 16 up to 128, ES 8
export PATH=$PATH:/usr/local/cuda/bin
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2
VARIANTS="head: new:" TESTS=new TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 4,8,16,64,128,256 --routing random --stages --variants $D,2,8,1073741824,1/$D,2,16,128,1/$D,8,8,1073741824,1" \
  bash bench/moe_ab.sh
grep -h -E 'FAIL|passed|failed' $OUT/test-new.log | tail -5
