#!/usr/bin/env bash
# v39 run 3 (bench/NOTES.md v39 (4)): DE, the 2-tile down before the fused launch (moe_cuda_ws.dn2_first_bps blocks per
# SM). Run 2's B trace at 256: the 2-tile down's blocks find slots only as the fused launch exits (953 us) and its PDL
# wait is on that launch, so its 180 MB run 953-1068 as the layer's tail, ~75 us past the fused launch's end (993).
# Launched right after the gate/up launches on 132 or 264 blocks, it waits on the 2-tile gate/up (done ~229 us) and
# streams beside the fused launch, whose last blocks start when its blocks exit. Prediction: 256 -3..6 % (the tail
# gone, the fused launch a little slower with 16 of its 20 warps per SM while the down runs), 192-320 alike, 144 -1..2 %
# (fewer 2-tile experts), skewed 256 equal (its experts are wide). Tests first (the new cases, then the fused and wide
# cases and graph replays the reordering could break); one process B / D1 / D2 / B / D1 / D2; stage traces of B and D1.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "2-tile down first" "fused 1-tile stages" "wide experts" "graph replay"
grep -q "all passed" $OUT/t-new-2-tile.log || { tail -20 $OUT/t-new-2-tile.log; exit 1; }
B=$(variant) D1=$(variant DE=1) D2=$(variant DE=2)
timeout 300 $N/sluice-bench moe --batches 144,192,256,320 --routing random --reps 10 --variants "$B/$D1/$D2/$B/$D1/$D2" > $OUT/de.log 2>&1
timeout 100 $N/sluice-bench moe --batches 256 --routing skewed --reps 10 --variants "$B/$D1/$D2/$B/$D1/$D2" > $OUT/des.log 2>&1
grep -m1 ceiling $OUT/de.log
echo "(us unqueued/queued@MHz: B D1 D2 B D1 D2)"
table $OUT/de.log $OUT/des.log
timeout 90 $N/sluice-bench moe --batches 192,256 --routing random --reps 4 --stages --variants "$B/$D1" > $OUT/det.log 2>&1
grep -E "stages (192|256) random" $OUT/det.log | cut -c1-330
