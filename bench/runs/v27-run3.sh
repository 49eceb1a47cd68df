#!/usr/bin/env bash
# v27 run 3 (bench/NOTES.md v27 (3)): run 2's XE readings came from processes that ran only batch 256 (cooler
# clocks than the default processes), so XE 0 against XE 1 is measured here inside one process, A B B A and B A A B;
# and the wide launches from batch 64 with XE 1 (X4 64, XT 32) against the default (X4 256) at 64-128, the same way.
# Two processes each, stage traces, SM clock per row. One device call (~4 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
X0="$D,256,32,0" X1="$D,256,32,1" W0="$D,256,32,1" W1="$D,64,32,1"
timeout 120 $N/sluice-bench moe --batches 256 $A --variants "$X0/$X1/$X1/$X0" > $OUT/xe-1.log 2>&1; echo "xe ABBA (XE 0, 1, 1, 0):$(row $OUT/xe-1.log)"
timeout 120 $N/sluice-bench moe --batches 64,128 $A --variants "$W0/$W1/$W1/$W0" > $OUT/w64-1.log 2>&1; echo "w64 ABBA (X4 256, 64, 64, 256):$(row $OUT/w64-1.log)"
timeout 120 $N/sluice-bench moe --batches 256 $A --variants "$X1/$X0/$X0/$X1" > $OUT/xe-2.log 2>&1; echo "xe BAAB (XE 1, 0, 0, 1):$(row $OUT/xe-2.log)"
timeout 120 $N/sluice-bench moe --batches 64,128 $A --variants "$W1/$W0/$W0/$W1" > $OUT/w64-2.log 2>&1; echo "w64 BAAB (X4 64, 256, 256, 64):$(row $OUT/w64-2.log)"
for f in xe-1 w64-1; do echo "== $f"; grep -E "stages (64|128|256) " $OUT/$f.log | cut -c1-330; done
cd $OUT && tar czf v27-run3.tgz --remove-files xe-*.log w64-*.log 2>/dev/null; ls $OUT
