#!/usr/bin/env bash
# v32 run 5 (bench/NOTES.md v32 (5)): the committed run at the commit given as $1 (as v31 run 4 without its A/B: the full
# test_moe_gpu, test_backend_cuda, the hub generate, the peer, three bench processes with stage traces). Carry .debs.
source bench/runs/lib.sh
REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
grep -E "all passed|FAIL" $OUT/test.log | head -3; grep -c rel_l2 $OUT/test.log; tar xzf $OUT/moe-out.tgz -C /tmp backend.log peer.txt 2>/dev/null; tail -2 /tmp/backend.log; head -3 /tmp/peer.txt
ls $OUT
