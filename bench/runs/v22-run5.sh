#!/usr/bin/env bash
# Ran on the tree of cadd020. MOE_NT2_NOSH no longer exists (removed after session 13's runs: the kept form is the default,
# the others were measured and closed), so rerun it from that commit: git worktree add /tmp/v22-run5 cadd020
# v22 run 5 (bench/NOTES.md v22 (7)), session 13. One device call (~3 min).
# The 2-tile kernels at 5 blocks per SM: without the shared expert's FP8 branch (MOE_NT2_NOSH=1: these A/B
# builds trap on a shared item in a 2-tile launch, which the bench's default launches never make) and with one
# activation buffer (XH), ring depth 4 (x5) or 2 (x5d2), against base (4 blocks, 128 registers). Batches 64-512
# random and skewed, two rounds, stage traces; ncu of x5's 2-tile gate/up and down at 512 alone.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run5.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: x5:-DMOE_NT2_NOSH=1,-DMOE_MINB2=5,-DMOE_XH2=1 x5d2:-DMOE_NT2_NOSH=1,-DMOE_GU_D2=2,-DMOE_MINB2=5,-DMOE_XH2=1" \
  TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 64,128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in x5 x5d2; do echo "== $n ptxas 2-tile:"; grep -A2 "_Z9k_gate_upILi0ELi2E\|_Z6k_downILi0ELi2E" /tmp/moe-ab/$n/moe_expert.ptxas | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | paste - - ; done
for r in 1 2; do for n in base x5 x5d2; do
  echo "== stages $n round $r"; grep -E "stages (256|512) (random|skewed)" $OUT/bench-$n-$r.log | sed -E 's/ sh-gu.*//'
done; done
M="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
  /tmp/moe-ab/x5/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512-x5.txt 2>&1
echo "== ncu x5 512 (2-tile gate/up, then 2-tile down)"
grep -E "^  [a-z]|Duration|DRAM Throughput|L1/TEX Hit|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps|Block Limit Reg|Warp Cycles Per Issued|No Eligible" $OUT/ncu-512-x5.txt | cut -c1-120
cd $OUT && tar czf run5.tgz --remove-files bench-*.log ncu-512-x5.txt
