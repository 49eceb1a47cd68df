#!/usr/bin/env bash
# v31 run 4 (bench/NOTES.md v31 (4)): the committed run at the commit given as $1 (as v30 run 6: the full test_moe_gpu,
# test_backend_cuda, the hub generate, the peer, three bench processes with stage traces), then in the same call v30's
# one expert launch (4 blocks per SM at every batch: FN 9) against v31's (5 blocks at 2-7) in one process, V30 B B V30,
# at 1-8, random and skewed. Carry .debs. One device call (~7 min).
source bench/runs/lib.sh
REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
grep -E "all passed|FAIL" $OUT/test.log | head -3; grep -c rel_l2 $OUT/test.log; tar xzf $OUT/moe-out.tgz -C /tmp backend.log peer.txt 2>/dev/null; tail -2 /tmp/backend.log; head -3 /tmp/peer.txt
SB=/tmp/moe-build/sluice-bench   # built by moe_device_run.sh (lib.sh variant reads its defaults)
B=$(variant) V30=$(variant FN=9)
timeout 120 $SB moe --batches 1,2,3,4,5,6,7,8 --reps 8 --variants "$V30/$B/$B/$V30" > $OUT/d.log 2>&1
echo "(us unqueued/queued@MHz: V30 B B V30)"
awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}' $OUT/d.log
cd $OUT && tar czf v31-defaults.tgz --remove-files d.log; ls $OUT
