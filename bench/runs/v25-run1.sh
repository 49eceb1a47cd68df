#!/usr/bin/env bash
# v25 run 1 (bench/NOTES.md v25 (1)-(4)); replaces the WG_INFL / ES scripts prepared in session 15, whose two
# questions it also asks. One device call (~7 min), nothing to carry; files in $OUT.
# (1) test_moe_gpu on the default build: the first run of the stage_launches refactor (3b5915e) and of the
#     SW cases (the shared expert's GEMMs on wgmma, k_shared_wg); (2) SW against today's shared launches at
#     16-512, random and skewed, two processes, with stage traces; every row also reads the replays unqueued
#     (the pre-v25 timing) beside the held ones; (3) ES 2 against 8 at batches 1-8 (v24 weak spots); (4) ncu: the
#     2-tile gate/up alone at 512, base against WG with two wgmma groups in flight (WG_INFL 2).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: wg2:-DMOE_WG2=1,-DWG_INFL=2" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
B=/tmp/moe-ab/base
timeout 300 $B/test_moe_gpu > $OUT/test-base.log 2>&1; echo "test base: rc $? $(tail -1 $OUT/test-base.log)"
grep -B1 FAIL $OUT/test-base.log | head -10; grep "wgmma" $OUT/test-base.log | head -8
P1=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2 P2=16,128,64,32,9,2,512,512
D=$P1,2,$P2
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s;", v, $1, substr($2,1,1), $3, $NF}' "$1"; }
for r in 1 2; do
  timeout 150 $B/sluice-bench moe --batches 16,64,128,256,512 --reps 8 --stages --variants "$D,0/$D,16" > $OUT/sw-$r.log 2>&1
  echo "SW round $r (v1 SW 0, v2 SW 16; ms held/unqueued):$(row $OUT/sw-$r.log)"
done
grep -E "stages (128|256|512) random" $OUT/sw-1.log | cut -c1-260
for r in 1 2; do
  timeout 100 $B/sluice-bench moe --batches 1,2,4,8 --reps 12 --stages --variants "$P1,2,$P2/$P1,8,$P2" > $OUT/es-$r.log 2>&1
  echo "ES round $r (v1 ES 2, v2 ES 8):$(row $OUT/es-$r.log)"
done
grep -E "stages (4|8) random" $OUT/es-1.log | cut -c1-200
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active"
for n in base wg2; do
  timeout 45 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi2ELi0E" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-$n.txt 2>&1
  echo "== ncu $n: $(grep -E "dram__|gpu__time|inst_issued" $OUT/ncu-$n.txt | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
cd $OUT && tar czf run1.tgz --remove-files ncu-*.txt test-*.log sw-*.log es-*.log 2>/dev/null; ls $OUT
