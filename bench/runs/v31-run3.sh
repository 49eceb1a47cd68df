#!/usr/bin/env bash
# v31 run 3 (bench/NOTES.md v31 (3)): run 1's item trace at 3 tokens has the one expert launch's 2112 warps (4 blocks
# per SM, MOE_MINB_S 4; not the 2640 v30 (7) counted) take 2765 gate/up items: 653 are second items, 141 of them on
# warps whose first routed item ends at ~52 us, so gate/up ends at 85.6 and the down items of its last experts at 100.
# With 5 blocks per SM (-DMOE_MINB_S=5: 96 registers, no spills) the 2640 warps hold all of 3's gate/up items as first
# or (early shared warps) second items. Prediction: 3 -10..15 %, 2 equal, 1 +5..8 % (v18 (4) read +8 % at 1), 4-8 within
# a few %. Then the working tree's full test_moe_gpu (the defaults now from moe_cuda_ws_defaults, the bench's fields
# set through tune_set) and s5's one-launch cases; processes new s5 new s5 at 1-8, random and skewed; s5's item trace.
# One device call, no carry.
source bench/runs/lib.sh
VARIANTS="new: s5:-DMOE_MINB_S=5 s5tr:-DMOE_MINB_S=5,-DMOE_TRACE_ITEMS=1" TESTS="new" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
timeout 60 env MOE_TEST_ONLY="one expert launch" /tmp/moe-ab/s5/test_moe_gpu > $OUT/t-s5.log 2>&1; echo "test s5 one launch: rc $? $(tail -1 $OUT/t-s5.log)"
for r in 1 2; do for n in new s5; do
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,2,3,4,5,6,7,8 --reps 8 > $OUT/b-$n-$r.log 2>&1
  echo "== $n/$r:$(row $OUT/b-$n-$r.log)"
done; done
timeout 60 /tmp/moe-ab/s5tr/sluice-bench moe --batches 1,3,4,7,8 --routing random --reps 4 --stages > $OUT/st5.log 2>&1
grep stages $OUT/st5.log | cut -c1-300
