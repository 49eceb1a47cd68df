#!/usr/bin/env python3
"""What the GPU's clocks and power did during each bench process (bench/moe_device_run.sh, bench/NOTES.md v20).

Input: a folder with smi.csv (nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,
clocks_event_reasons.active --format=csv,noheader,nounits -lms 100) and, per process i = 1..N, bench-tI.start and
bench-tI.end (`date +%s.%N`). Prints one line per process: the samples taken while it ran with the GPU under load
(power above --loaded-w, default 200 W), their median and lowest SM clock, median memory clock, median and
highest power, median temperature, and the clock-event reasons seen (nvidia-smi's bit mask, e.g. 0x4 = software
power cap). Usage: smi_summary.py FOLDER N [--loaded-w W]"""
import datetime
import statistics
import sys


def parse(path):
    rows = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        try:
            ts = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append({"t": ts, "sm": float(f[1]), "mem": float(f[2]), "w": float(f[3]), "temp": float(f[4]),
                         "why": f[5]})
        except ValueError:
            continue   # a header, "[N/A]" or a cut line
    return rows


def summary(rows, t0, t1, loaded_w):
    s = [r for r in rows if t0 <= r["t"] <= t1 and r["w"] > loaded_w]
    if not s:
        return "no samples under load"
    med = lambda k: statistics.median(r[k] for r in s)
    why = " ".join(sorted({r["why"] for r in s}))
    return (f"{len(s)} samples under load: SM {med('sm'):.0f} MHz (lowest {min(r['sm'] for r in s):.0f}), "
            f"memory {med('mem'):.0f} MHz, power {med('w'):.0f} W (highest {max(r['w'] for r in s):.0f}), "
            f"{med('temp'):.0f} C, reasons {why}")


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    folder, n = argv[1], int(argv[2])
    loaded_w = float(argv[argv.index("--loaded-w") + 1]) if "--loaded-w" in argv else 200.0
    rows = parse(f"{folder}/smi.csv")
    for i in range(1, n + 1):
        t0 = float(open(f"{folder}/bench-t{i}.start").read())
        t1 = float(open(f"{folder}/bench-t{i}.end").read())
        # nvidia-smi's timestamps are local time, read as local time, like the epoch marks
        print(f"process {i}: {summary(rows, t0, t1, loaded_w)}")


if __name__ == "__main__":
    main(sys.argv)
