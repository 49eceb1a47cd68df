#!/usr/bin/env bash
# v22 run 4 (bench/NOTES.md v22 (6)), session 13. One device call (~4 min).
# The router top-k over 8 warps per token up to 2 tokens (moe_cuda_ws.topk_group_max_t, --variants field TG)
# against one warp per token (TG 0): test_moe_gpu first (both forms, hash routing beside them), then batches 1,
# 2 and 4 (the control: not grouped) random and skewed, two processes, stage traces.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run4.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9
VARIANTS="base:" TESTS="base" TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 1,2,4 --reps 12 --stages --variants $D,0/$D,2" bash bench/moe_ab.sh > /dev/null
grep -E "FAIL|passed|one-warp|hash routing|T=1 |T=2 " $OUT/test-base.log | head -30
for r in 1 2; do
  echo "== process $r"
  grep -E "^variant|^ +[0-9]+ +(random|skewed)|stages [0-9]+ (random|skewed)" $OUT/bench-base-$r.log | sed -E 's/^variant: .*grouped top-k up to batch ([0-9]+)/variant TG \1/; s/ sh-gu.*//'
done
cd $OUT && tar czf run4.tgz --remove-files bench-*.log test-*.log
