#!/usr/bin/env bash
# Sources: commit 227573c (MOE_BIAS_PRE, removed in the next commit): git checkout 227573c -- kernels first.
# v20 run 8 (bench/NOTES.md v20 (7)): the top-k launches' bias loaded before their PDL wait (MOE_BIAS_PRE 1, new)
# against after it (0, old), both with the top-k + lists phases traced (MOE_TRACE_TL 1); test_moe_gpu on new; two
# rounds at batches 1-64. Run from the repo root on the GPU machine (nothing to carry).
export PATH=$PATH:/usr/local/cuda/bin
VARIANTS="old:-DMOE_BIAS_PRE=0,-DMOE_TRACE_TL=1 new:-DMOE_TRACE_TL=1" TESTS="new" TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 1,4,8,16,32,64 --stages" bash bench/moe_ab.sh | grep -v "^== " | tail -14
OUT=${OUT:-/tmp/moe-ab-out}
for n in old new; do echo "== $n 1"; grep -E "stages [0-9]+ random" $OUT/bench-$n-1.log | sed -E 's/ (gu2|fused1|dn2|sh-gu|sh-dn) [0-9.]+-[0-9.]+//g'; done
cd $OUT && tar czf ab.tgz --remove-files bench-*.log
