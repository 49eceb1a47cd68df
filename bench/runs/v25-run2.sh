#!/usr/bin/env bash
# v25 run 2 (bench/NOTES.md v25 (5)): SW (the shared expert on wgmma, k_shared_wg) with deeper pipelines and with
# the shared launches forked later. Run 1: its gate/up at 512 took 0-84 us (k_shared_fp8: 0-109), the layer +1.2 %
# at 512 and +6 % at 256, and its down then ran beside the router (85-154 us; lists ended at 155 against 114).
# Builds base, swd3 (SW_D 3: 3 chunks in flight, 2 blocks per SM) and swd4 (4, one gate/up block per SM); the SW
# test cases on swd3 / swd4 (MOE_TEST_ONLY); bench 256 and 512, random and skewed, two processes per build, with
# stage traces: base build SW 0, SW 16, SW 16 with the fork after the logits (FK 3), after the router (FK 2); swd3
# SW 16 and SW 16 FK 3; swd4 SW 16. One device call (~6 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: swd3:-DSW_D=3 swd4:-DSW_D=4" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA"
for n in swd3 swd4; do
  MOE_TEST_ONLY=wgmma timeout 90 /tmp/moe-ab/$n/test_moe_gpu > $OUT/test-$n.log 2>&1
  echo "test $n: rc $? $(grep -c rel_l2 $OUT/test-$n.log) cases, $(tail -1 $OUT/test-$n.log)"; grep -B1 FAIL $OUT/test-$n.log | head -4
done
P1=1,16,33,4,16,0,32,0,16 P2=1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s;", v, $1, substr($2,1,1), $3}' "$1"; }
for r in 1 2; do
  timeout 150 /tmp/moe-ab/base/sluice-bench moe --batches 256,512 --reps 8 --stages \
    --variants "$P1,1,$P2,0/$P1,1,$P2,16/$P1,3,$P2,16/$P1,2,$P2,16" > $OUT/b-base-$r.log 2>&1
  echo "base round $r (v1 SW 0, v2 SW 16, v3 SW 16 FK 3, v4 SW 16 FK 2):$(row $OUT/b-base-$r.log)"
  timeout 100 /tmp/moe-ab/swd3/sluice-bench moe --batches 256,512 --reps 8 --stages \
    --variants "$P1,1,$P2,16/$P1,3,$P2,16" > $OUT/b-swd3-$r.log 2>&1
  echo "swd3 round $r (v1 SW 16, v2 SW 16 FK 3):$(row $OUT/b-swd3-$r.log)"
  timeout 80 /tmp/moe-ab/swd4/sluice-bench moe --batches 256,512 --reps 8 --stages --variants "$P1,1,$P2,16" > $OUT/b-swd4-$r.log 2>&1
  echo "swd4 round $r (v1 SW 16):$(row $OUT/b-swd4-$r.log)"
done
for f in b-base-1 b-swd3-1 b-swd4-1; do echo "== $f"; grep -E "stages 512 random" $OUT/$f.log | cut -c1-250; done
cd $OUT && tar czf run2.tgz --remove-files test-swd*.log b-*.log 2>/dev/null; ls $OUT
