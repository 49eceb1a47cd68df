#!/usr/bin/env bash
# v32 run 3 (bench/NOTES.md v32 (3)): run 2's item log has batch 8's 2112 warps all busy from 40 to 175 us and the
# stream there at only 3.7-4.0 TB/s: each warp reads ~1.85 GB/s, a 2.3 KB chunk step per ~1.25 us with its ring of 4.
# fp4_rowtile refills a ring slot only after the chunk's compute, so while a warp computes (~0.5 us of issue among 16
# warps) it has 3 chunks in flight, not 4. MOE_EARLY_REFILL 1 refills right after the slot's shared-memory reads, 2
# between the compute's two halves. Both spill in most kernels (ptxas), but not in the 4-block T <= 8 form (batches 1
# and 8 by default; FN 9 puts 2-7 on it too). Prediction: 8 -3..6 % (steady state toward ~4.2 TB/s), 1 -1..3 %, 3-6 at
# FN 9 -2..5 % against new at FN 9. Builds new / er1 / er2 / er1tr (er1 with the item log); er1's T <= 8 test cases;
# processes new er1 er2 new er1 er2 (random 1, 3, 4, 6, 8: B and FN 9; skewed 8); er1's item log at 8. No carry.
source bench/runs/lib.sh
VARIANTS="new: er1:-DMOE_EARLY_REFILL=1 er2:-DMOE_EARLY_REFILL=2 er1tr:-DMOE_EARLY_REFILL=1,-DMOE_TRACE_ITEMS=1" \
  TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
for o in "sqrtsoftplus" "one expert launch"; do
  timeout 90 env MOE_TEST_ONLY="$o" /tmp/moe-ab/er1/test_moe_gpu > "$OUT/t-er1-${o%% *}.log" 2>&1
  echo "test er1 '$o': rc $? $(tail -1 "$OUT/t-er1-${o%% *}.log")"
done
B=$(variant) B4=$(variant FN=9)
for r in 1 2; do for n in new er1 er2; do
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,3,4,6,8 --routing random --reps 8 --variants "$B/$B4" \
    > $OUT/b-$n-$r.log 2>&1
  timeout 60 /tmp/moe-ab/$n/sluice-bench moe --batches 8 --routing skewed --reps 8 > $OUT/s-$n-$r.log 2>&1
  echo "== $n/$r:$(row $OUT/b-$n-$r.log) |$(row $OUT/s-$n-$r.log)"
done; done
timeout 60 /tmp/moe-ab/er1tr/sluice-bench moe --batches 8 --routing random --reps 2 --item-log > $OUT/il.log 2>&1
grep -hE "stages|items" $OUT/il.log
