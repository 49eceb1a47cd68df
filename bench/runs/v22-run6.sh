#!/usr/bin/env bash
# Ran in session 13. MOE_GU2_RM and MOE_DN2_RM no longer exist (removed after session 14's runs, bench/NOTES.md v23 (6)),
# so rerun it from the last commit that has them: git worktree add /tmp/v22-run6 0caa025
# v22 run 6 (bench/NOTES.md v22 (8)), session 13. One device call (~2 min).
# More weight rows per activation fragment in the 2-tile kernels: gate/up with two 16-row tiles per warp
# (MOE_GU2_RM=2: 128-row items, ring depth 2, XH) and down with four (MOE_DN2_RM=4: 256-row items, ring depth 2,
# XH), against base. These A/B builds trap on a shared-expert item in a 2-tile launch (the bench's default
# launches make none), so no test here. Batches 64-512 random and skewed, two rounds, stage traces; ncu of
# g2d4's 2-tile gate/up and down at 512 alone.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run6.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: g2:-DMOE_GU2_RM=2 g2d4:-DMOE_GU2_RM=2,-DMOE_DN2_RM=4" \
  TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 64,128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in g2 g2d4; do echo "== $n ptxas 2-tile:"; grep -A2 "_Z9k_gate_upILi0ELi2E\|_Z6k_downILi0ELi2E" /tmp/moe-ab/$n/moe_expert.ptxas | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | paste - - ; done
for r in 1 2; do for n in base g2 g2d4; do
  echo "== stages $n round $r"; grep -E "stages (256|512) (random|skewed)" $OUT/bench-$n-$r.log | sed -E 's/ sh-gu.*//'
done; done
M="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
  /tmp/moe-ab/g2d4/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512-g2d4.txt 2>&1
echo "== ncu g2d4 512 (2-tile gate/up, then 2-tile down)"
grep -E "^  [a-z]|Duration|DRAM Throughput|L1/TEX Hit|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps|Warp Cycles Per Issued|No Eligible" $OUT/ncu-512-g2d4.txt | cut -c1-120
cd $OUT && tar czf run6.tgz --remove-files bench-*.log ncu-512-g2d4.txt
