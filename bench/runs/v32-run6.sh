#!/usr/bin/env bash
# v32 run 6 (bench/NOTES.md v32 (6)): with the early refill the routed stream at 5-8 tokens runs at ~4.2 TB/s, and the
# item log at 8 has no expert byte moving in the first 15 us (the router). The shared gate/up before the wait on the
# lists at 5-8 (ES 8; default 4, v30 (4)) would move its 16.8 MB into that window; measured at 4 before v28's top-k
# (v25 (3), +1.6..2.7 %) and not since. Prediction: 8 -1..2 %, 5-7 -1..3 %, unless its warps slow the top-k and lists
# launches. One process B E8 B E8 at 5-8 random and 8 skewed. No carry.
source bench/runs/lib.sh
build_new
B=$(variant) E8=$(variant ES=8)
timeout 100 $N/sluice-bench moe --batches 5,6,7,8 --routing random --reps 8 --variants "$B/$E8/$B/$E8" > $OUT/es.log 2>&1
timeout 60 $N/sluice-bench moe --batches 8 --routing skewed --reps 8 --variants "$B/$E8/$B/$E8" > $OUT/ess.log 2>&1
echo "(us unqueued/queued@MHz: B E8 B E8)"
cat $OUT/es.log $OUT/ess.log | awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}'
