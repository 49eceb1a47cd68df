#!/usr/bin/env bash
# v28 run 1 (bench/NOTES.md v28 (1)-(2)): the head of the fused path at 64-256. R: above 32 tokens each token's top-k over
# 8 warps (TB) and the lists built by the top-k launch's last block (LF), one launch and one PDL hop fewer; F: the
# fused launch before the 2-tile gate/up, waiting on the lists itself (FF 128). (1) test_moe_gpu's v28 cases and the
# 256-expert model; (2) one bench process, 64-512 random and skewed, base R F RF in the order base RF R F F R RF base,
# stage traces and the SM clock per row; (3) a second process in the reverse order. One device call (~7 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
for f in v28 "256 experts"; do
  MOE_TEST_ONLY="$f" timeout 200 $N/test_moe_gpu > "$OUT/test-$f.log" 2>&1
  echo "test '$f': rc $? $(grep -c rel_l2 "$OUT/test-$f.log") cases, $(tail -1 "$OUT/test-$f.log")"; grep -B1 FAIL "$OUT/test-$f.log" | head -6
done
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512,256,32,1
B="$D,0,0,0" R="$D,512,512,0" F="$D,0,0,128" RF="$D,512,512,128"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
A="--batches 64,128,256,512 --reps 8 --stages"
timeout 280 $N/sluice-bench moe $A --variants "$B/$RF/$R/$F/$F/$R/$RF/$B" > $OUT/p1.log 2>&1
echo "p1 (base RF R F F R RF base; ms/queued@MHz):$(row $OUT/p1.log)"
timeout 280 $N/sluice-bench moe $A --variants "$RF/$B/$F/$R/$R/$F/$B/$RF" > $OUT/p2.log 2>&1
echo "p2 (RF base F R R F base RF):$(row $OUT/p2.log)"
awk '/^variant:/{v++} v<=4 && /stages (64|128|256) /{print "v" v ": " $0}' $OUT/p1.log | cut -c1-300
cd $OUT && tar czf v28-run1.tgz --remove-files test-*.log p1.log p2.log 2>/dev/null; ls $OUT
