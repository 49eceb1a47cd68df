#!/usr/bin/env bash
# v31 run 2 (bench/NOTES.md v31 (2)): batches 1-8 through the fused 1-tile stages (moe_expert_args.one_launch 0, the
# shared expert's own launches on the second stream) instead of the one expert launch. Why: in a1668ff's traces the one
# launch streams its ~655 MB at 8 tokens at 3.70 TB/s (fused1 10.2-187.4 us), the fused 1-tile launch at 16 and 32 at
# 4.12-4.15 TB/s (17.8-295.0, 23.0-499.9). Prediction: at 8 the head grows (the fused launch starts at ~15-18 us, after
# the 2-tile gate/up's release, against 10.2) but the stream at ~4.1 TB/s takes ~159 us: 8 -4..6 %, 5-7 -2..4 %,
# 1-2 slower (there the shared expert's 25 MB is a fifth of the bytes and its launches need SMs the router holds).
# Variants in one process, B F S R B F S R: F = FS 0 FM 1 SH 1 (every T <= 8 fused), S = SH 1 (the one launch without
# the shared items, those forked), R = SR 1 (64-row down items in the one launch: twice the down items, half the size).
# Then the new test cases (MOE_TEST_ONLY "below 9", and the one launch's). Run after v31-run1.sh in the same call
# (it builds $N); no carry.
source bench/runs/lib.sh
[ -x $N/sluice-bench ] || build_new
B=$(variant) F=$(variant FS=0 FM=1 SH=1) S=$(variant SH=1) R=$(variant SR=1)
timeout 60 env MOE_TEST_ONLY="below 9" $N/test_moe_gpu > $OUT/t-below9.log 2>&1; echo "test below 9: rc $? $(tail -1 $OUT/t-below9.log)"
timeout 60 env MOE_TEST_ONLY="one expert launch" $N/test_moe_gpu > $OUT/t-one.log 2>&1; echo "test one launch: rc $? $(tail -1 $OUT/t-one.log)"
for rt in random skewed; do
  timeout 150 $N/sluice-bench moe --batches 1,2,3,4,5,6,7,8 --routing $rt --reps 8 --variants "$B/$F/$S/$R/$B/$F/$S/$R" > $OUT/v-$rt.log 2>&1
  echo "== $rt (us unqueued/queued@MHz: B F S R B F S R)"
  awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}' $OUT/v-$rt.log
done
timeout 60 $N/sluice-bench moe --batches 1,4,8 --routing random --reps 4 --stages --variants "$B/$F" > $OUT/st.log 2>&1
grep stages $OUT/st.log | cut -c1-260
