#!/usr/bin/env bash
# v24 run 3 (bench/NOTES.md v24 (3)-(4)): the committed run at the commit given as $1 (test_moe_gpu, the engine's
# cuda backend test and generate, the PyTorch peer, 3 bench processes) and the stream probe with the touch table.
# Carry .debs. Files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-out}
REPEAT=3 PEER_TIMEOUT=100 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -60
/tmp/moe-build/sluice-bench stream --out $OUT/stream-touch.json 2>&1 | tail -20
