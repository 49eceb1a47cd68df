#!/usr/bin/env bash
# v28 run 3 (bench/NOTES.md v28 (3)): run 2's G alone, without the last-block lists (LF removed): above 32 tokens each
# token's top-k one block of 8 warps (TB) and the lists launch from registers (LR), against base, eight readings each at
# 64-128 (two processes, A B B A B A A B) and four at 256-512; at 16-32 the same with the one-launch router only up to 8
# tokens (TL 8, TX 8: G2); at 3-4 the grouped top-k in a 1024-thread top-k + lists block (TG 4: G4). (1) test_moe_gpu's
# v28 cases and the 256-expert layer; (2) the processes, random and skewed, stage traces and the SM clock per row.
# One device call (~5 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
for f in v28 "256 experts"; do
  MOE_TEST_ONLY="$f" timeout 200 $N/test_moe_gpu > "$OUT/test-$f.log" 2>&1
  echo "test '$f': rc $? $(grep -c rel_l2 "$OUT/test-$f.log") cases, $(tail -1 "$OUT/test-$f.log")"; grep -B1 FAIL "$OUT/test-$f.log" | head -6
done
D1=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16 D3=0,8,2,1,4,2,2,16,128,64 D5=512,512,0,1,512,256,32,1
B="$D1,32,$D3,32,9,2,$D5,0,0" G="$D1,32,$D3,32,9,2,$D5,512,512" G2="$D1,8,$D3,8,9,2,$D5,512,512" G4="$D1,32,$D3,32,9,4,$D5,0,0"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
timeout 150 $N/sluice-bench moe --batches 3,4 $A --variants "$B/$G4/$G4/$B/$G4/$B/$B/$G4" > $OUT/s4.log 2>&1
echo "s4 (B G4 G4 B G4 B B G4; ms/queued@MHz):$(row $OUT/s4.log)"
timeout 150 $N/sluice-bench moe --batches 16,32 $A --variants "$B/$G2/$G2/$B/$G2/$B/$B/$G2" > $OUT/s16.log 2>&1
echo "s16 (B G2 G2 B G2 B B G2):$(row $OUT/s16.log)"
for p in 1 2; do
  timeout 200 $N/sluice-bench moe --batches 64,128 --routing random $A --variants "$B/$G/$G/$B/$G/$B/$B/$G" > $OUT/m$p.log 2>&1
  echo "m$p (B G G B G B B G):$(row $OUT/m$p.log)"
done
timeout 200 $N/sluice-bench moe --batches 64,128,256,512 $A --variants "$G/$B/$B/$G" > $OUT/l1.log 2>&1
echo "l1 (G B B G):$(row $OUT/l1.log)"
for f in s4 s16; do awk '/^variant:/{v++} v<=2 && /stages (3|4|16|32) /{print "v" v ": " $0}' $OUT/$f.log | cut -c1-260; done
awk '/^variant:/{v++} v<=3 && /stages (64|128|256) /{print "v" v ": " $0}' $OUT/l1.log | cut -c1-260
cd $OUT && tar czf v28-run3.tgz --remove-files test-*.log s4.log s16.log m1.log m2.log l1.log 2>/dev/null; ls $OUT
