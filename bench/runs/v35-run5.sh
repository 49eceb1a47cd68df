#!/usr/bin/env bash
# v35 run 5 (bench/NOTES.md v35 (5)): run 4 read HT 64 against 0 at random 48 +0.6 % (queued +1.8 %) and skewed 48
# +6.3 %, where a quarter of the 64-token blocks' work is padding; so 33-48 tokens keep the 16-token blocks (HT's
# 64-token blocks only above 48). The v35 test cases (49 and skewed 57 now take the 64-token blocks; each also replayed
# from a graph), then B H0 H0 B at 40, 48, 56, 64, random and skewed. Prediction: 40-48 equal (the same launches), 56 and
# 64 -0.5..2 %.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "v35"
grep -c "bit-identical" $OUT/t-new-v35.log
B=$(variant) H0=$(variant HT=0)
timeout 150 $N/sluice-bench moe --batches 40,48,56,64 --reps 8 --variants "$B/$H0/$H0/$B" > $OUT/b-ht-2.log 2>&1
echo "== ht/2 (B H0 H0 B):$(row $OUT/b-ht-2.log)"
