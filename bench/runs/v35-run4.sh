#!/usr/bin/env bash
# v35 run 4 (bench/NOTES.md v35 (4)): HT (moe_cuda_ws.shared_tile_max_t, new default 64: the shared gate/up's blocks take
# the batch rounded up to 16, 32 or 64 tokens) in the code that keeps it (the K parts of runs 1-3 removed; kernels
# cubin-identical to 88680d4), against HT 0 (v34's 16-token blocks up to 64) and HT 128, then the committed run of the
# commit $1 (bench/runs/v32-run5.sh: the full test_moe_gpu, the engine tests, the peer, three bench processes). Why:
# run 3's N1 (the same blocks in the K-parts build) read 64 -2.1 % (queued -2.6 %): the shared gate/up on 32 SMs
# instead of all 132 leaves the router the rest (lists 27.7 -> 20.2 us, the fused launch from 35.9 -> 25.5). Prediction:
# HT 64 against 0: 64 and 48 -1..2.5 %, 24-32 -0..1 %, skewed 33-64 -1..3 %; HT 128 at 96-128 equal, skewed 128
# +2..4 %. Carry .debs.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "v35"
grep -c "bit-identical" $OUT/t-new-v35.log
B=$(variant) H0=$(variant HT=0) H1=$(variant HT=128)
timeout 200 $N/sluice-bench moe --batches 24,32,48,64,96,128 --reps 8 --variants "$B/$H0/$H1/$H0/$B" > $OUT/b-ht-1.log 2>&1
echo "== ht/1 (B H0 H128 H0 B):$(row $OUT/b-ht-1.log)"
bash bench/runs/v32-run5.sh "$1"
