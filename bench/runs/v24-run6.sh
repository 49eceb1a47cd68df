#!/usr/bin/env bash
# v24 run 6 (bench/NOTES.md v24 (7)): WG, the 2-tile gate/up's tensor work as wgmma (MOE_WG2=1). One device call
# (the session's last ~300 s of device time), nothing to carry; files in $OUT.
# (1) the 2-tile gate/up alone at 512 under ncu, base and wg; (2) test_moe_gpu on the wg build, its first 45 s only
# (the T = 64 / 257 2-tile cases come first; the full run takes ~170 s); (3) bench 512, one round, if time is left.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: wg:-DMOE_WG2=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__bytes_read.sum"
for n in base wg; do
  timeout 40 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== $n: $(grep -E "dram__|gpu__time|inst_issued" $OUT/ncu-$n.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
timeout 45 /tmp/moe-ab/wg/test_moe_gpu > $OUT/test-wg.log 2>&1
grep -E "T=(64|257)" $OUT/test-wg.log | head -8; echo "FAIL lines: $(grep -c FAIL $OUT/test-wg.log)"
for n in base wg; do timeout 40 /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 8 --routing random > $OUT/bench-$n.log 2>&1; done
for n in base wg; do echo "$n: $(grep -E '^ +512 +random' $OUT/bench-$n.log)"; done
