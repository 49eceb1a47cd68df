#!/usr/bin/env bash
# v42 run 2 (bench/NOTES.md v42 (2)): (a) in one moe process, the read kernel's energy over the memset buffer (the
# ceiling's) and over random bytes (sluice-bench moe --power now prints both), beside the base rows 1-512; (b) the
# probes of run 1 where the layer is latency-bound rather than at the cap: base / q6 (no FP4 decode, no scale multiply)
# / q8 (no activation reloads) / q15 (all four) at 1, 4, 8 random (the T <= 8 launch's FP4 body takes the probes with
# bit 16), burst and a 2 s --power window; base first and last.
source bench/runs/lib.sh
VARIANTS="base: q6:-DMOE_PROBE=22 q8:-DMOE_PROBE=24 q15:-DMOE_PROBE=31" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 \
  | grep -E "did not build"
show() {   # the read lines, then per row: burst ms | sustained ms, W, pJ/B, NVML MHz
  awk '/^ +[0-9]+ +random/{b[$1]=$3} /^  power read/{print "  ", $0} /^  power [0-9]+ random/{t=$2; printf "   %s burst %.4f ms | sustained %s ms, %s W, %s pJ/B, NVML %s MHz\n", t, b[t], $9, $14, $20, $25}' "$1"
}
timeout 120 /tmp/moe-ab/base/sluice-bench moe --batches 1,8,64,256,512 --routing random --reps 4 --power 2000 > $OUT/r0-base.log 2>&1
echo "== 0 base rc $? $(grep -oE 'ceiling [0-9.]+' $OUT/r0-base.log)"; show $OUT/r0-base.log
i=0
for n in base q6 q8 q15 base; do
  i=$((i + 1))
  timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,4,8 --routing random --reps 4 --power 2000 > $OUT/r$i-$n.log 2>&1
  echo "== $i $n rc $? $(grep -oE 'ceiling [0-9.]+' $OUT/r$i-$n.log)"; show $OUT/r$i-$n.log | grep -v "power read:"
done
