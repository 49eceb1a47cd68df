#!/usr/bin/env bash
# v28 run 4 (bench/NOTES.md v28 (5)): batches 5-8 keep v27's top-k + lists launch (one warp per token; at 8 it ends 15 us
# in), while from 9 tokens the grouped top-k blocks and the lists launch won (v28 (3): at 16 the router ends 2.5 us
# earlier). TL 4 (the one-launch router only up to 4 tokens) against the default TL 8 at 6 and 8, one process
# B T4 T4 B T4 B, random and skewed, stage traces. A measurement of a runtime knob, no test. One device call
# (~2 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
D1=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16 D3=0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824
B="$D1,8,$D3" T4="$D1,4,$D3"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
timeout 200 $N/sluice-bench moe --batches 6,8 --reps 8 --stages --variants "$B/$T4/$T4/$B/$T4/$B" > $OUT/t4.log 2>&1
echo "t4 (B T4 T4 B T4 B; ms/queued@MHz):$(row $OUT/t4.log)"
awk '/^variant:/{v++} v<=2 && /stages (6|8) /{print "v" v ": " $0}' $OUT/t4.log | cut -c1-220
cd $OUT && tar czf v28-run4.tgz --remove-files t4.log 2>/dev/null; ls $OUT
