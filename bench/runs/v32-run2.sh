#!/usr/bin/env bash
# v32 run 2 (bench/NOTES.md v32 (2)): where the T <= 8 launch loses against a pure stream. The item log (new in v32:
# `sluice-bench moe --item-log` in a -DMOE_TRACE_ITEMS=1 build) records every warp-item's start, duration, kind and
# bytes; per 5 us it prints the warps busy with each kind and the TB/s the running items read. Questions: at 8 tokens,
# how fast does the stream run once all warps hold items (v31: 3.7 TB/s over the launch; the fused 1-tile kernel at 16
# 4.1), how long are the ramp after the lists and the drain at the end, and do down items wait (busy warps without
# bytes)? Batches 1, 3, 4, 8 random, 8 skewed; at 8 also the 5-block form (FX 8). One device call, no carry.
source bench/runs/lib.sh
VARIANTS="tr:-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
SB=/tmp/moe-ab/tr/sluice-bench
B=$(variant) B5=$(variant FX=8)
timeout 90 $SB moe --batches 1,3,4,8 --routing random --reps 2 --item-log > $OUT/il-r.log 2>&1
timeout 60 $SB moe --batches 8 --routing skewed --reps 2 --item-log > $OUT/il-s.log 2>&1
timeout 60 $SB moe --batches 8 --routing random --reps 2 --item-log --variants "$B5" > $OUT/il-r5.log 2>&1
grep -hE "stages|items" $OUT/il-r.log $OUT/il-s.log $OUT/il-r5.log
