#!/usr/bin/env bash
# (Its HG / HD / HN fields exist only in a8111d6, the K-parts build; 4e99dd9 removed them: check that commit out to rerun.)
# v35 run 2 (bench/NOTES.md v35 (2)): run 1 refuted the gate/up parts (HG 4: at 32-64 its 4x blocks take the SMs
# before the router's logits, which start 20 us late; at 16 the shared expert is done by 37 us and gains nothing:
# its slow span sat in the head and the drain, where SMs idle anyway). What is left on the critical path is the shared
# down's tail at 128 (B's trace: 882-920 us, 9 us past the fused launch). Here the down's parts alone: D2 (HD 2) and D4
# (HD 4) against B at 16-256, one process B D2 D4 B D4 D2 with stage traces, then D2 B D2 B at 64-128. Prediction: the
# 128 tail 9-15 -> 3-7 us, 128 -0.5..1 % (queued as well), 16-64 and 256 within 0.3 %. Builds new; its v35 down-part
# test cases passed in run 1.
source bench/runs/lib.sh
build_new | cut -c1-200
B=$(variant) D2=$(variant HD=2) D4=$(variant HD=4)
timeout 250 $N/sluice-bench moe --batches 16,32,64,128,256 --reps 8 --stages --variants "$B/$D2/$D4/$B/$D4/$D2" > $OUT/b-kd-1.log 2>&1
echo "== kd/1 (B D2 D4 B D4 D2):$(row $OUT/b-kd-1.log)"
grep -E "stages (64|128) random" $OUT/b-kd-1.log | cut -c1-300
timeout 150 $N/sluice-bench moe --batches 64,128 --reps 12 --routing random --variants "$D2/$B/$D2/$B" > $OUT/b-kd-2.log 2>&1
echo "== kd/2 (D2 B D2 B):$(row $OUT/b-kd-2.log)"
