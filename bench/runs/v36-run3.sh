#!/usr/bin/env bash
# v36 run 3 (bench/NOTES.md v36 (3)): run 2's SG with the block scales on fp32 partials (k_shared_fp8's numerics: the
# folded bf16 weights gave 6.5e-3 on the shared expert alone where the scales are not powers of two) and more steps in
# flight: run 2's GEMMs took 1.1 us per 64-input step (gate/up 72 us at 512 with FK 0, ~240 TFLOP/s: loads in flight,
# not the tensor pipe). Builds s4 (GM_STAGES 4, 128 KB, the default) and s6 (192 KB); the v36 cases on s4; then per
# build B / G128 (SG 128) / G128 FK 0 / B / G128 at 128-512 with stage traces. Prediction: s4's gate/up at 512 (FK 0)
# 72 -> ~50 us, s6 ~35; the rows 512 -3..6 %, 256 -1..4 %, 128 within 1 %.
source bench/runs/lib.sh
VARIANTS="s4: s6:-DGM_STAGES=6" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
S4=/tmp/moe-ab/s4 S6=/tmp/moe-ab/s6
tests $S4/test_moe_gpu s4 "bf16 GEMMs" "alone"
grep -h "shared expert alone" $OUT/t-s4-bf16.log $OUT/t-s4-alone.log | awk '{print $NF}' | tr '\n' ' '; echo
SB=$S4/sluice-bench
B=$(variant) G=$(variant SG=128) G0=$(variant SG=128 FK=0)
for b in s4 s6; do
  timeout 200 /tmp/moe-ab/$b/sluice-bench moe --batches 128,256,512 --reps 8 --stages --variants "$B/$G/$G0/$B/$G" > $OUT/b-$b.log 2>&1
  echo "== $b (B G128 G128FK0 B G128):$(row $OUT/b-$b.log)"
  grep -E "stages (256|512) random|^variant" $OUT/b-$b.log | sed -E 's/^variant:.*/variant/' | grep -oE "variant|stages [0-9]+|sh-gu [0-9.-]+|sh-dn [0-9.-]+|lists [0-9.-]+|combine [0-9.-]+" | tr '\n' ' '; echo
done
