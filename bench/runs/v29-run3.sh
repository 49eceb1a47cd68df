#!/usr/bin/env bash
# v29 run 3 (bench/NOTES.md v29 (3)): the committed run at the commit given as $1 (as v25 run 3: the full test_moe_gpu,
# test_backend_cuda, the hub generate, the peer, three bench processes with stage traces), then in the same call one
# A/B: the shared expert forked after the router (FK 2) against before it (FK 1, default) at 64-256 random, one
# process B F2 F2 B B F2 (run 1-2: without the shared expert the fused launch starts 9.6 / 13.5 / 24 us earlier at
# 64 / 128 / 256: the router beside its gate/up). Carry .debs. One device call (~7 min).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-out}
REPEAT=3 PEER_TIMEOUT=150 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
grep -E "all passed|FAIL" $OUT/test.log | head -3; tail -2 $OUT/backend.log 2>/dev/null; cat $OUT/peer.txt 2>/dev/null | head -3
P1=1,16,33,4,16,0,8,0,16 P2=1,256,0,0,8,24,3,16,4,0,8,2,1,4,2,2,16,128,64,0,9,4,512,512,0,1,512,256,32,1,1073741824,1073741824,0
B="$P1,1,$P2" F2="$P1,2,$P2"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
SB=/tmp/moe-build/sluice-bench   # built by moe_device_run.sh
timeout 150 $SB moe --batches 64,128,256 --routing random --reps 8 --stages --variants "$B/$F2/$F2/$B/$B/$F2" > $OUT/fk2.log 2>&1
echo "fk2 ($SB; B F2 F2 B B F2; ms/queued@MHz):$(row $OUT/fk2.log)"
awk '/^variant:/{v++} v<=2 && /stages/{print "v" v ": " $0}' $OUT/fk2.log | sed -E 's/ (dn2|guw|dnw) [0-9.]+-[0-9.]+//g' | cut -c1-230
cd $OUT && tar czf v29-fk2.tgz --remove-files fk2.log; ls $OUT
