#!/usr/bin/env bash
# v30 run 1 (bench/NOTES.md v30 (1)): (a) test_moe_gpu's "v29 TL 4" cases (the 256-expert layer at 5-8 tokens under
# the default TL 4, restored in 129039d and never run on a GPU); (b) the defaults at every batch from 1 to 64 and at
# 80-448 between the JSON's rows, random and skewed, two passes (the second in the reverse order of processes), to
# find steps where a threshold tuned only at the JSON's batches loses (v29 weak spot (b)). One device call (~6 min),
# no carry.
source bench/runs/lib.sh
build_new
MOE_TEST_ONLY="v29 TL 4" timeout 100 $N/test_moe_gpu > $OUT/test-v29tl4.log 2>&1
echo "test 'v29 TL 4': rc $? $(grep -c rel_l2 $OUT/test-v29tl4.log) cases, $(tail -1 $OUT/test-v29tl4.log)"
grep -E "rel_l2|FAIL" $OUT/test-v29tl4.log | cut -c1-150
R1=$(seq -s, 1 16) R2=$(seq -s, 17 32) R3=$(seq -s, 33 48) R4=$(seq -s, 49 64) R5=80,96,112,144,160,192,224,320,384
T0=$(date +%s)
for p in 1 2; do
  o="1 2 3 4 5"; [ $p = 2 ] && o="5 4 3 2 1"
  for i in $o; do
    eval b=\$R$i
    [ $(( $(date +%s) - T0 )) -gt 330 ] && { echo "pass $p range $i: skipped (time)"; continue; }
    s=$(date +%s); timeout 150 $N/sluice-bench moe --batches $b --reps 6 > $OUT/sweep-p$p-r$i.log 2>&1
    echo "pass $p range $i: rc $? $(( $(date +%s) - s )) s, $(grep -o 'ceiling [0-9.]* TB/s' $OUT/sweep-p$p-r$i.log)"
  done
done
# one line per batch: random then skewed, us of pass 1 / pass 2 and the SM clock after pass 1's replays
awk 'FNR==1{p = FILENAME ~ /-p2-/ ? 2 : 1} /^ +[0-9]+ +(random|skewed)/{b[$1]=1; u[$1,$2,p]=sprintf("%.1f", $3*1000); if (p==1) m[$1,$2]=$(NF-1)}
     END{for (t in b) printf "%5d  r %7s %7s @%s   s %7s %7s @%s\n", t, u[t,"random",1], u[t,"random",2], m[t,"random"],
         u[t,"skewed",1], u[t,"skewed",2], m[t,"skewed"]}' $OUT/sweep-p*-r*.log | sort -n | tee $OUT/sweep.txt
cd $OUT && tar czf v30-run1.tgz --remove-files test-v29tl4.log sweep-p*.log; ls $OUT
