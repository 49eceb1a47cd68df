#!/usr/bin/env bash
# v34 run 4 (bench/NOTES.md v34 (4)): the combine joined to the shared expert's launches through their down launch's
# programmatic event (JP 1, moe_cuda_ws.shared_join_pdl, new) instead of their completion. Why: at 16-512 the
# combine's first block starts 3-5 us after the last of the 2-tile down and the shared down ends (88680d4's stage
# traces: 16 3.5 us, 32 3.1, 64 3.8, 128 3.8 after the shared down), because its edge from the side stream is a full
# one; with the programmatic event it is launched once every shared-down block has started and waits in its
# griddepcontrol.wait. Prediction: the combine starts ~1 us after them, 16 -0.8 %, 32 -0.5 %, 64-256 -0.2..0.3 %,
# skewed 16-128 -1..3 %. Builds new, runs its new test cases (each also replayed from a graph and compared bit for
# bit), then one process B JP B JP at 16-256 with stage traces and one JP B JP B at 16-128. No carry.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "joined"
grep -c "bit-identical" $OUT/t-new-joined.log
B=$(variant) J=$(variant JP=1)
timeout 240 $N/sluice-bench moe --batches 16,32,64,128,256 --reps 8 --stages --variants "$B/$J/$B/$J" > $OUT/b-jp-1.log 2>&1
echo "== jp/1 (B JP B JP):$(row $OUT/b-jp-1.log)"
grep -E "stages (16|128) (random|skewed)" $OUT/b-jp-1.log | cut -c1-260
timeout 200 $N/sluice-bench moe --batches 16,32,64,128 --reps 8 --variants "$J/$B/$J/$B" > $OUT/b-jp-2.log 2>&1
echo "== jp/2 (JP B JP B):$(row $OUT/b-jp-2.log)"
