#!/usr/bin/env bash
# v34 run 2 (bench/NOTES.md v34 (2)): the shared expert's down launch alone at the highest priority (SP 2, new) against
# both shared launches there (SP 1, v16) and the default (SP 0). Why: a1a6500's stage trace at 128 has the shared down
# at 917.7-963.9 us, 13.5 us past the fused launch (950.4) and the 2-tile down (951.3): its blocks were eligible from the
# shared gate/up's end (42 us) but the fused launch's pending blocks took every freed slot first, so they ran only as
# the fused launch's persistent blocks exited. At the highest priority they take the slots the shared gate/up frees at
# ~42 us and run beside the fused launch, whose handed-out items rebalance. Prediction: 128 -0.5..1.5 %, 64 -0..0.5 %,
# 16-32 and 256 within 0.5 %; SP 1 slower at 64-256 (the shared gate/up's blocks ahead of the router's). Builds new,
# runs its priority test cases, one process B SP2 SP1 B SP2 at 16-256 with stage traces, one SP2 B SP2 B at 64 and 128.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "high priority"
B=$(variant) S2=$(variant SP=2) S1=$(variant SP=1)
timeout 270 $N/sluice-bench moe --batches 16,32,64,128,256 --reps 8 --stages --variants "$B/$S2/$S1/$B/$S2" > $OUT/b-sp-1.log 2>&1
echo "== sp/1 (B SP2 SP1 B SP2):$(row $OUT/b-sp-1.log)"
grep -E "stages (64|128) random" $OUT/b-sp-1.log | cut -c1-230
timeout 170 $N/sluice-bench moe --batches 64,128 --reps 8 --variants "$S2/$B/$S2/$B" > $OUT/b-sp-2.log 2>&1
echo "== sp/2 (SP2 B SP2 B):$(row $OUT/b-sp-2.log)"
