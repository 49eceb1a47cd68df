#!/usr/bin/env bash
# v27 run 1 (bench/NOTES.md v27 (1)): empty launches in the layer's tail. head: 4a8623b (.ab/head, carried); new:
# MOE_IDLE_EXIT (a routed launch's blocks without items exit before their PDL wait, block 0 waits for the grid) with
# the wide gate/up after the 2-tile down (XE 0) or right after the 2-tile gate/up (XE 1) in the fused path. (1) the
# full test_moe_gpu on new (every launch takes the early exit; 6 new XE cases); (2) bench 32-512, random and
# skewed, head / new XE 0 / new XE 1, two rounds, stage traces and the SM clock per row. One device call (~8 min):
#   mkdir -p .ab/head && git archive 4a8623b kernels engine tests/gpu bench | tar -x -C .ab/head   (carry .ab)
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="head: new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new H=/tmp/moe-ab/head
timeout 300 $N/test_moe_gpu > $OUT/test-new.log 2>&1
echo "test: rc $? $(grep -c rel_l2 $OUT/test-new.log) cases, $(tail -1 $OUT/test-new.log)"; grep -B1 FAIL $OUT/test-new.log | head -6
grep "early" $OUT/test-new.log | awk '{print "  " $0}' | cut -c1-130
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512,256,32
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s;", v, $1, substr($2,1,1), $3, $(NF-1)}' "$1"; }
A="--batches 32,64,128,256,512 --reps 8 --stages"
for r in 1 2; do
  timeout 150 $H/sluice-bench moe $A > $OUT/head-$r.log 2>&1
  echo "round $r head (ms@MHz):$(row $OUT/head-$r.log)"
  timeout 200 $N/sluice-bench moe $A --variants "$D,0/$D,1" > $OUT/new-$r.log 2>&1
  echo "round $r new (v1 XE 0, v2 XE 1; ms@MHz):$(row $OUT/new-$r.log)"
done
for f in head-1 new-1; do echo "== $f"; grep -E "stages (64|128|256|512) " $OUT/$f.log | cut -c1-330; done
cd $OUT && tar czf v27-run1.tgz --remove-files test-new.log head-*.log new-*.log 2>/dev/null; ls $OUT
