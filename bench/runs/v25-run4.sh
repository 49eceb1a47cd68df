#!/usr/bin/env bash
# v25 run 4 (bench/NOTES.md v25 (7)): is random 512 power-capped? Run 3 read it at 1.60-1.63 ms unqueued in all
# three processes (1.39-1.40 queued; runs 1-2 on the same machine read 1.32-1.35 with 8 reps), its stage traces
# end at 1.33 ms, and nvidia-smi logged 700 W with the SM clock at 1365-1485 MHz for ~0.5 s of each process.
# sluice-bench --sustain R: per row, after the usual readings, R rounds of 8 back-to-back replays, each round's
# median and the SM clock after it (clock64 over 50 us of the global timer). Two processes: (A) 64, 256, 512 as
# the committed run reaches them (reps 12), (B) 512 alone first, fresh (reps 4); nvidia-smi every 50 ms beside.
# One device call (~2.5 min), nothing to carry; files in $OUT.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 50 > $OUT/smi4.csv 2>&1 &
SMI=$!
timeout 120 /tmp/moe-ab/base/sluice-bench moe --batches 64,256,512 --routing random --reps 12 --sustain 40 > $OUT/sus-a.log 2>&1
sleep 5
timeout 60 /tmp/moe-ab/base/sluice-bench moe --batches 512 --routing random --reps 4 --sustain 40 > $OUT/sus-b.log 2>&1
kill $SMI
for f in sus-a sus-b; do echo "== $f"; grep -E "^ +[0-9]+ +random|sustain" $OUT/$f.log; done
echo "== smi: samples at >= 690 W: $(awk -F', ' '$3 + 0 >= 690' $OUT/smi4.csv | wc -l) of $(wc -l < $OUT/smi4.csv); lowest SM clock under load:"
awk -F', ' '$3 + 0 > 300 {print $2}' $OUT/smi4.csv | sort -n | head -3 | tr '\n' ' '; echo
