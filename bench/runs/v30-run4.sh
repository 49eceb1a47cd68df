#!/usr/bin/env bash
# v30 run 4 (bench/NOTES.md v30 (3)): the 2-tile grid bound (new) against HEAD's (head, .ab/head: carry .ab) once more,
# three processes each, interleaved head new head new head new, both with ES 4 (run 3 (4)), at random 12-24 and skewed
# 16-18 (run 3 read skewed 17 -16 % and random 17-20 +1..4 % from single processes), stage traces at 16 and 20.
# One device call (~2 min).
source bench/runs/lib.sh
VARIANTS="head: new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
V=$(variant ES=4)
for r in 1 2 3; do for b in head new; do
  timeout 100 /tmp/moe-ab/$b/sluice-bench moe --batches 12,16,17,20,24 --routing random --reps 10 --variants "$V" > $OUT/g-$b-$r.log 2>&1
  timeout 100 /tmp/moe-ab/$b/sluice-bench moe --batches 16,17,18 --routing skewed --reps 10 --variants "$V" >> $OUT/g-$b-$r.log 2>&1
done; done
for b in head new; do
  echo "== $b (us, unqueued/queued@MHz, processes 1 2 3)"
  cat $OUT/g-$b-*.log | awk '/^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}'
done
for b in head new; do
  timeout 60 /tmp/moe-ab/$b/sluice-bench moe --batches 16,20 --routing random --reps 6 --stages --variants "$V" > $OUT/st-$b.log 2>&1
  echo "$b:"; grep stages $OUT/st-$b.log
done
cd $OUT && tar czf v30-run4.tgz --remove-files g-*.log st-*.log; ls $OUT
