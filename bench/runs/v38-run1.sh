#!/usr/bin/env bash
# v38 run 1 (bench/NOTES.md v38 (1)): GW's next forms. v37 (1) timed its gate/up alone at 85 us at 512 (~40 % of the
# tensor rate) with one wgmma group per step, waited for before the next step's barrier. GW 2 (FORM 1): one group left
# in flight across steps (wait_group 1; copies 2 steps ahead instead of 3); GW 3 (FORM 2): the same with one m64n256k16
# per 16 inputs, so a warpgroup's token rows are read from shared memory once per step (v37's step moves ~144 bytes of
# operands and copies through shared memory per cycle at the tensor rate, past its ~128). Prediction: alone (FK 0) the
# gate/up at 512 85 -> 65-75 us with GW 2, 50-60 with GW 3; the down 35 -> 25-30; in the layer 256 -0.3..1 %, 512
# -0.5..1.5 % (what GW buys is SM time beside the router and the routed launches). The new test cases first, then
# B / GW2 / GW3 / B FK0 / GW2 FK0 / GW3 FK0 / B / GW3 at 128-512 with stage traces, one process.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "wgmma GEMMs" "bf16 GEMMs"
grep -h "the shared expert alone" $OUT/t-new-wgmma.log | awk '{print $NF}' | tr '\n' ' '; echo
B=$(variant) W2=$(variant GW=2) W3=$(variant GW=3) B0=$(variant FK=0) W20=$(variant GW=2 FK=0) W30=$(variant GW=3 FK=0)
timeout 330 $N/sluice-bench moe --batches 128,256,512 --reps 8 --stages --variants "$B/$W2/$W3/$B0/$W20/$W30/$B/$W3" > $OUT/b-gw-1.log 2>&1
echo "== gw/1 (B GW2 GW3 B-FK0 GW2-FK0 GW3-FK0 B GW3):$(row $OUT/b-gw-1.log)"
grep -E "stages (128|256|512) (random|skewed)|^variant" $OUT/b-gw-1.log | sed -E 's/^variant:.*/variant/' | cut -c1-330
