#!/usr/bin/env bash
# v41 run 5 (bench/NOTES.md v41 (4)): run 4 again with the probe's copy fixed (run 4 printed 0: a float copied into a
# double) and batches 4 and 16 added: the layer's energy under sustained load, and the one-thread clock probe beside
# NVML's clock over the same 3 s.
source bench/runs/lib.sh
build_new
timeout 150 $N/sluice-bench moe --batches 1,4,8,16,32,64,128,256,512 --routing random --reps 4 --power 3000 > $OUT/p1.log 2>&1
echo "p1 rc $?"; grep -E "ceiling|power|^ +[0-9]+ +random" $OUT/p1.log
timeout 100 $N/sluice-bench moe --batches 64,512 --routing skewed --reps 4 --power 3000 > $OUT/p2.log 2>&1
echo "p2 rc $?"; grep -E "ceiling|power|^ +[0-9]+ +skewed" $OUT/p2.log
