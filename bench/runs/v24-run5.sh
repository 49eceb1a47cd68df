#!/usr/bin/env bash
# v24 run 5 (bench/NOTES.md v24 (6)): the committed run at the commit given as $1 (as run 3), then the shared gate/up's
# 64-token blocks at 512 against none (bench --variants field SX: 512 / 0), two processes. Carry .debs. Files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-out}
REPEAT=3 PEER_TIMEOUT=100 BENCH_TIMEOUT=120 COOL=30 COMMIT=$1 BENCH_ARGS="--reps 12 --stages" bash bench/moe_device_run.sh 2>&1 | tail -24
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512
for r in 1 2; do
  timeout 100 /tmp/moe-build/sluice-bench moe --batches 512 --reps 12 --variants "$D,512/$D,0" > $OUT/sx-$r.log 2>&1
  echo "round $r: $(awk '/^variant:/{v++; printf " SX%s:", v == 1 ? 512 : 0} /^ +[0-9]+ +(random|skewed)/{printf " %s %s %s;", $1, substr($2,1,1), $3}' $OUT/sx-$r.log)"
done
