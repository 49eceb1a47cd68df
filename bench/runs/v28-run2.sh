#!/usr/bin/env bash
# v28 run 2 (bench/NOTES.md v28 (2)-(3)): run 1's R again, with the last block's lists from registers (build_lists_block
# U 12, run scans; run 1 had them take 6-10 us in one 256-thread block), against G (the grouped top-k, the separate lists
# launch with its pairs in registers) and base at 64-512; and LR (the pairs in registers and run scans in the top-k +
# lists launch, batches 1-32) against base. (1) test_moe_gpu's v28 cases and the 256-expert layer (F removed: its cases
# went with it); (2) one process at 1-32 (B LR LR B LR B B LR), two at 64-512 (B R G G R B B R, then R B G G B R R B),
# random and skewed, stage traces and the SM clock per row. One device call (~5 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
for f in v28 "256 experts"; do
  MOE_TEST_ONLY="$f" timeout 200 $N/test_moe_gpu > "$OUT/test-$f.log" 2>&1
  echo "test '$f': rc $? $(grep -c rel_l2 "$OUT/test-$f.log") cases, $(tail -1 "$OUT/test-$f.log")"; grep -B1 FAIL "$OUT/test-$f.log" | head -6
done
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512,256,32,1
B="$D,0,0,0" R="$D,512,512,0" G="$D,512,0,512" LR="$D,0,0,512"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
timeout 200 $N/sluice-bench moe --batches 1,4,8,16,32 $A --variants "$B/$LR/$LR/$B/$LR/$B/$B/$LR" > $OUT/s1.log 2>&1
echo "s1 (B LR LR B LR B B LR; ms/queued@MHz):$(row $OUT/s1.log)"
timeout 280 $N/sluice-bench moe --batches 64,128,256,512 $A --variants "$B/$R/$G/$G/$R/$B/$B/$R" > $OUT/p1.log 2>&1
echo "p1 (B R G G R B B R):$(row $OUT/p1.log)"
timeout 280 $N/sluice-bench moe --batches 64,128,256,512 $A --variants "$R/$B/$G/$G/$B/$R/$R/$B" > $OUT/p2.log 2>&1
echo "p2 (R B G G B R R B):$(row $OUT/p2.log)"
awk '/^variant:/{v++} v<=3 && /stages (64|256) /{print "v" v ": " $0}' $OUT/p1.log | cut -c1-300
awk '/^variant:/{v++} v<=2 && /stages (1|8|32) /{print "v" v ": " $0}' $OUT/s1.log | cut -c1-300
cd $OUT && tar czf v28-run2.tgz --remove-files test-*.log s1.log p1.log p2.log 2>/dev/null; ls $OUT
