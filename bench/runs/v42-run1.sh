#!/usr/bin/env bash
# v42 run 1 (bench/NOTES.md v42 (1)): where the layer's energy goes, priced in pJ per byte under sustained load (v41
# (4)'s --power windows). (a) `sluice-bench stream --power`: the 8 GiB read kernel and the steady compute-free stream
# (2640 warps x 512 chunks) through the expert kernels' cp.async ring with one word read back (mode 0), with every
# byte read back as fp4_read does (1), and straight into registers with no ring (2). (b) MOE_PROBE builds with bit 16
# (the probes in every FP4 body, v42): q1 one HMMA per FP4 word, q2 no scale multiply, q4 no FP4 decode, q8 no
# activation reloads, q6 q2+q4, q15 all four (wrong results: no test), each at 64, 256, 512 random, its burst reading
# and a 2 s --power window; base first and last.
source bench/runs/lib.sh
VARIANTS="base: q1:-DMOE_PROBE=17 q2:-DMOE_PROBE=18 q4:-DMOE_PROBE=20 q8:-DMOE_PROBE=24 q6:-DMOE_PROBE=22 q15:-DMOE_PROBE=31" \
  TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -E "^==|did not build"
timeout 80 /tmp/moe-ab/base/sluice-bench stream --power 2000 > $OUT/s1.log 2>&1
echo "stream rc $?"; grep -E "ceiling|power|\(" $OUT/s1.log
i=0
for n in base q1 q2 q4 q8 q6 q15 base; do
  i=$((i + 1))
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 64,256,512 --routing random --reps 4 --power 2000 > $OUT/p$i-$n.log 2>&1
  echo "== $i $n rc $? $(grep -oE 'ceiling [0-9.]+' $OUT/p$i-$n.log)"
  awk '/^ +[0-9]+ +random/{b[$1]=$3} /^  power read/{print "   read:", $0} /^  power [0-9]+ random/{t=$2; printf "   %s burst %.4f ms | sustained %s ms, %s W, %s pJ/B, NVML %s MHz\n", t, b[t], $9, $14, $20, $25}' $OUT/p$i-$n.log
done
