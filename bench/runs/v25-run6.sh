#!/usr/bin/env bash
# v25 run 6 (bench/NOTES.md v25 (8)): where random 512's unqueued replays lose ~250 us. Runs 3 and 5 (six processes,
# two machines) read it at 1.60-1.66 ms unqueued, 1.39-1.44 queued behind the hold kernel, with stage traces ending
# at 1.33-1.39 ms; skewed 512 and every other batch show no such gap, and runs 1-2 (4-variant processes at 256-512,
# 8 reps) read 1.32-1.35 unqueued. Each row now also logs the host's median time inside cudaGraphLaunch. Three
# processes, random only: (1) the committed protocol (every batch, reps 12, stage traces) with 6 sustain rounds per
# row; (2) 512 alone, fresh; (3) 512 before 256. One device call (~2.5 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
S=/tmp/moe-ab/base/sluice-bench
timeout 120 $S moe --routing random --reps 12 --stages --sustain 6 > $OUT/g1.log 2>&1
timeout 60 $S moe --batches 512 --routing random --reps 12 --sustain 6 > $OUT/g2.log 2>&1
timeout 60 $S moe --batches 512,256 --routing random --reps 12 --sustain 6 > $OUT/g3.log 2>&1
for f in g1 g2 g3; do echo "== $f"; grep -E "^ +batch|^ +[0-9]+ +random|sustain (256|512)|stages 512" $OUT/$f.log | cut -c1-230; done
