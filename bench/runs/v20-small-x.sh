#!/usr/bin/env bash
# Prepared in session 9 (bench/NOTES.md v19 (9)), not yet run: the T <= 8 expert launch with its x loads
# through L1 (MOE_SMALL_X_NC=1) and, on top, the 196 KB shared-memory configuration for it alone
# (MOE_CARVEOUT_SMALL=80, 60 KB of L1). Tests each variant, then two rounds at batches 1-8.
# Run from the repo root on the GPU machine (run tool; nothing to carry).
export PATH=$PATH:/usr/local/cuda/bin
VARIANTS="base: xnc:-DMOE_SMALL_X_NC=1 xnc80:-DMOE_SMALL_X_NC=1,-DMOE_CARVEOUT_SMALL=80" TESTS="xnc xnc80" \
  TEST_TIMEOUT=300 ROUNDS=2 BENCH_ARGS="--batches 1,2,4,8 --stages" bash bench/moe_ab.sh
