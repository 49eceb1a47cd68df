#!/usr/bin/env bash
# v41 run 4 (bench/NOTES.md v41 (4)): the layer's energy under sustained load (sluice-bench moe --power 3000: each
# row's graphs back to back for 3 s between two reads of NVML's energy counter), beside the 8 GiB read kernel's and
# the idle board's, in one process; then the skewed 64 and 512 rows.
source bench/runs/lib.sh
build_new
timeout 150 $N/sluice-bench moe --batches 1,8,32,64,128,256,512 --routing random --reps 4 --power 3000 > $OUT/p1.log 2>&1
echo "p1 rc $?"; grep -E "ceiling|power|^ +[0-9]+ +random" $OUT/p1.log
timeout 100 $N/sluice-bench moe --batches 64,512 --routing skewed --reps 4 --power 3000 > $OUT/p2.log 2>&1
echo "p2 rc $?"; grep -E "ceiling|power|^ +[0-9]+ +skewed" $OUT/p2.log
