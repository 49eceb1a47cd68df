#!/usr/bin/env bash
# v33 run 2 (prepared in session 23, not yet run; bench/NOTES.md v32 (6)): why the shared gate/up before the lists at
# 5-8 (ES 8) gains at 7 (-4 %) and 8 (-1.2 %) but costs 6 +6.4 %. The item log (-DMOE_TRACE_ITEMS=1) at 6 and 7, B and
# E8, shows per 5 us which item kinds run and how fast: look for the shared parts' span, the routed gate/up's start and
# the drain. Then B E8 B E8 again at 5-8 untraced, to see whether 6's loss repeats. No carry.
source bench/runs/lib.sh
VARIANTS="new: tr:-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
B=$(variant) E8=$(variant ES=8)
timeout 60 /tmp/moe-ab/tr/sluice-bench moe --batches 6,7 --routing random --reps 2 --item-log --variants "$B/$E8" > $OUT/il.log 2>&1
grep -hE "variant|stages|items" $OUT/il.log | cut -c1-3000
timeout 100 $N/sluice-bench moe --batches 5,6,7,8 --routing random --reps 8 --variants "$B/$E8/$B/$E8" > $OUT/es.log 2>&1
echo "== B E8 B E8:$(row $OUT/es.log)"
