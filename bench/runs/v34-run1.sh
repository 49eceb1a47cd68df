#!/usr/bin/env bash
# v34 run 1 (prepared in session 24, not yet run; bench/NOTES.md v33 weak spots): the one launch's last down items in K
# halves again (-DMOE_DN_SPLIT=1, bench field DS), now with slots of their own, so batch 1 can have them beside its 2
# gate/up K parts, and with DS -1: split only as many as fill the warps the down items leave idle (none at random 3-8).
# Why: v33 (1) measured v32's form at batch 1 with whole gate/up tiles 65.1 -> 60.4 us and skewed 2-8 -5..8 %, where
# 768 down items leave most of 2112 warps idle. Prediction: DS -1 at batch 1 -3..6 % against B (60 us), skewed 1-8
# -3..8 %, random 2 -0..3 %, random 3-8 within the ds build's +0.3..0.8 % (its decode). Same call: the 1-tile down
# items (SR 1, 1536 items at batch 1, through the two-loop path) at batch 1. Builds new / ds; ds's new test cases
# and its T <= 8 cases, and the default build's whole test_moe_gpu; processes new (B, SR 1) and ds (B, DS -1, DS all), twice, at 1-4 and 8. No carry.
source bench/runs/lib.sh
VARIANTS="new: ds:-DMOE_DN_SPLIT=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 \
  | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
D=/tmp/moe-ab/ds
# the whole test_moe_gpu of the default build (v33 (6)'s CE on at T <= 8 has had only its own 10 cases so far)
timeout 400 $N/test_moe_gpu > $OUT/t-new-all.log 2>&1
echo "test new all: rc $? $(tail -1 $OUT/t-new-all.log) ($(grep -c rel_l2 $OUT/t-new-all.log) cases)"; grep FAIL $OUT/t-new-all.log | head -5
tests $D/test_moe_gpu ds "K halves" "one expert launch" "sqrtsoftplus"
B=$(variant) R1=$(variant SR=1)
SB=$D/sluice-bench; DB=$(variant) DM=$(variant DS=-1) DA=$(variant DS=1048576)
for r in 1 2; do
  timeout 120 $N/sluice-bench moe --batches 1,2,3,4,8 --reps 8 --variants "$B/$R1" > $OUT/b-new-$r.log 2>&1
  echo "== new/$r (B SR1):$(row $OUT/b-new-$r.log)"
  timeout 150 $D/sluice-bench moe --batches 1,2,3,4,8 --reps 8 --variants "$DB/$DM/$DA" > $OUT/b-ds-$r.log 2>&1
  echo "== ds/$r (B DS-1 DSall):$(row $OUT/b-ds-$r.log)"
done
