#!/usr/bin/env bash
# v26 run 4 (bench/NOTES.md v26 (4)): the wide (X4) kernels' register budget. base: 4 n-tiles, activations double-
# buffered, 224 registers, 2 blocks/SM; sb3: single-buffered activations (MOE_XSB), 160 registers, 3 blocks/SM; w8: 8
# n-tiles (64-token items, MOE_NTW 8), single-buffered, 250 registers, 2 blocks/SM. Each variant's X4 test cases
# (MOE_TEST_ONLY="4-tile"), then sluice-bench at 256 and 512 (random, skewed), A B C A B C. One device call (~6 min).
export PATH=$PATH:/usr/local/cuda/bin
MOE_TEST_ONLY="4-tile" TEST_TIMEOUT=120 VARIANTS="base: sb3:-DMOE_XSB=1,-DMOE_MINB4=3 w8:-DMOE_NTW=8,-DMOE_XSB=1" ROUNDS=2 \
  BENCH_ARGS="--batches 256,512 --reps 8 --stages" bash bench/moe_ab.sh 2>&1
OUT=${OUT:-/tmp/moe-ab-out}
for n in base sb3 w8; do echo "== $n: $(grep -c rel_l2 $OUT/test-$n.log) cases; $(grep -E 'stages 512 skewed' $OUT/bench-$n-1.log | cut -c1-200)"; done
cd $OUT && tar czf v26-run4.tgz --remove-files test-*.log bench-*.log 2>/dev/null; ls $OUT
