#!/usr/bin/env bash
# v25 run 7 (bench/NOTES.md v25 (9)): the whole table with the GPU idle 1.5 s before each row (--row-cool 1500), so
# every row starts at a cool GPU's clock instead of the one the rows before it left (run 6: random 512 1.23-1.24 ms
# at 1.97 GHz, 1.40 at 1.48). One process, reps 12 as committed; the peer's readings are run 5's (stable within 1 %
# across runs and machines). One device call (~2 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
timeout 100 /tmp/moe-ab/base/sluice-bench moe --reps 12 --row-cool 1500 > $OUT/cool.log 2>&1
grep -E "ceiling|^ +batch|^ +[0-9]+ +(random|skewed)" $OUT/cool.log
