#!/usr/bin/env bash
# v34 run 5: test_moe_gpu's new graph-replay cases (the default launch sequence captured in a CUDA graph, replayed
# twice on poisoned outputs, against the stream run bit for bit) and the cases around them. No carry.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "graph replay" "shared launches" "one expert launch, combine"
grep -c "bit-identical" $OUT/t-new-graph.log
