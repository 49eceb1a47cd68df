#!/usr/bin/env bash
# v41 run 6 (bench/NOTES.md v41 (5)): v41 (4) (d), why skewed 512 is 26 % slower sustained than in bursts below the
# cap: nvidia-smi's clocks, power, temperature and clock-event reasons every 50 ms beside --power's 3 s windows
# (random 8 and 512, skewed 64 and 512), summarised per window by bench/smi_summary.py's functions.
source bench/runs/lib.sh
build_new
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 50 > $OUT/smi.csv 2> /dev/null &
SMI=$!
timeout 100 $N/sluice-bench moe --batches 8,512 --routing random --reps 4 --power 3000 > $OUT/p1.log 2>&1
timeout 100 $N/sluice-bench moe --batches 64,512 --routing skewed --reps 4 --power 3000 > $OUT/p2.log 2>&1
kill $SMI
grep -h "power" $OUT/p1.log $OUT/p2.log | cut -c1-200
grep -h "window" $OUT/p1.log $OUT/p2.log | python3 -c "
import sys; sys.path.insert(0, 'bench'); import smi_summary as m
rows = m.parse('$OUT/smi.csv')
for line in sys.stdin:
    f = line.split(); t0, t1 = float(f[-2]), float(f[-1])
    print(' '.join(f[1:3]), m.summary(rows, t0 + 0.2, t1, 200))"
