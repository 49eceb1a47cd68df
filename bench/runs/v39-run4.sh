#!/usr/bin/env bash
# v39 run 4 (bench/NOTES.md v39 (5)): the whole test_moe_gpu at HEAD in one process (its kernels are 78bdb6d's; the
# committed run's test reached its 300 s limit after 403 cases and ran the rest by name, v38 (4)).
source bench/runs/lib.sh
build_new | cut -c1-200
timeout 520 $N/test_moe_gpu > $OUT/test-full.log 2>&1
echo "test_moe_gpu: rc $? $(tail -1 $OUT/test-full.log) ($(grep -c rel_l2 $OUT/test-full.log) cases)"; grep FAIL $OUT/test-full.log | head -5
