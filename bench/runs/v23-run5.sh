#!/usr/bin/env bash
# v23 run 5 (bench/NOTES.md v23 (7)-(8)), session 14. One device call (~6 min), the session's last.
# (1) test_moe_gpu on the tree after the clean-up of v23 (6) (default PTX byte-identical; the host side changed).
# (2) Timing probes of the 2-tile body (MOE_PROBE, results wrong, no test): its gate/up alone at 512 under ncu with
# one HMMA per word (p1), no scale multiply (p2), no FP4 decode (p4; ptxas spills 52 B there), neither (p6), and
# all three (p7), against base: what each stage of the body costs, so what wgmma (one tensor instruction per word)
# could gain at most.
# (3) Runtime launch variants at 256-512 random (one process, in turn): the shared expert forked before the
# router (FK 1, default), after it (2) or after the logits (3), and the 2-tile launches first (NO 1).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run5.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: p1:-DMOE_PROBE=1 p2:-DMOE_PROBE=2 p4:-DMOE_PROBE=4 p6:-DMOE_PROBE=6 p7:-DMOE_PROBE=7" \
  TESTS="base" TEST_TIMEOUT=150 ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -E "^test|did not build"
M="smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for n in base p1 p2 p4 p6 p7; do
  timeout 40 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== $n: $(grep -E "gpu__time_duration|dram__throughput|inst_issued|inst_executed" $OUT/ncu-$n.txt | awk '{print $1, $NF}' | tr '\n' ' ')"
done
V="1,16,33,4,16,0,32,0,16,1/1,16,33,4,16,0,32,0,16,2/1,16,33,4,16,0,32,0,16,3/1,16,33,4,16,0,32,0,16,1,1,256,1"
timeout 150 /tmp/moe-ab/base/sluice-bench moe --batches 256,512 --reps 12 --routing random --variants "$V" > $OUT/bench-var.log 2>&1
grep -E "^variant|^ +(256|512) +random" $OUT/bench-var.log | sed -E 's/variant: early PDL [0-9], .*shared expert launches from batch [0-9]+ \(second stream ([0-9])\).*2-tile launches first ([0-9]).*/variant: shared fork \1, 2-tile first \2/'
cd $OUT && tar czf run5.tgz --remove-files ncu-*.txt test-*.log bench-var.log
