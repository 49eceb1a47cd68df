#!/usr/bin/env bash
# v39 run 1 (bench/NOTES.md v39 (1)-(2)): (1) the test cases 2023d04's refactor touched (moe_shared_gemms' gate/up-then-down
# pairs through one gemm_pair, the GW forms' cases as one loop), on the GPU for the first time. (2) v16's L2 prefetch
# of the shared expert (PF 1: the logits launch asks L2 for its 16.8 MB gate/up; PF 3: and its 8.4 MB down) in v38's
# T <= 8 launch, where v32 (2)'s item log has no expert byte moving in the ~10 us head and the stream at 93-95 % of the
# ceiling: v16 measured PF 1 +1.4..3 % with the separate stage launches of then, never since. Prediction: 8 -1..2 %
# (16.8 MB off the stream, and the 512 shared gate/up parts, the first items of warps 0-511, read from L2), 5-7 alike,
# 1-4 within +-1 % (their shared parts already run before the lists, ES), PF 3 no better than PF 1 (the shared down
# items are drawn after every gate/up tile, ~100 us and ~400 MB later, so evict_normal lines are gone by then).
# One process B P1 P3 B P1 P3, random 1-8 and skewed 8, then a stage trace of B and P1 at 8. No carry.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "wgmma GEMMs" "by TMA" "V4-Flash dims"
B=$(variant) P1=$(variant PF=1) P3=$(variant PF=3)
timeout 200 $N/sluice-bench moe --batches 1,2,4,6,7,8 --routing random --reps 10 --variants "$B/$P1/$P3/$B/$P1/$P3" > $OUT/pf.log 2>&1
timeout 60 $N/sluice-bench moe --batches 8 --routing skewed --reps 10 --variants "$B/$P1/$P3/$B/$P1/$P3" > $OUT/pfs.log 2>&1
echo "(us unqueued/queued@MHz: B P1 P3 B P1 P3)"
table $OUT/pf.log $OUT/pfs.log
timeout 60 $N/sluice-bench moe --batches 1,8 --routing random --reps 4 --stages --variants "$B/$P1" > $OUT/pft.log 2>&1
grep -E "stages (1|8) random" $OUT/pft.log | cut -c1-300
