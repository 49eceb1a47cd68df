#!/usr/bin/env bash
# v25 run 2 (prepared in session 15, not yet run; bench/NOTES.md v24 weak spots): the shared expert's gate/up tiles
# before the one expert launch's wait on the lists at batches 4-8 (bench --variants field ES, moe_cuda_ws.
# fs_early_sh_max_t: 2 today, from v18's A/B, where 8 read -1.9 % and 4 +1.4 %). At batch 8 the routed items wait
# for the lists until ~15 us while HBM streams only the router's bytes. Runtime variants of the default build, two
# processes, ~1.5 min; nothing to carry.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
P1=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2 P2=16,128,64,32,9,2,512,512
for r in 1 2; do
  timeout 120 /tmp/moe-ab/base/sluice-bench moe --batches 1,2,4,8 --reps 12 --stages --variants "$P1,2,$P2/$P1,8,$P2" > $OUT/es-$r.log 2>&1
  echo "round $r: $(awk '/^variant:/{v++; printf " ES%s:", v == 1 ? 2 : 8} /^ +[0-9]+ +(random|skewed)/{printf " %s %s %s;", $1, substr($2,1,1), $3}' $OUT/es-$r.log)"
done
grep -E "^variant|stages (4|8) random" $OUT/es-1.log | cut -c1-200
