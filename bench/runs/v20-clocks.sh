#!/usr/bin/env bash
# v20 run 4 (bench/NOTES.md v20, "weak spots" lever 4): does the spread between bench processes at batches 64-128
# follow the GPU's clocks or power? nvidia-smi samples SM / memory clock, power, temperature and the clock-event
# reasons every 100 ms while three `sluice-bench moe` processes run one after another (HEAD's kernels); prints each
# process's times and bench/smi_summary.py's medians of the samples taken while it ran. (Run 4 itself used an
# inline copy of that summary that also read the memory temperature.) Run from the repo root on the GPU machine.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p $OUT
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null   # build only
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 > $OUT/smi.csv 2> $OUT/smi.err &
SMI=$!
sleep 2
for r in 1 2 3; do
  date +%s.%N > $OUT/bench-t$r.start
  /tmp/moe-ab/base/sluice-bench moe --batches 64,128 --routing random --reps 12 > $OUT/bench-$r.log 2>&1
  date +%s.%N > $OUT/bench-t$r.end
  echo "process $r: $(grep -oE 'ceiling [0-9.]+ TB/s' $OUT/bench-$r.log) $(grep -E '^ +[0-9]+ +random' $OUT/bench-$r.log | awk '{printf "%s: %s ms %s; ", $1, $3, $6}')"
done
kill $SMI
python3 bench/smi_summary.py $OUT 3
