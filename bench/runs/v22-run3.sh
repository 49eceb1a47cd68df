#!/usr/bin/env bash
# v22 run 3 (bench/NOTES.md v22 (5)), session 13. One device call (~6 min).
# The 2-tile kernels with their activation rows staged once per block in shared memory (XS: bulk copies on
# mbarriers, MOE_XS2=1, the new default) against base (-DMOE_XS2=0, each warp reading them from L1/L2):
# test_moe_gpu on xs, batches 64-512 random and skewed, two rounds, stage traces; then ncu of xs's 2-tile
# gate/up and down at 512 alone (against run 1's base: DRAM 68 / 59 %, L2 81 / 72 %, L1 hit 43 / 33 %).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run3.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="xs: base:-DMOE_XS2=0" TESTS="xs" TEST_TIMEOUT=300 ROUNDS=2 BENCH_ARGS="--batches 64,128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
grep -E "FAIL|passed|rel_l2=.*(T=257|T=33 )" $OUT/test-xs.log | head -20
for r in 1 2; do for n in xs base; do
  echo "== stages $n round $r"; grep -E "stages (128|256|512) (random|skewed)" $OUT/bench-$n-$r.log | sed -E 's/ sh-gu.*//'
done; done
M="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
  /tmp/moe-ab/xs/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512-xs.txt 2>&1
echo "== ncu xs 512 (2-tile gate/up, then 2-tile down)"
grep -E "^  [a-z]|Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps|Block Limit|Warp Cycles Per Issued|No Eligible" $OUT/ncu-512-xs.txt | cut -c1-120
cd $OUT && tar czf run3.tgz --remove-files bench-*.log test-*.log ncu-512-xs.txt
