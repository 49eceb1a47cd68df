#!/usr/bin/env bash
# v36 run 2 (bench/NOTES.md v36 (2)): SG, the shared expert as two bf16 GEMMs (moe_shared_gemm.cuh; weights dequantised
# once at load time) instead of k_shared_fp8's 16-64-token blocks. Run 1: without the shared expert the layer is ~110 us
# shorter at 512 (~25 MB of its bytes are ~5 us); serially (FK 0) its two launches take ~145 us of the whole GPU at 512
# and ~95 at 256, ~180 / 135 TFLOP/s. Prediction: the GEMMs at 128-token tiles take 30-45 us serially at 512 (FK 0), and
# the rows move by what that saves of the SMs' time: 512 -4..7 %, 256 -4..8 %, 128 -1..3 %, 64 within 1 % (the shared
# expert there is 8 GFLOP). The v36 test cases first (the shared expert's rows checked alone too), then B / G64 (SG 64) /
# G64 FK 0 / B / G64 at 64-512 with stage traces.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "bf16 GEMMs" "alone"
grep -h "shared expert alone" $OUT/t-new-bf16.log | sort | uniq -c | head -3; grep -h "shared expert alone" $OUT/t-new-bf16.log | awk '{print $NF}' | tr '\n' ' '; echo
B=$(variant) G=$(variant SG=64) G0=$(variant SG=64 FK=0)
timeout 300 $N/sluice-bench moe --batches 64,128,256,512 --reps 8 --stages --variants "$B/$G/$G0/$B/$G" > $OUT/b-sg-1.log 2>&1
echo "== sg/1 (B G64 G64FK0 B G64):$(row $OUT/b-sg-1.log)"
grep -E "stages (128|256|512) random|^variant" $OUT/b-sg-1.log | sed -E 's/^variant:.*/variant/' | cut -c1-330
