#!/usr/bin/env bash
# Ran on the tree of 393009a. MOE_TOPK_CARRY no longer exists (removed after session 13's runs: the kept form is the default,
# the others were measured and closed), so rerun it from that commit: git worktree add /tmp/v22-run1 393009a
# v22 run 1 (bench/NOTES.md v22 (1)-(3)), session 13. One device call (~6 min).
# (1) The 2-tile kernels with one activation buffer (fp4_rowtile XH, MOE_XH2) at 4 blocks per SM (xh4) and
# at 5 (xh5: ptxas spills ~300 B per thread to fit 96 registers) against base (two buffers, 4 blocks per SM).
# (2) The router top-k's winner score carried through the per-lane tree (MOE_TOPK_CARRY 1, in base, xh4 and
# xh5) against the 8-FFMA select after the reductions (old).
# (3) ncu of base's 2-tile gate/up and down at batch 512 (random), each alone: what bounds the 2-tile body.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run1.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:-DMOE_XH2=0,-DMOE_MINB2=4 old:-DMOE_XH2=0,-DMOE_MINB2=4,-DMOE_TOPK_CARRY=0 xh4:-DMOE_XH2=1,-DMOE_MINB2=4 xh5:-DMOE_XH2=1,-DMOE_MINB2=5" \
  TESTS="none" ROUNDS=2 BENCH_ARGS="--batches 1,8,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in base xh5; do echo "== $n ptxas k_gate_up/k_down NT 2:"; grep -A2 "_Z9k_gate_upILi0ELi2E\|_Z6k_downILi0ELi2E" /tmp/moe-ab/$n/moe_expert.ptxas | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | paste - - ; done
for r in 1 2; do for n in base old xh4 xh5; do
  echo "== stages $n round $r"; grep -E "stages (1|8|256|512) (random|skewed)" $OUT/bench-$n-$r.log | sed -E 's/ sh-gu.*//'
done; done
M="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2E|_Z6k_downILi0ELi2E" -c 2 $M \
  /tmp/moe-ab/base/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-512.txt 2>&1
echo "== ncu base 512 (2-tile gate/up, then 2-tile down)"
grep -E "^  _Z|Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|Issued Warp|Eligible Warps|Active Warps Per|No Eligible|Achieved Occupancy|Registers Per|Block Limit|Stall|Executed Ipc A|Mem Busy|Max Bandwidth|Mem Pipes" $OUT/ncu-512.txt | head -80
grep -iE "warp cycles per issued|stall|pipe" $OUT/ncu-512.txt | head -30
cd $OUT && tar czf run1.tgz --remove-files bench-*.log ncu-512.txt
