#!/usr/bin/env bash
# v41 run 2 (bench/NOTES.md v41 (2)): the tests at the commit given as $1, no bench: the whole test_moe_gpu and the
# engine's test_backend_cuda (with v41's one-step case: the shared expert's bf16 GEMMs in the engine) and the hub
# generate. Carry .debs.
source bench/runs/lib.sh
PEER=0 REPEAT=0 COMMIT=$1 bash bench/moe_device_run.sh 2>&1 | grep -vE "rel_l2|graph replays" | tail -40
grep -E "all passed|FAIL" $OUT/test.log | head -5; echo "cases: $(grep -c rel_l2 $OUT/test.log)"
tar xzf $OUT/moe-out.tgz -C $OUT backend.log generate.log 2>/dev/null; cat $OUT/backend.log; cat $OUT/generate.log
ls $OUT
