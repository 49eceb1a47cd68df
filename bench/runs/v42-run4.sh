#!/usr/bin/env bash
# v42 run 4 (bench/NOTES.md v42 (4)): the graph floor (sluice-bench moe now prints, per process, the replay time of
# graphs of 1, 4 and 8 empty kernels, plain and under PDL, unqueued and queued behind the hold), beside batch 1 and 8
# with their stage traces (each replay's time between its events less its kernels' span): how much of a row is the
# replay's own start and end, which no kernel change can take away.
source bench/runs/lib.sh
build_new > /dev/null
for i in 1 2; do
  timeout 100 $N/sluice-bench moe --batches 1,8 --routing random --reps 12 --stages > $OUT/f$i.log 2>&1
  echo "== $i rc $?"; grep -E "ceiling|graph floor|^ +[0-9]+ +random|stages|stage gaps" $OUT/f$i.log
done
