#!/usr/bin/env bash
# v26 run 6: a smoke test of the final commit after the X4 renames (PTX identical to e299e4e's): build, then the
# wide-kernel test cases (MOE_TEST_ONLY="wide") and the default path at batch 1, 64 and 257 ("nvfp4 sqrtsoftplus").
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
for f in wide "nvfp4 sqrtsoftplus"; do
  MOE_TEST_ONLY="$f" timeout 60 /tmp/moe-ab/base/test_moe_gpu > $OUT/t.log 2>&1
  echo "$f: rc $? $(grep -c rel_l2 $OUT/t.log) cases, $(tail -1 $OUT/t.log)"
done
