#!/usr/bin/env bash
# v32 run 1 (bench/NOTES.md v32 (1)): the T <= 8 kernel's routed items through two copies of the FP4 loop
# (-DMOE_SMALL_ONE_LOOP=0: gate/up with x through L1 as the T > 8 form, down with h through L2) instead of v17's one
# copy. Why: v31 (2)'s trace at 8 tokens had the fused 1-tile kernel (two loops) stream at 3.81 TB/s against the one
# launch's 3.62, with the same items; the one launch's head (routed items from ~14.7 us) is the shorter one. v17 chose
# one copy for the instruction cache, before v18's cheaper dequant and the rolled loop (MOE_ROLL_S). Prediction: 8
# -2..5 %, 6-7 -1..4 %, 1-3 within 1 % (the stream there is latency, not rate), skewed 4-8 within 2 %.
# Also in the same call: the 5-block form at 8 with two loops (FX 8), and at batch 1 the 5-block form with 4 K parts
# (FN 1 KG 4: 3584 gate/up items for 2640 warps; v31 (3) measured 5 blocks at 1 only with 2 K parts).
# One device call, no carry: builds new / two / twotr (two with the item trace), tests two's T <= 8 cases, then
# processes new two new two (random 1-4, 6-8: B and FX 8; skewed 4, 8: B), batch 1 B K4 B K4, two's item trace.
source bench/runs/lib.sh
VARIANTS="new: two:-DMOE_SMALL_ONE_LOOP=0 twotr:-DMOE_SMALL_ONE_LOOP=0,-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 \
  bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
T=/tmp/moe-ab/two
for o in "sqrtsoftplus" "one expert launch" "v29 TL 4" "v30 early" "hash routing"; do
  timeout 90 env MOE_TEST_ONLY="$o" $T/test_moe_gpu > "$OUT/t-two-${o%% *}.log" 2>&1
  echo "test two '$o': rc $? $(tail -1 "$OUT/t-two-${o%% *}.log")"
done
B=$(variant) B5=$(variant FX=8) K4=$(variant FN=1 KG=4)
for r in 1 2; do for n in new two; do
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,2,3,4,6,7,8 --routing random --reps 8 --variants "$B/$B5" \
    > $OUT/b-$n-$r.log 2>&1
  timeout 60 /tmp/moe-ab/$n/sluice-bench moe --batches 4,8 --routing skewed --reps 8 > $OUT/s-$n-$r.log 2>&1
  echo "== $n/$r:$(row $OUT/b-$n-$r.log) |$(row $OUT/s-$n-$r.log)"
done; done
timeout 60 $N/sluice-bench moe --batches 1 --routing random --reps 8 --variants "$B/$K4/$B/$K4" > $OUT/k4.log 2>&1
echo "== batch 1 B K4 B K4:$(row $OUT/k4.log)"
timeout 60 /tmp/moe-ab/twotr/sluice-bench moe --batches 3,8 --routing random --reps 4 --stages > $OUT/sttr.log 2>&1
grep stages $OUT/sttr.log | cut -c1-300
