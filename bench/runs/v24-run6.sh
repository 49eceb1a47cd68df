#!/usr/bin/env bash
# v24 run 6 (bench/NOTES.md v24 (7)): WG, the 2-tile gate/up's tensor work as wgmma (MOE_WG2=1). One device call
# (~3.5 min: the session's last 340 s of device time), nothing to carry; files in $OUT (run6.tgz).
# (1) test_moe_gpu on the wg build, its first 60 s only (the T = 64 / 257 2-tile cases come first; the full run
#     takes ~170 s); (2) the 2-tile gate/up alone at 512 under ncu, base and wg; (3) bench 256 and 512, one round.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: wg:-DMOE_WG2=1" TESTS="wg" TEST_TIMEOUT=60 ROUNDS=1 BENCH_ARGS="--batches 256,512 --reps 8" \
  bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
grep -E "T=(64|257)" $OUT/test-wg.log | head -12; grep -c FAIL $OUT/test-wg.log
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__bytes_read.sum"
for n in base wg; do
  timeout 40 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== $n: $(grep -E "dram__|gpu__time|inst_issued" $OUT/ncu-$n.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
cd $OUT && tar czf run6.tgz --remove-files ncu-*.txt test-*.log bench-*.log
