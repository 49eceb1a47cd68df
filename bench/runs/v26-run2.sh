#!/usr/bin/env bash
# v26 run 2 (bench/NOTES.md v26 (2)): X4, routed experts with more than XT tokens in 4-tile launches (32-token items,
# each dequantised fragment feeding 4 n-tiles). (1) the full test_moe_gpu (item_table's tile class changed for every
# path; 15 new X4 cases); (2) bench 64-512, random and skewed, two processes, stage traces and the SM clock per row:
# X4 off (default), X4 from 64 for experts above 32 tokens, and above 16; (3) ncu: the 4-tile gate/up and the 2-tile
# one alone at skewed 512. One device call (~6 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
B=/tmp/moe-ab/base
timeout 300 $B/test_moe_gpu > $OUT/test-x4.log 2>&1
echo "test: rc $? $(grep -c rel_l2 $OUT/test-x4.log) cases, $(tail -1 $OUT/test-x4.log)"; grep -B1 FAIL $OUT/test-x4.log | head -6
grep "4-tile" $OUT/test-x4.log | awk '{print "  " $0}' | cut -c1-130
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
for r in 1 2; do
  timeout 200 $B/sluice-bench moe --batches 64,128,256,512 --reps 8 --stages --variants "$D,0,32/$D,64,32/$D,64,16" > $OUT/x4-$r.log 2>&1
  echo "round $r (v1 X4 off, v2 X4 >32, v3 X4 >16; ms@MHz):$(row $OUT/x4-$r.log)"
done
grep -E "stages (256|512) skewed" $OUT/x4-1.log | cut -c1-250
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
for k in "_Z9k_gate_upILi1ELi4ELi0E:$D,64,32" "_Z9k_gate_upILi1ELi2ELi0E:$D,0,32" "_Z6k_downILi1ELi4ELi2ELi0E:$D,64,32"; do
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:"${k%%:*}" -c 1 --metrics "$M" \
    $B/sluice-bench moe --batches 512 --reps 1 --routing skewed --variants "${k#*:}" > $OUT/ncu.txt 2>&1
  echo "== ncu ${k%%:*} skewed 512: $(grep -E "dram__|gpu__time|inst_issued|lts__|hmma" $OUT/ncu.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
  cat $OUT/ncu.txt >> $OUT/ncu-x4.txt
done
cd $OUT && tar czf v26-run2.tgz --remove-files test-x4.log x4-*.log ncu-x4.txt ncu.txt 2>/dev/null; ls $OUT
