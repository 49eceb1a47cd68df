#!/usr/bin/env bash
# v20 run 4 (bench/NOTES.md v20, "weak spots" lever 4): does the spread between bench processes at batches 64-128
# follow the GPU's clocks or power? nvidia-smi samples SM / memory clock, power, temperature and the clock-event
# reasons every 100 ms while three `sluice-bench moe` processes run one after another (HEAD's kernels); prints each
# process's times beside the medians of the samples taken while it ran. Run from the repo root on the GPU machine.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p $OUT
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null   # build only
Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits -lms 100 > $OUT/smi.csv 2> $OUT/smi.err &
SMI=$!
sleep 2
for r in 1 2 3; do
  date +%s.%N > $OUT/t$r.start
  /tmp/moe-ab/base/sluice-bench moe --batches 64,128 --routing random --reps 12 > $OUT/bench-$r.log 2>&1
  date +%s.%N > $OUT/t$r.end
done
kill $SMI
python3 - "$OUT" <<'PY'
import sys, statistics, datetime, re
out = sys.argv[1]
rows = []
for line in open(f"{out}/smi.csv"):
    f = [x.strip() for x in line.split(",")]
    try:
        ts = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((ts, float(f[1]), float(f[2]), float(f[3]), f[4], f[5], f[6]))
    except Exception:
        pass
print("samples", len(rows), open(f"{out}/smi.err").read().strip()[:200])
for r in (1, 2, 3):
    t0, t1 = float(open(f"{out}/t{r}.start").read()), float(open(f"{out}/t{r}.end").read())
    s = [x for x in rows if t0 <= x[0] <= t1]
    hot = [x for x in s if x[3] > 200] or s   # samples under load
    ms = re.findall(r"^\s+(\d+)\s+random\s+([0-9.]+)\s+\S+\s+\S+\s+([0-9.]+)%", open(f"{out}/bench-{r}.log").read(), re.M)
    ceil = re.findall(r"ceiling ([0-9.]+) TB/s", open(f"{out}/bench-{r}.log").read())
    if not hot:
        print(f"process {r}: no samples"); continue
    med = lambda i: statistics.median(x[i] for x in hot)
    reasons = sorted(set(x[6] for x in hot))
    print(f"process {r}: ceiling {ceil} rows {ms} | loaded samples {len(hot)}: sm {med(1):.0f} MHz "
          f"(min {min(x[1] for x in hot):.0f}), mem {med(2):.0f} MHz, power {med(3):.0f} W (max {max(x[3] for x in hot):.0f}), "
          f"temp gpu/mem {hot[len(hot)//2][4]}/{hot[len(hot)//2][5]} C, reasons {reasons[:4]}")
PY
