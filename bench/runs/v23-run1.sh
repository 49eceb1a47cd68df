#!/usr/bin/env bash
# v23 run 1 (bench/NOTES.md v22 weak spots), prepared in session 13, not yet run. One device call (~1.5 min).
# Since c99b3d6 every default 2-tile launch takes the form without the FP8 branch (SH 0) and with the one-LOP3 scale
# factors; the 2-tile variants runs 5-6 measured before that (5 blocks per SM with XH; two / four row tiles per warp)
# get both now. Re-measure them against base: x5 (-DMOE_MINB2=5 -DMOE_XH2=1), g2d4 (-DMOE_GU2_RM=2
# -DMOE_DN2_RM=4), batches 128-512 random and skewed, two rounds, then ncu of the best at 512 (issue rate, DRAM).
# These A/B builds trap on a shared item in a 2-tile launch (GU2_RM / DN2_RM), so no test here.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run1.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: x5:-DMOE_MINB2=5,-DMOE_XH2=1 g2d4:-DMOE_GU2_RM=2,-DMOE_DN2_RM=4" \
  TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in x5 g2d4; do echo "== $n ptxas 2-tile:"; grep -A2 "_Z9k_gate_upILi0ELi2ELi0E\|_Z6k_downILi0ELi2ELi[124]ELi0E" /tmp/moe-ab/$n/moe_expert.ptxas | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | paste - - ; done
M="--section SpeedOfLight --section SchedulerStats --section Occupancy --metrics smsp__inst_executed.sum,dram__bytes_read.sum"
for n in x5 g2d4; do
  timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512-$n.txt 2>&1
  echo "== ncu $n 512"; grep -E "^  [a-z]|Duration|DRAM Throughput|Issue Slots Busy|Achieved Active Warps|inst_executed|dram__bytes" $OUT/ncu-512-$n.txt | cut -c1-120
done
cd $OUT && tar czf run1.tgz --remove-files bench-*.log ncu-512-*.txt
