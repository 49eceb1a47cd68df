#!/usr/bin/env bash
# v38 run 3 (bench/NOTES.md v38 (3)): GWT (moe_shared_gemms' wg 4: GW's tiles by TMA from a producer warp, mbarriers,
# one m64n256k16 group in flight). Run 2's ncu: GW's step is its copies' instruction stream (295 warp-instructions per
# warp and step at one per ~7 cycles). Prediction: alone (FK 0) the gate/up at 512 82 -> 40-50 us (tensor-bound on its 64
# SMs at ~75 % of the rate), the down 34 -> 18-25; in the layer 256 and 512 -0.5..1.5 % (SM time beside the router and
# the routed launches). GWT's test cases first (alone, so a hang cannot take the others), then GW's, then B / GWT /
# GWT FK0 / B FK0 / B / GWT / GWT SG128 at 128-512 with stage traces in one process, then ncu of GWT's gate/up alone.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "by TMA"
ok=$?; grep -q "all passed" $OUT/t-new-by.log && ok=1 || ok=0
[ $ok = 1 ] || { tail -20 $OUT/t-new-by.log; exit 1; }
tests $N/test_moe_gpu new "wgmma GEMMs"
grep -h "the shared expert alone" $OUT/t-new-by.log | awk '{print $NF}' | tr '\n' ' '; echo
B=$(variant) T=$(variant GW=4) T0=$(variant GW=4 FK=0) B0=$(variant FK=0) TS=$(variant GW=4 SG=128)
timeout 330 $N/sluice-bench moe --batches 128,256,512 --reps 8 --stages --variants "$B/$T/$T0/$B0/$B/$T/$TS" > $OUT/b-gwt-1.log 2>&1
echo "== gwt/1 (B GWT GWT-FK0 B-FK0 B GWT GWT-SG128):$(row $OUT/b-gwt-1.log)"
grep -E "stages (128|256|512) (random|skewed)|^variant" $OUT/b-gwt-1.log | sed -E 's/^variant:.*/variant/' | cut -c1-330
M="gpu__time_duration.sum,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,dram__bytes_read.sum.per_second,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
for k in 1 0; do
  timeout 120 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z17k_shared_gemm_tmaILi$k" -c 1 --metrics "$M" \
    $N/sluice-bench moe --batches 512 --reps 1 --routing random --variants "$T0" > $OUT/ncu-gwt$k.txt 2>&1
  echo "== ncu GWT (GU $k) at 512 alone"
  grep -E "duration|xbar2l1tex|dram__bytes|inst_executed|cycles_elapsed" $OUT/ncu-gwt$k.txt | awk '{print "  ",$1,$(NF-1),$NF}'
  grep -E "issue_stalled" $OUT/ncu-gwt$k.txt | awk '{print $NF, $1}' | sort -rn | head -4 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print "  ",$0}'
done
