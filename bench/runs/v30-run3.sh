#!/usr/bin/env bash
# v30 run 3 (bench/NOTES.md v30 (3)-(4)): (a) the 2-tile launches' grid bound (routed_grid: one item per 17 / 2 pairs
# instead of 9) against HEAD's (129039d, from .ab/head: carry .ab) at skewed 9-33 and random 9-24, processes head new
# head new, with test_moe_gpu's "v30" and "skewed" cases on the new build; (b) at batches 2-8 (run 1: 3 and 7 read 8-10 us
# above the line through their neighbours) the shared gate/up before the lists up to 3 / 4 (ES; default 2) and the
# routed gate/up in 2 K parts up to 2 (KX; default 1), one process B E3 E4 K2 B E3 E4 K2. One device call (~3 min).
source bench/runs/lib.sh
VARIANTS="head: new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
MOE_TEST_ONLY="v30" timeout 60 $N/test_moe_gpu > $OUT/test-v30.log 2>&1
echo "test 'v30': rc $? $(grep -c rel_l2 $OUT/test-v30.log) cases, $(tail -1 $OUT/test-v30.log)"; grep -E "rel_l2|FAIL" $OUT/test-v30.log | cut -c1-150
MOE_TEST_ONLY="skewed" timeout 200 $N/test_moe_gpu > $OUT/test-skewed.log 2>&1
echo "test 'skewed': rc $? $(grep -c rel_l2 $OUT/test-skewed.log) cases, $(tail -1 $OUT/test-skewed.log)"; grep -B1 FAIL $OUT/test-skewed.log | head -6
for b in head new head new; do
  timeout 100 /tmp/moe-ab/$b/sluice-bench moe --batches 9,12,16,17,18,20,24,33 --routing skewed --reps 8 > $OUT/g-$b.log 2>&1
  timeout 100 /tmp/moe-ab/$b/sluice-bench moe --batches 9,12,16,17,20,24 --routing random --reps 8 >> $OUT/g-$b.log 2>&1
  echo "g $b:$(row $OUT/g-$b.log)"
done
timeout 100 $N/sluice-bench moe --batches 17 --routing skewed --reps 8 --stages > $OUT/g-st.log 2>&1; grep stages $OUT/g-st.log
B=$(variant) E3=$(variant ES=3) E4=$(variant ES=4) K2=$(variant KX=2)
timeout 200 $N/sluice-bench moe --batches 2,3,4,5,6,7,8 --reps 8 --stages --variants "$B/$E3/$E4/$K2/$B/$E3/$E4/$K2" > $OUT/s.log 2>&1
echo "s (B E3 E4 K2 B E3 E4 K2; ms/queued@MHz):$(row $OUT/s.log)"
awk '/^variant:/{v++} v<=4 && /stages/{print "v" v ": " $0}' $OUT/s.log | cut -c1-200
cd $OUT && tar czf v30-run3.tgz --remove-files test-v30.log test-skewed.log g-*.log s.log; ls $OUT
