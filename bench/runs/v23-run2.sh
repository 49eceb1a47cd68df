#!/usr/bin/env bash
# Ran on the tree of 7e00455. MOE_XH2 no longer exists (removed after session 14's runs, bench/NOTES.md v23 (6)),
# so rerun it from the last commit that has it: git worktree add /tmp/v23-run2 0caa025
# v23 run 2 (bench/NOTES.md v23 (3)), session 14. One device call (~4 min).
# Run 1's SASS of the 2-tile gate/up is one FP4 word at a time: decode, 4 HMUL2, 2 HMMA, with the same 4-8
# registers reused for every word (127 of 128 registers used), and "wait" (fixed-latency dependency) is its top
# stall, on the HMMAs first. Give ptxas room to overlap words: the 2-tile kernels compiled for 3 blocks per SM
# (m3: 168 registers allowed; ptxas takes 142-148), the same with one activation buffer (m3x: 112-114), and 2
# blocks (m2: 144-150), against base (4 blocks, 127-128). Batches 128-512, random and skewed, two rounds;
# test_moe_gpu on m3; each variant's hot-loop opcode sequence (cuobjdump) and its 2-tile gate/up at 512 under ncu.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run2.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: m3:-DMOE_MINB2=3 m3x:-DMOE_MINB2=3,-DMOE_XH2=1 m2:-DMOE_MINB2=2" \
  TESTS="m3" TEST_TIMEOUT=200 ROUNDS=2 BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
F=_Z9k_gate_upILi0ELi2ELi0EEv15moe_expert_argsPKtPKiS4_PKfPt
for n in base m3 m3x m2; do
  cuobjdump -sass -fun $F /tmp/moe-ab/$n/moe_expert.o > $OUT/sass-$n.txt 2>&1
  echo "== $n: 2-tile gate/up SASS, 90 opcodes from the first HMMA (H = HMMA, M = HMUL2, L = LOP3, S = SHF, I = IMAD, d = LDS, g = LDG)"
  grep -oE '^ +/\*[0-9a-f]+\*/ +(@!?P[0-9T] +)?[A-Z0-9_]+' $OUT/sass-$n.txt | awk '{print $NF}'
    awk '/HMMA/{f=1} f' | head -90 | sed 's/HMMA/H/;s/HMUL2/M/;s/LOP3/L/;s/^SHF$/S/;s/^IMAD$/I/;s/^LDS$/d/;s/^LDG$/g/' | tr '\n' ' '; echo
done
M="regex:smsp__average_warps_issue_stalled_(wait|math_pipe_throttle|long_scoreboard|dispatch_stall|short_scoreboard|selected|not_selected)_per_issue_active.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,sm__warps_active.avg.per_cycle_active"
for n in base m3 m3x; do
  timeout 100 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E|_Z6k_downILi0ELi2ELi2ELi0E" -c 2 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== ncu $n 512 (2-tile gate/up, then down)"
  grep -E "gpu__time_duration|dram__throughput|inst_issued|warps_active|issue_stalled" $OUT/ncu-$n.txt | awk '{print $1, $NF}' | \
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
cd $OUT && tar czf run2.tgz --remove-files bench-*.log ncu-*.txt test-*.log sass-*.txt
