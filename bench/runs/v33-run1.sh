#!/usr/bin/env bash
# v33 run 1 (prepared in session 23, not yet run; bench/NOTES.md v32 weak spots (a)): the one expert launch's last routed
# down items in K halves (-DMOE_DN_SPLIT=1, moe_cuda_ws.fs_dn_split, bench field DS). Why: v32 (2)-(3)'s item log has
# batch 8 end with a ~10-12 us drain (fewer and fewer warps hold an item; every warp's last is a whole 37 KB down item).
# Prediction: 4-8 -1..3 % with DS about one item per warp (2112), less with fewer; 1 (KX 0 DS 2112: 2 K parts of its
# gate/up off) within 2 %. Builds new / ds / dstr (ds with the item log); ds's new test cases and its T <= 8 cases;
# processes new ds new ds at 1-8 (B, DS 1024, DS 2112, DS all); batch 1 with KX 0; ds's item logs at 4 and 8. No carry.
source bench/runs/lib.sh
VARIANTS="new: ds:-DMOE_DN_SPLIT=1 dstr:-DMOE_DN_SPLIT=1,-DMOE_TRACE_ITEMS=1" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 \
  | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
D=/tmp/moe-ab/ds
for o in "K halves" "one expert launch" "sqrtsoftplus"; do
  timeout 120 env MOE_TEST_ONLY="$o" $D/test_moe_gpu > "$OUT/t-ds-${o%% *}.log" 2>&1
  echo "test ds '$o': rc $? $(tail -1 "$OUT/t-ds-${o%% *}.log") ($(grep -c rel_l2 "$OUT/t-ds-${o%% *}.log") cases)"
done
B=$(variant) S1=$(variant DS=1024) S2=$(variant DS=2112) SA=$(variant DS=1048576)
for r in 1 2; do for n in new ds; do
  timeout 120 /tmp/moe-ab/$n/sluice-bench moe --batches 2,3,4,6,8 --reps 8 --variants "$B/$S1/$S2/$SA" > $OUT/b-$n-$r.log 2>&1
  echo "== $n/$r (B DS1024 DS2112 DSall):$(row $OUT/b-$n-$r.log)"
done; done
K0=$(variant KX=0) K0S=$(variant KX=0 DS=2112)
timeout 60 $D/sluice-bench moe --batches 1 --routing random --reps 8 --variants "$B/$K0/$K0S/$B/$K0/$K0S" > $OUT/k0.log 2>&1
echo "== batch 1 (B KX0 KX0+DS2112 x 2):$(row $OUT/k0.log)"
timeout 60 /tmp/moe-ab/dstr/sluice-bench moe --batches 4,8 --routing random --reps 2 --item-log --variants "$B/$S2" > $OUT/il.log 2>&1
grep -hE "stages|items" $OUT/il.log
