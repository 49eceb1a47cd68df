#!/usr/bin/env bash
# v41 run 1 (bench/NOTES.md v41 (1)): the committed protocol of v32 run 5 at the commit given as $1 without its tests
# (TEST=0 ENGINE=0: the kernels are 78bdb6d's, whose 437 cases passed in v38; run 2 runs the tests at the final HEAD):
# the peer, then three bench processes with stage traces, the first committed JSON with sm_mhz after the v40 fix and
# sm_mhz_during.
source bench/runs/lib.sh
TEST=0 ENGINE=0 REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" \
  bash bench/moe_device_run.sh 2>&1 | tail -24
ls $OUT
