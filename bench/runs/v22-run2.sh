#!/usr/bin/env bash
# Ran on the tree of 306d35b. MOE_CARVEOUT_NT2 no longer exists (removed after session 13's runs: the kept form is the default,
# the others were measured and closed), so rerun it from that commit: git worktree add /tmp/v22-run2 306d35b
# v22 run 2 (bench/NOTES.md v22 (4)), session 13. One device call (~2 min).
# The 2-tile kernels at the 196 KB shared-memory configuration (MOE_CARVEOUT_NT2=80: 60 KB of L1 instead of 28)
# against base (every kernel at 100 %), batches 128-512, two rounds; then ncu of c80's 2-tile gate/up and down
# at 512 (L1 hit rate, L2 and DRAM throughput against run 1's base).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run2.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="c80:-DMOE_CARVEOUT_NT2=80 base:" TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for r in 1 2; do for n in base c80; do
  echo "== stages $n round $r"; grep -E "stages (128|256|512) (random|skewed)" $OUT/bench-$n-$r.log | sed -E 's/ sh-gu.*//'
done; done
M="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
  /tmp/moe-ab/c80/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512-c80.txt 2>&1
echo "== ncu c80 512 (2-tile gate/up, then 2-tile down)"
grep -E "^  [a-z]|Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps|Block Limit Shared|Driver Shared|Dynamic Shared|Shared Memory Configuration" $OUT/ncu-512-c80.txt | cut -c1-120
cd $OUT && tar czf run2.tgz --remove-files bench-*.log ncu-512-c80.txt
