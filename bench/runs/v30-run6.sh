#!/usr/bin/env bash
# v30 run 6 (bench/NOTES.md v30 (6)): the committed run at the commit given as $1 (as v29 run 3: the full test_moe_gpu,
# test_backend_cuda, the hub generate, the peer, three bench processes with stage traces), then in the same call
# v29's defaults (ES 2, DM 256, X4 256) against v30's in one process, V29 B B V29, at the JSON's batches where they
# differ and at 224 / 320 (the grid bound of v30 (3) is compiled in: both columns have it). Carry .debs. One device
# call (~6 min).
# (As it ran, a line `OUT=/tmp/moe-out` followed the source and sent every file to a folder the run tool does not
# bring back; a second call copied them. Removed: $OUT is the tool's folder, as moe_device_run.sh expects.)
source bench/runs/lib.sh
REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
grep -E "all passed|FAIL" $OUT/test.log | head -3; grep -c rel_l2 $OUT/test.log; tar xzf $OUT/moe-out.tgz -C /tmp backend.log peer.txt 2>/dev/null; tail -2 /tmp/backend.log; head -3 /tmp/peer.txt
SB=/tmp/moe-build/sluice-bench   # built by moe_device_run.sh (lib.sh variant reads its defaults)
B=$(variant) V29=$(variant ES=2 DM=256 X4=256)
timeout 150 $SB moe --batches 1,4,224,256,320,512 --reps 8 --variants "$V29/$B/$B/$V29" > $OUT/d.log 2>&1
echo "(us unqueued/queued@MHz: V29 B B V29)"
awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}' $OUT/d.log
cd $OUT && tar czf v30-defaults.tgz --remove-files d.log; ls $OUT
