#!/usr/bin/env bash
# v29 run 5 (bench/NOTES.md v29 (5)): batches 9-15, which no JSON row reads: there the shared expert rides in the routed
# launches (shared_min_t 16) and the 1-tile stages are separate launches (fuse1_min_t 16); run 4's stage trace at 12 has
# gu1 / gu2 / dn1 and skewed 12 reads 109 us against skewed 16's 81. B against SH 9 (the shared expert's own launches
# from 9) and MS9 (SH 9 and the fused 1-tile launch from 9), at 9, 12, 15, random and skewed, B MS9 S9 S9 MS9 B, stage
# traces; test_moe_gpu's v29 cases first. One device call (~2 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
MOE_TEST_ONLY="v29" timeout 200 $N/test_moe_gpu > $OUT/test-v29.log 2>&1
echo "test 'v29': rc $? $(grep -c rel_l2 $OUT/test-v29.log) cases, $(tail -1 $OUT/test-v29.log)"; grep -B1 FAIL $OUT/test-v29.log | head -6
P1=1,16,33,4,16,0,8,0 P2=1,1,256,0,0,8,24,3 P3=4,0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824,0
B="$P1,16,$P2,16,$P3" S9="$P1,9,$P2,16,$P3" MS9="$P1,9,$P2,9,$P3"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
timeout 200 $N/sluice-bench moe --batches 9,12,15 --reps 8 --stages --variants "$B/$MS9/$S9/$S9/$MS9/$B" > $OUT/e.log 2>&1
echo "e (B MS9 S9 S9 MS9 B; ms/queued@MHz):$(row $OUT/e.log)"
awk '/^variant:/{v++} v<=3 && /stages/{print "v" v ": " $0}' $OUT/e.log | sed -E 's/ (guw|dnw) [0-9.]+-[0-9.]+//g' | cut -c1-220
cd $OUT && tar czf v29-run5.tgz --remove-files test-v29.log e.log; ls $OUT
