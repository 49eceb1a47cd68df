#!/usr/bin/env bash
# v40 run 3 (bench/NOTES.md v40 (3)): random 512 in the committed protocol's batch list with and without --stages, and
# with 256-512 alone; HEAD's kernels (MOE_SCL 0 is v39's layout: its expert kernels are HEAD's).
VARIANTS="old:-DMOE_SCL=0" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing" | cut -c1-120
B=/tmp/moe-ab/old/sluice-bench
run() { echo "== $*"; timeout 150 $B moe --routing random "$@" 2>&1 | grep -E "^ +(128|256|512) +random|^  stages 512"; }
run --batches 1,4,8,16,32,64,128,256,512 --reps 12 --stages
run --batches 1,4,8,16,32,64,128,256,512 --reps 12
run --batches 256,512 --reps 12 --stages
run --batches 256,512 --reps 12
run --batches 1,4,8,16,32,64,128,256,512 --reps 12 --stages
