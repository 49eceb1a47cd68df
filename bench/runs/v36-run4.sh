#!/usr/bin/env bash
# v36 run 4 (bench/NOTES.md v36 (4)): SG with FOLD where the block scales are powers of two (moe_cuda_layer.sh_pow2; the
# bench's and DeepSeek's ue8m0 checkpoints: exact, no partials, run 2's form) and run 3's partials otherwise. The v36
# cases (both forms), then B / G512 (SG 512) / B / G512 / G256 at 256 and 512. Prediction (run 2's readings with the
# fold): 512 -1.5..3 %, skewed 512 -5..9 %, 256 within 1 %.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "bf16 GEMMs" "alone"
grep -h "shared expert alone" $OUT/t-new-bf16.log $OUT/t-new-alone.log | awk '{print $NF}' | tr '\n' ' '; echo
B=$(variant) G5=$(variant SG=512) G2=$(variant SG=256)
timeout 200 $N/sluice-bench moe --batches 256,512 --reps 12 --variants "$B/$G5/$B/$G5/$G2" > $OUT/b-sg-4.log 2>&1
echo "== sg/4 (B G512 B G512 G256):$(row $OUT/b-sg-4.log)"
