#!/usr/bin/env bash
# v40 run 4 (bench/NOTES.md v40 (3)): random 512 after shorter batch lists, then the committed list with --sustain 12
# (rounds of 8 replays and the SM clock after each); a fresh machine. HEAD's kernels as in run 3.
VARIANTS="old:-DMOE_SCL=0" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
B=/tmp/moe-ab/old/sluice-bench
run() {
  echo "== $*"
  timeout 150 $B moe --routing random --reps 12 "$@" 2>&1 | grep -E "^ +[0-9]+ +random|sustain" |
    awk '{if ($1 == "sustain") print; else printf "%s:%s/%s@%s ", $1, $3, $9, $10} END{print ""}'
}
run --batches 512; run --batches 1,512; run --batches 128,512; run --batches 64,512; run --batches 1,4,8,16,32,512
run --batches 1,4,8,16,32,64,128,256,512 --sustain 12
