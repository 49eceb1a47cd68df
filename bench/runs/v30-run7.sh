#!/usr/bin/env bash
# v30 run 7 (bench/NOTES.md v30 (7)): are random 3 and 7 slow because the one expert launch's gate/up items just exceed
# its 2640 warps (3: ~2740 items, 1.04 waves; 7: ~5490, 2.08; 2: 0.76; 6: 1.84)? If so, routed gate/up tiles in 2 K parts
# (half-size items) should gain at 3 and 7 and not at 2 and 6. One process B KX3 KX8 B KX3 KX8 at 2-8 random (KX: K parts
# up to that batch; default 1). One device call (~2.5 min with the start), no carry.
source bench/runs/lib.sh
build_new
B=$(variant) K3=$(variant KX=3) K8=$(variant KX=8)
timeout 120 $N/sluice-bench moe --batches 2,3,4,5,6,7,8 --routing random --reps 8 --variants "$B/$K3/$K8/$B/$K3/$K8" > $OUT/k.log 2>&1
echo "(us unqueued/queued@MHz: B KX3 KX8 B KX3 KX8)"
awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}' $OUT/k.log
