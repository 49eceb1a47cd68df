#!/usr/bin/env bash
# v36 run 1 (bench/NOTES.md v36 (1)): where the router's head goes at 128-512. 4e99dd9's stage traces: at 512 the
# logits start at 51 us (the shared gate/up's 64-token blocks, forked before the router, hold every SM from 0) and the
# lists end at 113 us; at 256 the top-k takes 31-49 us beside the shared gate/up. Variants of the fork point
# (moe_cuda_ws.shared_fork, bench field FK): B (1: before the router), F2 (after the router, beside the routed launches
# only), F3 (after the logits), F4 (before the router, joined before the routed launches), F0 (no second stream: after
# the router in the stream), at 128, 256 and 512 with stage traces; then --no-shared (the router's span alone).
# Prediction: F2 at 512 ends the lists by ~30 us and the row -3..6 %; at 256 -1..3 %; at 128 within 1 %.
source bench/runs/lib.sh
build_new | cut -c1-200
B=$(variant) F2=$(variant FK=2) F3=$(variant FK=3) F4=$(variant FK=4) F0=$(variant FK=0)
timeout 280 $N/sluice-bench moe --batches 128,256,512 --reps 8 --stages --variants "$B/$F2/$F3/$F4/$F0/$B" > $OUT/b-fk-1.log 2>&1
echo "== fk/1 (B F2 F3 F4 F0 B):$(row $OUT/b-fk-1.log)"
grep -E "stages (256|512) random|^variant" $OUT/b-fk-1.log | sed -E 's/^variant:.*/variant/' | cut -c1-330
timeout 100 $N/sluice-bench moe --batches 256,512 --reps 8 --stages --no-shared --routing random > $OUT/b-ns.log 2>&1
echo "== no-shared:$(row $OUT/b-ns.log)"
grep -E "stages" $OUT/b-ns.log | cut -c1-300
