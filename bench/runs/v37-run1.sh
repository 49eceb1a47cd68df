#!/usr/bin/env bash
# v37 run 1 (bench/NOTES.md v37 (1)): GW, the shared expert's two bf16 GEMMs on wgmma (k_shared_gemm_wg: 128 tokens x
# 256 outputs per block, two warpgroups, both operands from 128-byte-swizzled shared memory; folded power-of-two scales).
# v36 (3): SG's 128 x 128 mma.sync tiles are L2-bound (gate/up 72-84 us at 512 on 128 SMs, ~240 TFLOP/s). Prediction:
# alone (FK 0) the gate/up at 512 35-45 us on 64 SMs (tensor-bound per SM at ~600 TFLOP/s over the blocks it has), the
# down 12-20; in the layer 512 -1..3 % (the router keeps ~68 SMs beside the gate/up), 256 with SG on wgmma -1..4 %
# against k_shared_fp8, 128 within 1 %. The v37 test cases first (and SG's), then B / GW / GW SG256 / GW FK0 / B /
# GW SG256 / GW SG128 at 128-512 with stage traces.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "wgmma GEMMs" "bf16 GEMMs"
grep -h "the shared expert alone" $OUT/t-new-wgmma.log | awk '{print $NF}' | tr '\n' ' '; echo
cuobjdump -sass $N/sluice-bench 2>/dev/null | awk '/Function : /{f=$3} /HGMMA/{c[f]++} /WARPGROUP/{w[f]++} END{for(k in c) print "sass", k, "HGMMA", c[k], "WARPGROUP", w[k]}'
B=$(variant) W=$(variant GW=1) W0=$(variant GW=1 FK=0) W256=$(variant GW=1 SG=256) W128=$(variant GW=1 SG=128)
timeout 330 $N/sluice-bench moe --batches 128,256,512 --reps 8 --stages --variants "$B/$W/$W256/$W0/$B/$W256/$W128" > $OUT/b-gw-1.log 2>&1
echo "== gw/1 (B GW GW-SG256 GW-FK0 B GW-SG256 GW-SG128):$(row $OUT/b-gw-1.log)"
grep -E "stages (128|256|512) (random|skewed)|^variant" $OUT/b-gw-1.log | sed -E 's/^variant:.*/variant/' | cut -c1-330
