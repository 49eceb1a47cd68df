#!/usr/bin/env bash
# v41 run 3 (bench/NOTES.md v41 (3)): where the shared launches fork (FK) at 128-512 now that the shared GEMMs run on
# 32-64 SMs (GWT, v38), never measured since: B (FK 1, before the router) / F3 (after the logits) / F2 (after the
# router), and S1 (the shared GEMMs from 192, FK 1). Two processes, each variant twice per process.
source bench/runs/lib.sh
build_new
B=$(variant) F3=$(variant FK=3) F2=$(variant FK=2) S1=$(variant SG=192)
i=0
for o in "$B/$F3/$F2/$S1/$S1/$F2/$F3/$B" "$F3/$B/$S1/$F2/$F2/$S1/$B/$F3"; do
  i=$((i + 1))
  timeout 200 $N/sluice-bench moe --batches 128,192,256,320,512 --reps 12 --stages --variants "$o" > $OUT/fk$i.log 2>&1
  echo "fk$i (rc $?): $(grep -m1 ceiling $OUT/fk$i.log)"; table $OUT/fk$i.log
done
for i in 1 2; do awk '/^variant:/{v++} /stages (256|512) random/{print "p'$i' v" v ": " $0}' $OUT/fk$i.log | cut -c1-330; done
