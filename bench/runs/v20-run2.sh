#!/usr/bin/env bash
# Sources: commit f4713df (the routing in the launch; reverted in the next commit, bench/NOTES.md v20): check it
# out first (git checkout f4713df -- kernels engine tests bench/sluice_bench.c), then run.
# v20 run 2 (bench/NOTES.md v20): the routing inside the T <= 8 expert launch (moe_cuda_ws.fs_route_max_t, bench
# --variants field 30 RT) against the top-k + lists launch before it (RT 0), and with the shared gate/up before the
# wait up to batch 8 (field 26 ES 8). One build; test_moe_gpu; two rounds of the three variants at batches 1-8.
# Run from the repo root on the GPU machine (run tool; nothing to carry).
export PATH=$PATH:/usr/local/cuda/bin
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2
V="$D,2,16,128,64,0/$D,2,16,128,64,8/$D,8,16,128,64,8"
VARIANTS="new:" TESTS="new" TEST_TIMEOUT=300 ROUNDS=2 BENCH_ARGS="--batches 1,2,4,8 --stages --variants $V" \
  bash bench/moe_ab.sh > /dev/null
OUT=${OUT:-/tmp/moe-ab-out}
grep -h "test new" -A0 $OUT/test-new.log | tail -1; tail -1 $OUT/test-new.log
for r in 1 2; do
  echo "== round $r (variants in turn: RT 0 / RT 8 / RT 8 + ES 8)"
  grep -E "^ +[0-9]+ +(random|skewed)|stages [0-9]+ random" $OUT/bench-new-$r.log
done
