#!/usr/bin/env bash
# v27 run 2 (bench/NOTES.md v27 (2)): MOE_IDLE_EXIT against its old form (ie0: -DMOE_IDLE_EXIT=0) in alternating
# processes; the wide gate/up's place in the fused path (XE 1: after the 2-tile gate/up, 2: after the fused launch)
# at 256; the shared expert's down in the layer's stream before the fused launch at 64-128 (HM 64, HX 128). (1) the
# full test_moe_gpu (9 new cases); (2) three rounds of: ie0 64-512 / new 64-512 / new HM 64 at 64-128 / new XE 1 and
# XE 2 at 256 (their order swapped each round); stage traces, SM clock per row. One device call (~8 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new: ie0:-DMOE_IDLE_EXIT=0" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new I=/tmp/moe-ab/ie0
timeout 300 $N/test_moe_gpu > $OUT/test-new.log 2>&1
echo "test: rc $? $(grep -c rel_l2 $OUT/test-new.log) cases, $(tail -1 $OUT/test-new.log)"; grep -B1 FAIL $OUT/test-new.log | head -6
grep -E "after the fused|layer's stream" $OUT/test-new.log | awk '{print "  " $0}' | cut -c1-120
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512,256,32
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
for r in 1 2 3; do
  timeout 120 $I/sluice-bench moe --batches 64,128,256,512 $A > $OUT/ie0-$r.log 2>&1; echo "r$r ie0:$(row $OUT/ie0-$r.log)"
  timeout 120 $N/sluice-bench moe --batches 64,128,256,512 $A > $OUT/new-$r.log 2>&1; echo "r$r new:$(row $OUT/new-$r.log)"
  timeout 90 $N/sluice-bench moe --batches 64,128 $A --variants "$D,0,64,128" > $OUT/sd-$r.log 2>&1; echo "r$r sd:$(row $OUT/sd-$r.log)"
  X="$D,1,0,128/$D,2,0,128"; [ $r = 2 ] && X="$D,2,0,128/$D,1,0,128"
  timeout 90 $N/sluice-bench moe --batches 256 $A --variants "$X" > $OUT/xe-$r.log 2>&1; echo "r$r xe ($X):$(row $OUT/xe-$r.log)"
done
for f in ie0-1 new-1 sd-1 xe-1; do echo "== $f"; grep -E "stages (64|128|256) " $OUT/$f.log | cut -c1-330; done
cd $OUT && tar czf v27-run2.tgz --remove-files test-new.log ie0-*.log new-*.log sd-*.log xe-*.log 2>/dev/null; ls $OUT
