#!/usr/bin/env bash
# v40 run 5 (bench/NOTES.md v40 (3)): where batch 512's reading goes in the committed protocol. v40 runs 1-2 read random 512
# at 1.29-1.31 ms in processes of 6 batches, while the committed runs read it at 1.54-1.56 (queued 1.33-1.43) and their
# stage traces put the kernels of one replay at ~1.29 ms. Every process here is HEAD's kernels (MOE_SCL 0) with
# SLUICE_BENCH_SPREAD=1 (each reading's p10/p50/p90/max and the host's launch times) and --stages (each traced replay's
# time between events less its kernels' span); batch lists: the committed one, 256-512 alone, and two bisections.
source bench/runs/lib.sh
VARIANTS="old:-DMOE_SCL=0" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -E "did not build|error" | head -3
B=/tmp/moe-ab/old/sluice-bench
one() {
  echo "== $*"
  SLUICE_BENCH_SPREAD=1 timeout 150 $B moe --routing random --reps 12 --stages "$@" 2>&1 |
    awk '/spread/{a = b; b = $0} /^ +(256|512) +random/{print a; print b; print} /stage gaps (256|512)/{print}'
}
one --batches 1,4,8,16,32,64,128,256,512
one --batches 256,512
one --batches 1,4,8,16,32,64,128,256,512
one --batches 4,16,32,512
one --batches 1,8,64,128,256,512
