#!/usr/bin/env bash
# v30 run 2 (bench/NOTES.md v30 (2)): stage traces where run 1's sweep found steps: random 46-47 and 60-61 (72-78 % of
# the ceiling against 86 % at 45, 48, 59, 62, in both passes, the SM clock after them down to 1139-1400 MHz), random
# 224 (1.09 ms, slower than 256's 1.06), skewed 17 (121 us against 18's 100); and at 192-320 the wide launches from
# 192 / 224 (X4; default 256) against the default, one process B X B X. One device call (~3 min), no carry.
source bench/runs/lib.sh
build_new
B=$(variant) X192=$(variant X4=192) X224=$(variant X4=224)
timeout 120 $N/sluice-bench moe --batches 44,45,46,47,48,59,60,61,62 --routing random --reps 6 --stages > $OUT/a.log 2>&1
echo "a:$(row $OUT/a.log)"; grep stages $OUT/a.log | cut -c1-250
timeout 120 $N/sluice-bench moe --batches 16,17,18,33 --routing skewed --reps 6 --stages > $OUT/b.log 2>&1
echo "b:$(row $OUT/b.log)"; grep stages $OUT/b.log | cut -c1-250
timeout 200 $N/sluice-bench moe --batches 192,224,256,320 --routing random --reps 8 --stages --variants "$B/$X192/$X224/$B/$X192/$X224" > $OUT/c.log 2>&1
echo "c (B X192 X224 B X192 X224; ms/queued@MHz):$(row $OUT/c.log)"
awk '/^variant:/{v++} v<=3 && /stages/{print "v" v ": " $0}' $OUT/c.log | cut -c1-260
cd $OUT && tar czf v30-run2.tgz --remove-files a.log b.log c.log; ls $OUT
