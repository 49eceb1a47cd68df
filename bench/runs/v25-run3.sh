#!/usr/bin/env bash
# v25 run 3 (bench/NOTES.md v25 (6)): the committed run at the commit given as $1 (as v24 run 5): the full
# test_moe_gpu (178 cases), test_backend_cuda, the hub fixture's generate, the peer (now also with each replay
# queued behind a spin), three bench processes with stage traces (every row also read queued). Carry .debs.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-out}
REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
grep -E "all passed|FAIL" $OUT/test.log | head -3; tail -2 $OUT/backend.log; cat $OUT/peer.txt
