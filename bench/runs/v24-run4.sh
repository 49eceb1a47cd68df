#!/usr/bin/env bash
# v24 run 4 (bench/NOTES.md v24 (5)): the shared expert's token tile above 64 tokens (compile-time SH_GU_NTT_L, SH_DN_NTT_L,
# SH_D). One device call (~3 min), nothing to carry; files in $OUT (run4.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: g8:-DSH_GU_NTT_L=8 g8d3:-DSH_GU_NTT_L=8,-DSH_D=3 g8n16:-DSH_GU_NTT_L=8,-DSH_DN_NTT_L=16" TESTS="none" ROUNDS=2 \
  BENCH_ARGS="--batches 128,256,512 --reps 12 --stages" bash bench/moe_ab.sh 2>&1 | grep -vE "^== |^NVIDIA"
for n in base g8 g8d3 g8n16; do echo "$n: $(grep -E 'stages (256|512) (random|skewed)' $OUT/bench-$n-1.log | grep -oE '(stages [0-9]+ [a-z]+|sh-gu [0-9.-]+|sh-dn [0-9.-]+|combine [0-9.-]+|lists [0-9.-]+)' | tr '\n' ' ')"; done
cd $OUT && tar czf run4.tgz --remove-files bench-*.log
