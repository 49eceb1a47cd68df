#!/usr/bin/env bash
# bench/NOTES.md v19 run 1. Run from the repo root on the GPU machine (run tool, carry [".ab"]).
# Needs .ab/head (0f41ddb's sources) made here first: mkdir -p .ab/head && git archive 0f41ddb kernels engine tests/gpu bench | tar -x -C .ab/head
# Run 1 itself built the inlined chunk tables and their 24-byte spill (fixed in 94cf0cf); fields 27-29 of --variants
# (T1, TT, TN) are spelled out because their defaults changed; head's binary reads only the first 26.
# v19 run 1: tests of the token-chunk split, spill locations, A/B against HEAD (0f41ddb)
export PATH=$PATH:/usr/local/cuda/bin
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2
D5=1,16,33,4,16,0,32,0,16,1,1,512,0,0,8,24,3,16,32,0,8,2,1,4,2,2
VARIANTS="head: new:" TESTS=new TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 16,64,128,256,512 --routing random --stages --variants $D,8,1073741824,1/$D,16,1073741824,1/$D5,16,1073741824,1/$D5,24,1073741824,1" \
  bash bench/moe_ab.sh
for n in head new; do
  cuobjdump -sass /tmp/moe-ab/$n/moe_expert.o | awk '/Function : /{f = ($0 ~ /k_experts1ILi1ELi2ELi0E/)} f' > $OUT/sass-$n.txt
  echo "$n: $(wc -l < $OUT/sass-$n.txt) lines, STL $(grep -c STL $OUT/sass-$n.txt), LDL $(grep -c LDL $OUT/sass-$n.txt)"
done
grep -h -E 'FAIL|passed|failed' $OUT/test-new.log | tail -5
