#!/usr/bin/env bash
# v39 run 2 (bench/NOTES.md v39 (3)): 256's token chunks. v38's stage trace at 256 (moe-h200-78bdb6d-runs.txt): the
# 2-tile gate/up (the ~15 % of experts with 9-16 tokens) holds every SM slot 38-174 us at ~2.8 TB/s beside the shared
# GEMMs, the fused 1-tile launch runs 174-988, and the 2-tile down's blocks (their PDL wait is on the fused launch) run
# 953-1067 at ~2.3 TB/s as the layer's tail: ~70 us of the 1087 spent below the fused launch's 3.8 TB/s. v19 (4)
# served those experts as two 8-token chunks of the fused launch (TT: tok1_max_t, default 128) and read 256 equal
# (+6 % in another run), with v19's kernels. Prediction: TT 1024 at 256 -2..4 % (no 2-tile head or tail; the second
# chunk of each tile reads it ~1 ticket after the first, from L2, and pays its dequantisation again: ~15 % of 256's
# weight words twice), 192-288 alike, skewed 256 +5..15 % (its experts with 9-16 tokens all chunked; skewed is not a
# goal row). One process B C B C at 192-288, skewed 256, then stage traces of B and C at 256. No carry.
source bench/runs/lib.sh
[ -x $N/sluice-bench ] || build_new | cut -c1-200
B=$(variant) C=$(variant TT=1024)
timeout 240 $N/sluice-bench moe --batches 192,224,256,288 --routing random --reps 10 --variants "$B/$C/$B/$C" > $OUT/tt.log 2>&1
timeout 90 $N/sluice-bench moe --batches 256 --routing skewed --reps 10 --variants "$B/$C/$B/$C" > $OUT/tts.log 2>&1
grep -m1 ceiling $OUT/tt.log
echo "(us unqueued/queued@MHz: B C B C)"
table $OUT/tt.log $OUT/tts.log
timeout 90 $N/sluice-bench moe --batches 256 --routing random --reps 4 --stages --variants "$B/$C" > $OUT/ttt.log 2>&1
grep -E "stages 256 random" $OUT/ttt.log | cut -c1-330
