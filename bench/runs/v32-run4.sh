#!/usr/bin/env bash
# v32 run 4 (bench/NOTES.md v32 (4)): (a) the working tree, where the T <= 8 kernel's 4-block form has the early refill
# (MOE_ER_S 1), at the batches run 3 did not read (2, 5, 7) and again at 3, 4: the default (the 5-block form at 2-7,
# without it) against FN 9 (the 4-block form with it at every batch). Prediction: FN 9 -1..5 % at 2-7 (run 3: 3 -1 %,
# 4 -4.7 %, 6 -2.4 % against the 5-block form). (b) The T > 8 form (the fused 1-tile stages, 9-256 tokens) with the
# early refill at 4 blocks per SM (f4: -DMOE_ER_F1=1 -DMOE_MINB1=4, 122-124 registers, no spill) against its 5 blocks
# without it (new). Prediction: +-2 % (16 warps x 4 chunks in flight against 20 x 3). Processes new f4 new f4. No carry.
source bench/runs/lib.sh
VARIANTS="new: f4:-DMOE_ER_F1=1,-DMOE_MINB1=4" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 \
  | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
for o in "sqrtsoftplus" "one expert launch" "hash routing"; do
  timeout 90 env MOE_TEST_ONLY="$o" $N/test_moe_gpu > "$OUT/t-new-${o%% *}.log" 2>&1
  echo "test new '$o': rc $? $(tail -1 "$OUT/t-new-${o%% *}.log")"
done
timeout 90 env MOE_TEST_ONLY="fused 1-tile stages" /tmp/moe-ab/f4/test_moe_gpu > $OUT/t-f4.log 2>&1
echo "test f4 'fused 1-tile stages': rc $? $(tail -1 $OUT/t-f4.log)"
B=$(variant) B4=$(variant FN=9)
for r in 1 2; do
  timeout 100 $N/sluice-bench moe --batches 2,3,4,5,7 --reps 8 --variants "$B/$B4" > $OUT/small-$r.log 2>&1
  echo "== small/$r (B B4):$(row $OUT/small-$r.log)"
  for n in new f4; do
    timeout 120 /tmp/moe-ab/$n/sluice-bench moe --batches 9,16,32,64,128,256 --routing random --reps 8 > $OUT/b-$n-$r.log 2>&1
    timeout 60 /tmp/moe-ab/$n/sluice-bench moe --batches 16,32 --routing skewed --reps 8 > $OUT/s-$n-$r.log 2>&1
    echo "== $n/$r:$(row $OUT/b-$n-$r.log) |$(row $OUT/s-$n-$r.log)"
  done
done
