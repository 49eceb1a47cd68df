#!/usr/bin/env bash
# v20 run 7 (bench/NOTES.md v20 (6)): what the top-k + lists launch waits on at batches 1-8: its phases in the stage
# trace (-DMOE_TRACE_TL=1: "topk" = PDL wait end -> each warp's top-k end, "lists" = the lists after the barrier).
# Run from the repo root on the GPU machine (nothing to carry).
export PATH=$PATH:/usr/local/cuda/bin
VARIANTS="tl:-DMOE_TRACE_TL=1" TESTS="none" ROUNDS=1 BENCH_ARGS="--batches 1,8,16,32 --stages" bash bench/moe_ab.sh > /dev/null
grep -E "^ +[0-9]+ +(random|skewed)|stages" ${OUT:-/tmp/moe-ab-out}/bench-tl-1.log
cd ${OUT:-/tmp/moe-ab-out} && tar czf ab.tgz --remove-files bench-*.log
