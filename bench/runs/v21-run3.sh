#!/usr/bin/env bash
# v21 run 3 (bench/NOTES.md v21 (6)-(7)), session 12. One device call (~3 min).
# (6) The top-k launch alone on its SMs (moe_cuda_ws.topk_excl_max_t, --variants field TX): run 2 found the batch-1
# top-k's loads landed 1.7 us after its wait and its arithmetic took 4.6 us more, one warp sharing its SM's issue
# slots with the expert launch's warps; reserving 200 KB of shared memory keeps every other block of the layer off
# that SM. test_moe_gpu (which runs the top-k both ways), then TX 8 / 32 / 512 against the default, two processes.
# (7) At 512 run 1 had the shared expert's gate/up (side stream, forked before the router) hold the SMs until the
# logits could start at 52-64 us: the shared expert forked after the router (FK 2) or after the logits (FK 3).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run3.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64
V="$D,0/$D,8/$D,32/$D,512/1,16,33,4,16,0,32,0,16,2/1,16,33,4,16,0,32,0,16,3"
VARIANTS="base:" TESTS="base" TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 1,4,8,16,32,64,128,256,512 --routing random --reps 12 --stages --variants $V" bash bench/moe_ab.sh > /dev/null
grep -h -E 'FAIL|passed|failed' $OUT/test-base.log | tail -3
for r in 1 2; do
  echo "== process $r"
  grep -E "^variant|^ +[0-9]+ +random|stages (1|8|32|64|512) random" $OUT/bench-base-$r.log |
    sed -E 's/^variant: .*shared expert launches from batch 16 \(second stream ([0-9])\).*top-k alone on its SMs up to batch ([0-9]+)/variant FK \1 TX \2/'
done
cd $OUT && tar czf run3.tgz --remove-files bench-*.log test-*.log
