#!/usr/bin/env bash
# v26 run 1, prepared in session 16 (bench/NOTES.md v25 (10)), not yet run: SWF, the shared expert on wgmma with its
# power-of-two block scales folded into the dequantisation (k_shared_wg FOLD 1: no per-chunk fp32 partials, the
# wgmmas accumulate straight into acc with one group left in flight, 128-token blocks from batch 512; the bench's
# shared scales are 2^-10 since v25, DeepSeek's ue8m0 kind). (1) every shared-expert test case (MOE_TEST_ONLY: SW,
# SWF with 32/64/128-token blocks and partial last ones, k_shared_fp8 on power-of-two scales); (2) bench 256 and
# 512, random and skewed, two processes, stage traces and the SM clock per row: SW 0 (default), SW 16 SF 0 (the
# partials form of v25 (2)), SW 16 SF 1 (SWF), SWF with the fork after the router (FK 2); (3) ncu: SWF's 128-token
# gate/up alone at 512. One device call (~4 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
B=/tmp/moe-ab/base
MOE_TEST_ONLY="shared expert" timeout 120 $B/test_moe_gpu > $OUT/test-sw.log 2>&1
echo "test: rc $? $(grep -c rel_l2 $OUT/test-sw.log) cases, $(tail -1 $OUT/test-sw.log)"; grep -B1 FAIL $OUT/test-sw.log | head -6
P1=1,16,33,4,16,0,32,0,16 P2=1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
for r in 1 2; do
  timeout 150 $B/sluice-bench moe --batches 256,512 --reps 8 --stages \
    --variants "$P1,1,$P2,0/$P1,1,$P2,16,0/$P1,1,$P2,16,1/$P1,2,$P2,16,1" > $OUT/swf-$r.log 2>&1
  echo "round $r (v1 SW 0, v2 SW partials, v3 SWF, v4 SWF FK 2; ms@MHz):$(row $OUT/swf-$r.log)"
done
grep -E "stages 512 random" $OUT/swf-1.log | cut -c1-250
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,lts__t_bytes.sum"
timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z11k_shared_wgILi2ELi16ELi1E" -c 1 --metrics "$M" \
  $B/sluice-bench moe --batches 512 --reps 1 --routing random --variants "$P1,1,$P2,16,1" > $OUT/ncu-swf.txt 2>&1
echo "== ncu SWF gate/up 512: $(grep -E "dram__|gpu__time|inst_issued|lts__" $OUT/ncu-swf.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
cd $OUT && tar czf v26-run1.tgz --remove-files test-sw.log swf-*.log ncu-swf.txt 2>/dev/null; ls $OUT
