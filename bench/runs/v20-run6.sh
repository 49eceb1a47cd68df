#!/usr/bin/env bash
# v20 run 6 (bench/NOTES.md v20 (5)): the router top-k with one copy of its score code alone (f4713df's
# kernels/sm90/moe_router_dev.cuh on HEAD's sources: .ab/ctop) against HEAD (.ab/head), at the batches whose router
# runs top-k + lists as one launch (1-32). Make .ab first:
#   for v in head ctop; do mkdir -p .ab/$v && git archive HEAD kernels engine tests/gpu bench | tar -x -C .ab/$v; done
#   git show f4713df:kernels/sm90/moe_router_dev.cuh > .ab/ctop/kernels/sm90/moe_router_dev.cuh
# then run from the repo root on the GPU machine, carrying .ab.
export PATH=$PATH:/usr/local/cuda/bin
VARIANTS="head: ctop:" TESTS="ctop" TEST_TIMEOUT=300 ROUNDS=2 BENCH_ARGS="--batches 1,4,8,16,32 --stages" bash bench/moe_ab.sh |
  grep -v "^==" | tail -14
OUT=${OUT:-/tmp/moe-ab-out}
for r in 1 2; do for n in head ctop; do echo "== $n $r"; grep -E "stages [0-9]+ random" $OUT/bench-$n-$r.log; done; done
cd $OUT && tar czf ab.tgz --remove-files bench-*.log && ls
