#!/usr/bin/env bash
# v26 run 3 (bench/NOTES.md v26 (3)-(4)): ZP (empty token slots read a zero row, now the default) and X4 with the
# 4-tile gate/up releasing the next launch before its wait. (1) the full test_moe_gpu (ZP on in every case but the 8
# new ones that turn it off); (2) bench 8-512, random and skewed, three processes, SM clock per row, nvidia-smi power
# beside it: ZP 0 (v25's kernels), ZP 1, ZP 1 + X4 from 128 for experts above 32 tokens; (3) ncu: the 4-tile gate/up
# alone at skewed 512. One device call (~8 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
B=/tmp/moe-ab/base
timeout 300 $B/test_moe_gpu > $OUT/test-zp.log 2>&1
echo "test: rc $? $(grep -c rel_l2 $OUT/test-zp.log) cases, $(tail -1 $OUT/test-zp.log)"; grep -B1 FAIL $OUT/test-zp.log | head -6
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks_event_reasons.active --format=csv,noheader -lms 100 > $OUT/smi-zp.csv 2>&1 &
SMI=$!
for r in 1 2 3; do
  timeout 200 $B/sluice-bench moe --batches 8,64,128,256,512 --reps 8 --stages --variants "$D,0,32,0/$D,0,32,1/$D,128,32,1" > $OUT/zp-$r.log 2>&1
  echo "round $r (v1 ZP 0, v2 ZP 1, v3 ZP 1 + X4 >32 from 128; ms@MHz):$(row $OUT/zp-$r.log)"
done
kill $SMI
echo "smi: $(awk -F', ' '{p=$2+0; if (p>mx) mx=p; s+=p; n++} END {printf "%d samples, power mean %.0f W max %.0f W", n, s/n, mx}' $OUT/smi-zp.csv)"
grep -E "stages (256|512) (skewed|random)" $OUT/zp-1.log | cut -c1-250
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warps_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warps_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warps_issue_stalled_barrier_per_warp_active.pct,smsp__warps_issue_stalled_wait_per_warp_active.pct,smsp__warps_issue_stalled_short_scoreboard_per_warp_active.pct"
for k in "_Z9k_gate_upILi0ELi4ELi0E:$D,128,32,1" "_Z9k_gate_upILi0ELi2ELi0E:$D,0,32,1"; do
  timeout 90 ncu --clock-control none --kernel-name-base mangled -k regex:"${k%%:*}" -c 1 --metrics "$M" \
    $B/sluice-bench moe --batches 512 --reps 1 --routing skewed --variants "${k#*:}" > $OUT/ncu.txt 2>&1
  echo "== ncu ${k%%:*} skewed 512: $(grep -E "dram__|gpu__time|inst_issued|lts__|hmma|stalled" $OUT/ncu.txt | awk '{printf "%s %s; ", $1, $NF}' | sed -E 's/smsp__warps_issue_stalled_//g; s/_per_warp_active.pct//g')"
  cat $OUT/ncu.txt >> $OUT/ncu-zp.txt
done
cd $OUT && tar czf v26-run3.tgz --remove-files test-zp.log zp-*.log ncu-zp.txt ncu.txt smi-zp.csv 2>/dev/null; ls $OUT
