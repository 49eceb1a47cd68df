#!/usr/bin/env bash
# v24 run 2 (bench/NOTES.md v24 (2)): every routed expert in the 2-tile launches at 512 (moe_cuda_ws.nt2_all_min_t,
# bench --variants field TA). One device call (~6 min), nothing to carry; files in $OUT (run2.tgz).
# (1) test_moe_gpu on the default build (its new v24 cases take the 2-tile launches for experts with 1-8 tokens).
# (2) sluice-bench moe at 256-512, variants in one process, two processes: V0 default / V1 TA 257 / V2 TA 257 with
#     the shared expert forked after the logits (FK 3) / V3 at 256 with the fused stages off (DM 255) and TA 256.
# (3) ncu: the 2-tile gate/up and down alone at 512 with TA 257 (every expert) against the default (217 of 256).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p $OUT
VARIANTS="base:" TESTS="base" TEST_TIMEOUT=300 ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -E "^test|did not build|^== base"
B=/tmp/moe-ab/base
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2
V="$D,0/$D,257/1,16,33,4,16,0,32,0,16,3,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,257/1,16,33,4,16,0,32,0,16,1,1,255,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,256"
for r in 1 2; do
  timeout 150 $B/sluice-bench moe --batches 256,512 --reps 12 --stages --variants "$V" > $OUT/bench-$r.log 2>&1
  echo "round $r:"; awk '/^variant:/{v++; printf "\n V%d:", v-1} /^ +[0-9]+ +(random|skewed)/{printf " %s %s %s;", $1, substr($2,1,1), $3}' $OUT/bench-$r.log; echo
done
grep -E "^variant:|stages 512 random|stages 256 random" $OUT/bench-1.log | sed -E 's/^variant:.*every expert 2-tile from batch ([0-9]+)/variant TA \1/' | cut -c1-400
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__bytes_read.sum"
for spec in "0:_Z9k_gate_upILi0ELi2ELi0ELi0E" "257:_Z9k_gate_upILi0ELi2ELi0ELi0E" "0:_Z6k_downILi0ELi2ELi2ELi0ELi0E" "257:_Z6k_downILi0ELi2ELi2ELi0ELi0E"; do
  ta=${spec%%:*} k=${spec#*:}
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:"$k" -c 1 --metrics "$M" \
    $B/sluice-bench moe --batches 512 --reps 1 --routing random --variants "$D,$ta" > $OUT/ncu-$ta-${k:4:6}.txt 2>&1
  echo "== TA $ta $k: $(grep -E "dram__|gpu__time|inst_issued" $OUT/ncu-$ta-${k:4:6}.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
cd $OUT && tar czf run2.tgz --remove-files ncu-*.txt test-*.log bench-*.log
