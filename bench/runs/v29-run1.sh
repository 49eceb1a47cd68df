#!/usr/bin/env bash
# v29 run 1 (bench/NOTES.md v29 (1)): (a) the full test_moe_gpu with TL 4 the default (v28 (5)) and the new logits
# cases (model G, hidden 2048: the tensor-core logits in up to 8 K parts and every block shape); (b) the tensor-core
# logits launch's shape (LG = 10 ntt + K parts, moe_cuda_ws.logits_tc_shape) against the default by batch (32: ntt 1 x
# 4 parts, 64: 2 x 4, 128: 2 x 2, 256: 4 x 2, 512: 4 x 1), with stage traces: at 128 the logits span 15 us and at 256
# 36 us of the head, beside the shared gate/up; and at 16 the tensor-core logits (TC 16) against the CUDA-core ones.
# Processes: s 16-32 (B A18 A14 C18 C18 A14 A18 B), m1-m2 64-128 random (B L28 L18 L48 L48 L18 L28 B), l 256-512
# (B L28 L48 L24 L24 L48 L28 B), n 64-256 random without the shared expert (B L28 L48 B). One device call (~5 min).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="new" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
grep -E "FAIL|tensor-core logits T=257" $OUT/test-new.log | head -12
N=/tmp/moe-ab/new
P1=1,16,33,4,16,0 P2=0,16,1,1,256,0,0,8,24,3,16,4,0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824
v() { echo "$P1,$1,$P2,$2"; }
B=$(v 32 0) A18=$(v 16 18) A14=$(v 16 14) C18=$(v 32 18) L28=$(v 32 28) L18=$(v 32 18) L48=$(v 32 48) L24=$(v 32 24)
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
A="--reps 8 --stages"
timeout 150 $N/sluice-bench moe --batches 16,32 $A --variants "$B/$A18/$A14/$C18/$C18/$A14/$A18/$B" > $OUT/s.log 2>&1
echo "s (B A18 A14 C18 C18 A14 A18 B; ms/queued@MHz):$(row $OUT/s.log)"
for p in 1 2; do
  timeout 200 $N/sluice-bench moe --batches 64,128 --routing random $A --variants "$B/$L28/$L18/$L48/$L48/$L18/$L28/$B" > $OUT/m$p.log 2>&1
  echo "m$p (B L28 L18 L48 L48 L18 L28 B):$(row $OUT/m$p.log)"
done
timeout 200 $N/sluice-bench moe --batches 256,512 $A --variants "$B/$L28/$L48/$L24/$L24/$L48/$L28/$B" > $OUT/l.log 2>&1
echo "l (B L28 L48 L24 L24 L48 L28 B):$(row $OUT/l.log)"
timeout 150 $N/sluice-bench moe --batches 64,128,256 --routing random --no-shared $A --variants "$B/$L28/$L48/$B" > $OUT/n.log 2>&1
echo "n (no shared; B L28 L48 B):$(row $OUT/n.log)"
st() { awk '/^variant:/{v++} v<=4 && /stages/ && / random /{print "v" v ": " $0}' "$1" | sed -E 's/ (sh-dn|dn2|combine|guw|dnw) [0-9.]+-[0-9.]+//g' | cut -c1-200; }
for f in s m1 l n; do echo "-- $f"; st $OUT/$f.log; done
cd $OUT && tar czf v29-run1.tgz --remove-files test-new.log s.log m1.log m2.log l.log n.log 2>/dev/null; ls $OUT
