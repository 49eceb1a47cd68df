#!/usr/bin/env bash
# v29 run 4 (bench/NOTES.md v29 (4)): what v29's two defaults changed, in one process: v28's (TL 8, tensor-core logits
# from 32) against v29's (TL 4, from 8) at 6-32 tokens, including batches the A/Bs did not read (6, 12, 24), random and
# skewed, O N N O N O O N, stage traces. A measurement, no test. One device call (~2 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
P1=1,16,33,4,16,0 P2=0,16,1,1,256,0,0,8,24,3,16 P3=0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824,0
O="$P1,32,$P2,8,$P3" V="$P1,8,$P2,4,$P3"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
timeout 250 $N/sluice-bench moe --batches 6,8,12,16,24,32 --reps 8 --stages --variants "$O/$V/$V/$O/$V/$O/$O/$V" > $OUT/d.log 2>&1
echo "d (O N N O N O O N; ms/queued@MHz):$(row $OUT/d.log)"
awk '/^variant:/{v++} v<=2 && /stages/{print "v" v ": " $0}' $OUT/d.log | sed -E 's/ (dn2|guw|dnw|sh-dn) [0-9.]+-[0-9.]+//g' | cut -c1-200
cd $OUT && tar czf v29-run4.tgz --remove-files d.log; ls $OUT
