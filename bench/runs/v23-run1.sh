#!/usr/bin/env bash
# Ran on the tree of 0a45014. MOE_XH2, MOE_GU2_RM and MOE_DN2_RM no longer exist (removed after session 14's runs,
# bench/NOTES.md v23 (6)), so rerun it from the last commit that has them: git worktree add /tmp/v23-run1 0caa025
# v23 run 1 (bench/NOTES.md v23 (1)-(2)), session 14. One device call (~5 min).
# (1) Since c99b3d6 every default 2-tile launch takes the form without the FP8 branch (SH 0) and with the one-LOP3
# scale factors; the 2-tile variants runs 5-6 measured before that (5 blocks per SM with XH; two / four row tiles per
# warp) get both now. Re-measure them against base: x5 (-DMOE_MINB2=5 -DMOE_XH2=1), g2d4 (-DMOE_GU2_RM=2
# -DMOE_DN2_RM=4), batches 128-512 random and skewed, two rounds. test_moe_gpu on base (the tree of 0a45014, whose
# last two commits were not run on the H200); the A/B builds trap on a shared item in a 2-tile launch, so not on them.
# (2) What bounds the 2-tile body at ~2.35 instructions issued per cycle per SM (v22 (8)): base's 2-tile gate/up at
# 512 and the fused 1-tile kernel at 64, each alone under ncu with every pipe's utilisation, the stall reasons per
# issue and the source counters (per-SASS-instruction stall samples, exported as CSV for bench/ncu_stalls.py).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run1.tgz, ncu-*.csv).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: x5:-DMOE_MINB2=5,-DMOE_XH2=1 g2d4:-DMOE_GU2_RM=2,-DMOE_DN2_RM=4" \
  TESTS="base" TEST_TIMEOUT=200 ROUNDS=2 BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in base x5 g2d4; do echo "== $n ptxas 2-tile:"; grep -A2 "_Z9k_gate_upILi0ELi2ELi0E\|_Z6k_downILi0ELi2ELi[124]ELi0E" /tmp/moe-ab/$n/moe_expert.ptxas | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | paste - - ; done
for n in base x5 g2d4; do echo "== stages $n 512"; grep -E "stages (256|512) (random|skewed)" $OUT/bench-$n-1.log | sed -E 's/ sh-gu.*//'; done
M="regex:sm__pipe_.*_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second"
for spec in "512:_Z9k_gate_upILi0ELi2ELi0E" "64:_Z10k_experts1ILi0ELi2ELi0E"; do
  b=${spec%%:*} k=${spec#*:}
  timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"$k" -c 1 --metrics "$M" \
    --section SourceCounters --section WarpStateStats --section InstructionStats -o $OUT/prof-$b \
    /tmp/moe-ab/base/sluice-bench moe --batches $b --reps 1 --routing random > $OUT/ncu-$b.log 2>&1
  ncu -i $OUT/prof-$b.ncu-rep --print-details all > $OUT/ncu-$b.txt 2>&1
  ncu -i $OUT/prof-$b.ncu-rep --page source --csv --print-source sass > $OUT/ncu-$b.csv 2>&1
  rm -f $OUT/prof-$b.ncu-rep
  echo "== ncu base $b ($k): $(wc -l < $OUT/ncu-$b.csv) csv lines"
  grep -E "gpu__time_duration|dram__bytes_read|smsp__inst_executed.sum|inst_issued|cycles_elapsed.avg.per_second|smsp__cycles_active" $OUT/ncu-$b.txt | awk '{print "  ",$1,$(NF-1),$NF}'
  grep -E "sm__pipe_.*cycles_active" $OUT/ncu-$b.txt | awk '{print $NF, $1}' | sort -rn | head -12 | sed 's/sm__pipe_//; s/_cycles_active.avg.pct_of_peak_sustained_active//' | awk '{print "   pipe",$0}'
  grep -E "issue_stalled" $OUT/ncu-$b.txt | awk '{print $NF, $1}' | sort -rn | head -10 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print "   stall",$0}'
  python3 bench/ncu_stalls.py $OUT/ncu-$b.csv 2>&1 | head -45
done
cd $OUT && tar czf run1.tgz --remove-files bench-*.log ncu-*.txt ncu-*.log test-*.log
