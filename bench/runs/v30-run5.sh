#!/usr/bin/env bash
# v30 run 5 (bench/NOTES.md v30 (5)): thresholds between the JSON's rows at 144-512 that run 1's sweep leaves open:
# experts with 9-16 tokens as two 1-tile chunks up to 192 (TT 192; default 128: at 144-192 such experts are 0.5-4 %),
# tiles handed out in the 1-tile launches up to 512 (DM 512; default 256: 320 read 67.6 % against 256's 74 %), the
# wide launches from 224 (X4 224; default 256: run 2 read 224 -5 % with it, one process, noisy), one process
# B TT DM X B TT DM X at random 144-512, then skewed 224 B X B X. One device call (~2 min), no carry.
source bench/runs/lib.sh
build_new
B=$(variant) TT=$(variant TT=192) DM=$(variant DM=512) X=$(variant X4=224)
timeout 300 $N/sluice-bench moe --batches 144,160,192,224,320,384,512 --routing random --reps 8 --variants "$B/$TT/$DM/$X/$B/$TT/$DM/$X" > $OUT/t.log 2>&1
timeout 60 $N/sluice-bench moe --batches 224 --routing skewed --reps 8 --variants "$B/$X/$B/$X" > $OUT/x.log 2>&1
echo "(us unqueued/queued@MHz per variant: B TT DM X B TT DM X; skewed 224: B X B X)"
for f in t x; do
  awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}' $OUT/$f.log
done
cd $OUT && tar czf v30-run5.tgz --remove-files t.log x.log; ls $OUT
