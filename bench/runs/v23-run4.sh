#!/usr/bin/env bash
# Ran on the tree of 0caa025. MOE_GU2_BPS no longer exists (removed after session 14's runs, bench/NOTES.md v23 (6)),
# so rerun it from that commit: git worktree add /tmp/v23-run4 0caa025
# v23 run 4 (bench/NOTES.md v23 (5)), session 14. One device call (~4 min).
# At 256 random the 2-tile gate/up runs alone 50-193 us (its 4 blocks per SM fill every SM's registers, so the fused
# 1-tile launch's blocks wait for its blocks to exit) at ~55 % of the read ceiling. A probe of co-running: its grid
# held to 1 (bps1) or 2 (bps2) blocks per SM at T <= 256 (MOE_GU2_BPS, a static cap: skewed routing, where all the
# work is 2-tile, must lose), so the fused launch's blocks share every SM with it from the start.
# Batches 64-512 random and skewed, two rounds; test_moe_gpu on bps1.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run4.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: bps1:-DMOE_GU2_BPS=1 bps2:-DMOE_GU2_BPS=2" \
  TESTS="bps1" TEST_TIMEOUT=200 ROUNDS=2 BENCH_ARGS="--batches 64,128,256,512 --reps 12 --stages" bash bench/moe_ab.sh
for n in base bps1 bps2; do echo "== stages $n 256"; grep -E "stages (128|256) random" $OUT/bench-$n-1.log | sed -E 's/ sh-gu.*//'; done
cd $OUT && tar czf run4.tgz --remove-files bench-*.log test-*.log
