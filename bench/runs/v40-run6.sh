#!/usr/bin/env bash
# v40 run 6 (bench/NOTES.md v40 (3)): random 512 at the start and at the end of the committed batch list in one process,
# the committed list with the GPU idle 2 s before each row (--row-cool 2000), and the plain list; a fresh machine.
VARIANTS="old:-DMOE_SCL=0" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
B=/tmp/moe-ab/old/sluice-bench
one() {
  echo "== $*"
  SLUICE_BENCH_SPREAD=1 timeout 200 $B moe --routing random --reps 12 "$@" 2>&1 |
    awk '/spread/{a = b; b = $0} /^ +(256|512) +random/{print a; print b; print}'
}
one --batches 512,1,4,8,16,32,64,128,256,512
one --batches 1,4,8,16,32,64,128,256,512 --row-cool 2000
one --batches 1,4,8,16,32,64,128,256,512
nvidia-smi --query-gpu=power.limit,clocks.max.sm,temperature.gpu,temperature.memory --format=csv
