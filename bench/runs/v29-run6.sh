#!/usr/bin/env bash
# v29 run 6 (bench/NOTES.md v29 (5)): the full test_moe_gpu with v29's defaults (TL 4, tensor-core logits from 8, the
# shared expert's own launches and the fused 1-tile launch from 9 tokens). One device call (~4 min), no carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="new:" TESTS="new" TEST_TIMEOUT=250 ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
echo "$(grep -c rel_l2 $OUT/test-new.log) cases"; grep -B1 FAIL $OUT/test-new.log | head -8
cd $OUT && mv test-new.log test-v29-run6.log; ls $OUT
