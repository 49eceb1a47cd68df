#!/usr/bin/env bash
# v29 run 2 (bench/NOTES.md v29 (2)): the staged tensor-core logits (moe_router_logits_tcs: the gate read from L2
# once per 64 ntt tokens, LS = 10000 expert tiles + 100 ntt + K parts) against the default k_router_logits_tc at
# 64-512, and the tensor-core logits below 32 tokens (run 1: TC 16 -1.2 % random, -7 % skewed at 16). (1) test_moe_gpu's
# v29 cases (staged logits on models A, G, E; every shape and K part in test_logits_tc); (2) processes with stage traces:
# m 64-128 random (B S108 S116 S216 S216 S116 S108 B), l 256-512 (B S108 S116 S216 S216 S116 S108 B), s 4-16
# (B T16 T1 T1S T1S T1 T16 B: TC from 16, TC from 1, TC from 1 staged), n 128-256 without the shared expert
# (B S108 S116 B). One device call (~5 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
MOE_TEST_ONLY="v29" timeout 200 $N/test_moe_gpu > $OUT/test-v29.log 2>&1
echo "test 'v29': rc $? $(grep -c rel_l2 $OUT/test-v29.log) cases, $(tail -1 $OUT/test-v29.log)"
grep -E "FAIL|tensor-core logits \(staged" $OUT/test-v29.log | head -16
P1=1,16,33,4,16,0 P2=0,16,1,1,256,0,0,8,24,3,16,4,0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824,0
v() { echo "$P1,$1,$P2,$2"; }
B=$(v 32 0) S108=$(v 32 10008) S116=$(v 32 10016) S216=$(v 32 20016) T16=$(v 16 0) T1=$(v 1 0) T1S=$(v 1 10016)
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
timeout 200 $N/sluice-bench moe --batches 64,128 --routing random $A --variants "$B/$S108/$S116/$S216/$S216/$S116/$S108/$B" > $OUT/m.log 2>&1
echo "m (B S108 S116 S216 S216 S116 S108 B; ms/queued@MHz):$(row $OUT/m.log)"
timeout 200 $N/sluice-bench moe --batches 256,512 $A --variants "$B/$S108/$S116/$S216/$S216/$S116/$S108/$B" > $OUT/l.log 2>&1
echo "l (B S108 S116 S216 S216 S116 S108 B):$(row $OUT/l.log)"
timeout 150 $N/sluice-bench moe --batches 4,8,16 $A --variants "$B/$T16/$T1/$T1S/$T1S/$T1/$T16/$B" > $OUT/s.log 2>&1
echo "s (B T16 T1 T1S T1S T1 T16 B):$(row $OUT/s.log)"
timeout 150 $N/sluice-bench moe --batches 128,256 --routing random --no-shared $A --variants "$B/$S108/$S116/$B" > $OUT/n.log 2>&1
echo "n (no shared; B S108 S116 B):$(row $OUT/n.log)"
st() { awk '/^variant:/{v++} v<=4 && /stages/ && / random /{print "v" v ": " $0}' "$1" | sed -E 's/ (sh-dn|dn2|combine|guw|dnw) [0-9.]+-[0-9.]+//g' | cut -c1-200; }
for f in m l s n; do echo "-- $f"; st $OUT/$f.log; done
cd $OUT && tar czf v29-run2.tgz --remove-files test-v29.log m.log l.log s.log n.log 2>/dev/null; ls $OUT
