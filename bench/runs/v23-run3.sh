#!/usr/bin/env bash
# Ran on the tree of 48a1fb0. MOE_XPF2 and MOE_CARVEOUT_NT2 no longer exist (removed after session 14's runs,
# bench/NOTES.md v23 (6)), so rerun it from the last commit that has them: git worktree add /tmp/v23-run3 0caa025
# v23 run 3 (bench/NOTES.md v23 (4)), session 14. One device call (~5 min).
# Runs 1-2: the 2-tile body's long-scoreboard stalls (12.5 % of its samples: the activation fragments, loaded into
# registers one chunk ahead from L2, L1 hit 43 %) grow as soon as its warps compute faster (m3: 0.66 -> 1.56 per
# issue). The activation rows of chunk c + PF asked of L1 at chunk c (prefetch.global.L1, MOE_XPF2; no registers),
# with the 2-tile kernels' carveout (MOE_CARVEOUT_NT2) lowered so L1 can hold them (100 %: 28 KB of L1; 80: 60 KB;
# 60, with 3 blocks per SM: 92 KB). pf2 (PF 2, 100 %), pf2c (2, 80), pf3c (3, 80), pf2m3 (2, 60, 3 blocks per SM)
# against base. Batches 128-512 random and skewed, two rounds; test_moe_gpu on pf2c and pf2m3; ncu at 512.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run3.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: pf2:-DMOE_XPF2=2 pf2c:-DMOE_XPF2=2,-DMOE_CARVEOUT_NT2=80 pf3c:-DMOE_XPF2=3,-DMOE_CARVEOUT_NT2=80 pf2m3:-DMOE_XPF2=2,-DMOE_CARVEOUT_NT2=60,-DMOE_MINB2=3" \
  TESTS="pf2c pf2m3" TEST_TIMEOUT=200 ROUNDS=2 BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
M="regex:smsp__average_warps_issue_stalled_(wait|long_scoreboard|math_pipe_throttle)_per_issue_active.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,sm__warps_active.avg.per_cycle_active,l1tex__t_sector_hit_rate.pct"
for n in base pf2c pf3c pf2m3; do
  timeout 100 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E|_Z6k_downILi0ELi2ELi2ELi0E" -c 2 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== ncu $n 512 (2-tile gate/up, then down)"
  grep -E "gpu__time_duration|dram__throughput|inst_issued|warps_active|issue_stalled|hit_rate" $OUT/ncu-$n.txt | awk '{print $1, $NF}' | \
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ' ' | sed 's/gpu__time/\n  gpu__time/g'; echo
done
cd $OUT && tar czf run3.tgz --remove-files bench-*.log ncu-*.txt test-*.log
