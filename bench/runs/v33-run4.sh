#!/usr/bin/env bash
# v33 run 4 (bench/NOTES.md v33 (4)): the one expert launch's last gate/up tiles in K halves (-DMOE_GU_SPLIT=1,
# moe_cuda_ws.fs_gu_split, bench field GS). Why: v33 (1)-(2)'s item logs end every T <= 8 launch ~40 us (one whole
# gate/up tile) after its last gate/up tiles are drawn: their experts' down items wait for them, and splitting the
# last down items (DS) did not shorten that. Prediction: 4-8 -1..3 % at GS about one tile per warp (2112), 2-3 less.
# Needs .ab/head (b3cfebb's sources, made here: mkdir -p .ab/head && git archive b3cfebb kernels engine tests/gpu
# bench/sluice_bench.c bench/moe_ab.sh | tar -x -C .ab/head); carry .ab. Builds head / new (GS compiled out) / gs /
# gstr (gs with the item log); gs's new test cases and its T <= 8 cases; processes head new gs, twice, at 1-8 (gs: B, GS
# 1056, 2112, 4224); gs's item log at 8 (GS 2112).
source bench/runs/lib.sh
VARIANTS="head: new: gs:-DMOE_GU_SPLIT=1 gstr:-DMOE_GU_SPLIT=1,-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 \
  bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
G=/tmp/moe-ab/gs
for o in "K halves" "one expert launch" "sqrtsoftplus"; do
  f="$OUT/t-gs-${o%% *}.log"
  timeout 150 env MOE_TEST_ONLY="$o" $G/test_moe_gpu > "$f" 2>&1
  echo "test gs '$o': rc $? $(tail -1 "$f") ($(grep -c rel_l2 "$f") cases)"; grep FAIL "$f" | head -5
done
SB=$G/sluice-bench; B=$(variant) S1=$(variant GS=1056) S2=$(variant GS=2112) S4=$(variant GS=4224)
for r in 1 2; do
  for n in head new; do
    timeout 100 /tmp/moe-ab/$n/sluice-bench moe --batches 1,2,3,4,6,7,8 --reps 8 > $OUT/b-$n-$r.log 2>&1
    echo "== $n/$r:$(row $OUT/b-$n-$r.log)"
  done
  timeout 150 $G/sluice-bench moe --batches 1,2,3,4,6,7,8 --reps 8 --variants "$B/$S1/$S2/$S4" > $OUT/b-gs-$r.log 2>&1
  echo "== gs/$r (B GS1056 GS2112 GS4224):$(row $OUT/b-gs-$r.log)"
done
timeout 60 /tmp/moe-ab/gstr/sluice-bench moe --batches 8 --routing random --reps 2 --item-log --variants "$B/$S2" > $OUT/il4.log 2>&1
grep -hE "stages|items" $OUT/il4.log | cut -c1-2500
