#!/usr/bin/env bash
# Ran at 7806118 (its KH code was reverted in the commit after it: check out 7806118 to rerun this).
# v33 run 3 (bench/NOTES.md v33 (3)): the shared gate/up tiles in 8 or 16 K parts (KH; MOE_SH_PARTS_MAX 16, their
# partial sums in moe_expert_args.part_sh), every part before the wait on the lists (ES 8). Why: v33 (2)'s item logs
# have the one expert launch start ~5 us before its routed gate/up can (the lists), and with KH 4 only 512 warps use
# that window, for 32 KB parts that then run on into the routed stream (at 6 they stagger the second wave). With KH 16,
# 2048 of the 2112 warps each read one 8 KB part there. Prediction: 5-8 -1..3 %, 1-4 -0..2 %, no loss at 6.
# Builds new / tr (the item log); new's test cases for it and its T <= 8 cases; two processes B KH16+ES8 KH8+ES8 ES8
# at 1, 2, 4, 6, 7, 8 (random and skewed); tr's item logs at 6 and 8 for B and KH16+ES8. No carry.
source bench/runs/lib.sh
VARIANTS="new: tr:-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 \
  | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
for o in "shared gate/up in" "one expert launch" "sqrtsoftplus"; do
  f="$OUT/t-${o%% *}.log"
  timeout 150 env MOE_TEST_ONLY="$o" $N/test_moe_gpu > "$f" 2>&1
  echo "test '$o': rc $? $(tail -1 "$f") ($(grep -c rel_l2 "$f") cases)"; grep -E "FAIL" "$f" | head -5
done
B=$(variant) K16=$(variant KH=16 ES=8) K8=$(variant KH=8 ES=8) E8=$(variant ES=8)
for r in 1 2; do
  timeout 150 $N/sluice-bench moe --batches 1,2,4,6,7,8 --reps 8 --variants "$B/$K16/$K8/$E8" > $OUT/b-$r.log 2>&1
  echo "== $r (B K16 K8 E8):$(row $OUT/b-$r.log)"
done
timeout 90 /tmp/moe-ab/tr/sluice-bench moe --batches 6,8 --routing random --reps 2 --item-log --variants "$B/$K16" > $OUT/il3.log 2>&1
grep -hE "stages|items" $OUT/il3.log | cut -c1-2500
