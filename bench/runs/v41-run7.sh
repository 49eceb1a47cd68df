#!/usr/bin/env bash
# v41 run 7: the final tree's engine test (test_backend_cuda, the hub generate) and one short --power row, after
# moe_cuda_alloc_shared_bf16 took local pointers and --power destroys its read stream (behaviour unchanged).
source bench/runs/lib.sh
TEST=0 PEER=0 REPEAT=0 COMMIT=$1 bash bench/moe_device_run.sh > $OUT/dev.log 2>&1
tar xzf $OUT/moe-out.tgz -C $OUT backend.log 2>/dev/null; grep -E "one step|FAIL|all passed|prefill" $OUT/backend.log
timeout 60 /tmp/moe-build/sluice-bench moe --batches 8 --routing random --reps 2 --power 1000 2>&1 | grep -E "power|ceiling"
