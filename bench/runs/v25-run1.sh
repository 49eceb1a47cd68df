#!/usr/bin/env bash
# v25 run 1 (prepared in session 15, not yet run; bench/NOTES.md v24 (8)): WG with more wgmma groups in flight.
# v24 run 6: WG (one group in flight) was correct on every 2-tile case its 45 s reached and 7 % slower than base in
# the 2-tile gate/up alone at 512 (800 against 745 us under ncu). One device call (~4 min), nothing to carry.
# (1) the 2-tile gate/up alone at 512 under ncu: base, wg (WG_INFL 1), wg2 (2; ptxas: 122 registers, no spills;
#     3 and 4 spill at the 128-register cap); (2) test_moe_gpu on wg2, the full run (the v15 "tiles handed out in both launches"
#     cases trap in WG builds by design: WG needs the static walk); (3) bench 256-512, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: wg:-DMOE_WG2=1 wg2:-DMOE_WG2=1,-DWG_INFL=2" TESTS="wg2" TEST_TIMEOUT=200 \
  ROUNDS=2 BENCH_ARGS="--batches 256,512 --reps 8" bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
grep -B1 FAIL $OUT/test-wg2.log | head -6
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__bytes_read.sum"
for n in base wg wg2; do
  timeout 40 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== $n: $(grep -E "dram__|gpu__time|inst_issued" $OUT/ncu-$n.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
cd $OUT && tar czf run1.tgz --remove-files ncu-*.txt test-*.log bench-*.log
