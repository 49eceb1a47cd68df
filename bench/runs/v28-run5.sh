#!/usr/bin/env bash
# v28 run 5: test_moe_gpu's TL 4 cases only (5-8 tokens through the grouped top-k blocks and the lists launch, then the
# one expert launch; measured faster in run 4, bench/NOTES.md v28 (5)), so the next session can make TL 4 the default
# with its committed run. One device call (~1 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
MOE_TEST_ONLY="TL 4" timeout 100 /tmp/moe-ab/new/test_moe_gpu > $OUT/test-tl4.log 2>&1
echo "test 'TL 4': rc $? $(grep -c rel_l2 $OUT/test-tl4.log) cases, $(tail -1 $OUT/test-tl4.log)"; grep -E "rel_l2|FAIL" $OUT/test-tl4.log | cut -c1-150
