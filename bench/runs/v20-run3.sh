#!/usr/bin/env bash
# Sources: commit f4713df (the routing in the launch; reverted in the next commit, bench/NOTES.md v20): check it
# out first (git checkout f4713df -- kernels engine tests bench/sluice_bench.c), then run.
# v20 run 3 (bench/NOTES.md v20): HEAD (14fad63, .ab/head: git archive 14fad63 kernels engine tests/gpu bench) against
# the new build (router top-k with one copy of the score code, routing in the expert launch) and the new build with
# its item kinds traced (-DMOE_TRACE_ITEMS=1); each with --variants RT 0 (top-k + lists launch) / RT 8 (routing in
# the launch). Carry .ab. Run from the repo root on the GPU machine.
export PATH=$PATH:/usr/local/cuda/bin
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64
VARIANTS="head: new: tr:-DMOE_TRACE_ITEMS=1" TESTS="new" TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 1,4,8 --stages --variants $D,0/$D,8" bash bench/moe_ab.sh > /dev/null
OUT=${OUT:-/tmp/moe-ab-out}
tail -1 $OUT/test-new.log
for r in 1 2; do for n in head new tr; do
  echo "== $n round $r (RT 0 / RT 8)"
  grep -E "^ +[0-9]+ +(random|skewed)|stages [0-9]+ random" $OUT/bench-$n-$r.log
done; done
