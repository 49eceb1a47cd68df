#!/usr/bin/env bash
# v21 run 2 (bench/NOTES.md v21 (3)-(4)), prepared in session 12, not yet run. One device call (~6 min).
# (3) b2469c1 took the router top-k's scores out of local memory (every token stored 8 per lane to the stack):
# test_moe_gpu on it (hash routing included), then head / base (ms) and headtl / tl (the top-k + lists launch's
# phases, -DMOE_TRACE_TL=1) at batches 1-32, two rounds, interleaved; head = -DMOE_TOPK_STACK=1, the select
# as before b2469c1 (its router and fused PTX are da528df's, diffed).
# (4) What the batch-1 top-k's 6.5 us are (v20 (6)): "topk-ld" in the tl build's stage trace starts when the
# top-k's loads have landed; and the router logits in 4, 2 or 1 K parts (the top-k then loads 4, 2 or 1 rows).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run2.tgz: every log).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="head:-DMOE_TOPK_STACK=1 base: headtl:-DMOE_TOPK_STACK=1,-DMOE_TRACE_TL=1 tl:-DMOE_TRACE_TL=1" TESTS="base" TEST_TIMEOUT=300 ROUNDS=2 \
  BENCH_ARGS="--batches 1,4,8,16,32 --routing random --reps 12 --stages" bash bench/moe_ab.sh
grep -h -E 'FAIL|passed|failed' $OUT/test-base.log | tail -5
for n in head base; do echo "router stack frames $n: $(grep -h 'stack frame' /tmp/moe-ab/$n/moe_router.ptxas | sort | uniq -c | tr -s ' ' | tr '\n' ';')"; done
for n in headtl tl; do
  echo "== stages $n"; grep -E "stages (1|4|8|16|32) random" $OUT/bench-$n-1.log $OUT/bench-$n-2.log
done
timeout 120 /tmp/moe-ab/tl/sluice-bench moe --batches 1,8 --routing random --reps 12 --stages \
  --variants 1,16,33,4/1,16,33,2/1,16,33,1 > $OUT/bench-tl-parts.log 2>&1
echo "== logits K parts 4 / 2 / 1 (tl build)"; grep -E "^variant|^ +[0-9]+ +random|stages" $OUT/bench-tl-parts.log | sed -E 's/^variant: .*logits K parts ([0-9]+) .*/variant K \1/'
cd $OUT && tar czf run2.tgz --remove-files bench-*.log test-*.log
