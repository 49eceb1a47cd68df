#!/usr/bin/env bash
# (Its HG / HD / HN fields exist only in a8111d6, the K-parts build; 4e99dd9 removed them: check that commit out to rerun.)
# v35 run 1 (bench/NOTES.md v35 (1)): the shared expert's launches in K parts (moe_cuda_ws.shared_ks_gu / _dn / _ntt,
# bench fields HG HD HN, new, default off). Why: in 88680d4's stage traces the shared gate/up spans 0-40 us at 16-128 for
# 16.8 MB and the shared down 45 us at 128 (its last 15 us past the fused launch): each warp's chunk loop is nc / D = 8
# (gate/up) or 4 (down) dependent loaded round trips, so its span is latency, and at 64-128 it holds SM slots the
# fused launch's blocks wait for (fused launch from 31.7 / 39.5 us, the lists done at 24.8 / 33.3). Prediction: HG 4
# (the gate/up in 4 parts, summed by each tile's last part): its span ~0-12 us at 16-64, ~0-25 at 128; 16-32 -0..0.5 %,
# 64 -0.3..1 %, 128 -0.3..1 %, 256 -0.5..2 %. HD 2 (the down in 2 parts, added by the combine): the 128 tail 15 -> 5-8 us,
# 128 -0.5..1 %, the rest within 0.3 %. HN 1 (the gate/up's token tile rounded up to 64: one dequantisation per
# weight instead of 2-4): 64-256 -0.3..1.5 %. Builds new and HEAD (.ab/head: carry .ab), runs the v35 test cases
# (each also replayed from a graph) and the shared-launch ones, then one process B G GD GDN at 16-256 with stage
# traces, the reverse order, and HEAD's defaults against new's at 16-512 (the shared kernels' ks-1 code and the
# combine changed; the 64-token gate/up kernel now has the 100 % carveout).
source bench/runs/lib.sh
VARIANTS="new: head:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
tests $N/test_moe_gpu new "v35" "shared launches" "graph replay"
grep -c "bit-identical" $OUT/t-new-v35.log
B=$(variant) G=$(variant HG=4) GD=$(variant HG=4 HD=2) GDN=$(variant HG=4 HD=2 HN=1)
timeout 200 $N/sluice-bench moe --batches 16,32,64,128,256 --reps 8 --stages --variants "$B/$G/$GD/$GDN" > $OUT/b-ks-1.log 2>&1
echo "== ks/1 (B G GD GDN):$(row $OUT/b-ks-1.log)"
grep -E "stages (16|64|128|256) random" $OUT/b-ks-1.log | cut -c1-300
timeout 170 $N/sluice-bench moe --batches 16,32,64,128,256 --reps 8 --routing random --variants "$GDN/$GD/$G/$B" > $OUT/b-ks-2.log 2>&1
echo "== ks/2 (GDN GD G B):$(row $OUT/b-ks-2.log)"
for r in 1 2; do for b in head new; do
  timeout 60 /tmp/moe-ab/$b/sluice-bench moe --batches 16,64,128,512 --reps 8 --routing random > $OUT/b-hd-$b-$r.log 2>&1
  echo "== $b/$r:$(row $OUT/b-hd-$b-$r.log)"
done; done
