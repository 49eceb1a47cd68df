#!/usr/bin/env bash
# Prepared in session 21, not run (no device time left): v30 weak spot (a) / v30 (7)'s guess that random 3 and 7 are
# slow because the one expert launch's gate/up items just exceed its 2640 warps (1.04 and 2.08 "waves"). The default
# build and one with each item kind's span in the stage trace (-DMOE_TRACE_ITEMS=1), random 2, 3, 6, 7, 8 with stage
# traces (and 1, 4: run in session 22). Prediction, if the guess holds: at 3 and 7 the last routed gate/up items start a whole item later than the
# rest (their span's start against the first wave's end) and the down items' span ends that much after the gate/up's;
# at 2 and 6 not. One device call (~1.5 min with the start), no carry.
source bench/runs/lib.sh
VARIANTS="new: tr:-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
for n in new tr; do
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,2,3,4,6,7,8 --routing random --reps 8 --stages > $OUT/w-$n.log 2>&1
  echo "== $n:$(row $OUT/w-$n.log)"; grep stages $OUT/w-$n.log | cut -c1-300
done
