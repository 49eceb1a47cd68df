#!/usr/bin/env bash
# (Its HG / HD / HN fields exist only in a8111d6, the K-parts build; 4e99dd9 removed them: check that commit out to rerun.)
# v35 run 3 (bench/NOTES.md v35 (3)): the shared gate/up on fewer SMs. Runs 1-2: what slows the router at 32-128 is the
# shared gate/up's blocks on the same SMs (v29: without it the lists end 13-24 us earlier), and 4x its blocks (HG 4)
# start the logits 20 us late. N1 (HN 1, no K parts): its token tile is T rounded up to 64, so at 64 tokens its 32 row
# groups are 32 blocks on 32 SMs (B: 128 blocks on all of them; one dequantisation per weight instead of 4) and the
# router has the other 100 to itself; at 128, 64 blocks. N1D4: the same with the down in 4 parts (run 2: the 128 tail
# 15 -> 7-8 us). Prediction: the lists end 5-10 us earlier at 64-128, the shared gate/up spans longer (40 -> 50-80 us)
# beside the fused launch's first blocks on those SMs: 64 -0.3..1 %, 128 -0.3..1.2 %, 32 -0..0.5 %, 256 within 1 %. One
# process B N1 N1D4 B N1D4 N1 at 32-256 with stage traces, then N1 B N1 B at 64-128. Builds new, runs the v35 cases.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "v35"
B=$(variant) N1=$(variant HN=1) ND=$(variant HN=1 HD=4)
timeout 250 $N/sluice-bench moe --batches 32,64,128,256 --reps 8 --stages --variants "$B/$N1/$ND/$B/$ND/$N1" > $OUT/b-n1-1.log 2>&1
echo "== n1/1 (B N1 N1D4 B N1D4 N1):$(row $OUT/b-n1-1.log)"
grep -E "stages (64|128) random" $OUT/b-n1-1.log | cut -c1-300
timeout 150 $N/sluice-bench moe --batches 64,128 --reps 12 --routing random --variants "$N1/$B/$N1/$B" > $OUT/b-n1-2.log 2>&1
echo "== n1/2 (N1 B N1 B):$(row $OUT/b-n1-2.log)"
