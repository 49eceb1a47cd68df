#!/usr/bin/env bash
# v21 run 4 (bench/NOTES.md v21 (8)), session 12. One device call (~2 min).
# The committed-style run of 4e4295d (the top-k alone on its SM at 1-32 tokens) read skewed 4 at 77.1 us against
# v19's 73.3: in the one expert launch (T <= 8) every warp's first items are its own by number, so the blocks
# held off the top-k's SM start theirs late. The rule against a lower bound: TX 0, TX 32 from 1 (4e4295d), from 9
# and from 16 (--variants fields TX, TM), random and skewed, two processes.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run4.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64
VARIANTS="base:" TESTS="none" ROUNDS=2 \
  BENCH_ARGS="--batches 1,4,8,16,32 --reps 12 --variants $D,0,1/$D,32,1/$D,32,9/$D,32,16" bash bench/moe_ab.sh > /dev/null
for r in 1 2; do
  echo "== process $r"
  grep -E "^variant|^ +[0-9]+ +(random|skewed)" $OUT/bench-base-$r.log | sed -E 's/^variant: .*top-k alone on its SMs at batches ([0-9]+)-([0-9]+)/variant TX \1-\2/'
done
cd $OUT && tar czf run4.tgz --remove-files bench-*.log
