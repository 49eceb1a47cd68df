#!/usr/bin/env python3
"""bench/smi_summary.py on fresh random samples: each process's line counts only the samples inside its own
time marks with power above the threshold, and reports their median / lowest SM clock, median / highest power
and the reasons seen; header and "[N/A]" lines are skipped. Usage: test_smi_summary.py path/to/smi_summary.py"""
import datetime
import re
import statistics
import subprocess
import sys
import tempfile

from bench_check import check, finish, rng   # tests/bench/bench_check.py

tool = sys.argv[1]

with tempfile.TemporaryDirectory() as d:
    t = 1.8e9 + rng.uniform(0, 1e6)
    lines = ["timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
             "clocks_event_reasons.active"]
    expect = []
    for i in (1, 2, 3):
        idle = rng.randrange(3, 10)
        for _ in range(idle):   # between processes: idle, low power, must not count
            t += 0.1
            stamp = datetime.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            lines.append(f"{stamp}, 345, 3201, {rng.uniform(70, 120):.2f}, 37, 0x0000000000000001")
        start = t + 0.05
        open(f"{d}/bench-t{i}.start", "w").write(f"{start:.6f}\n")
        sm, w, why = [], [], set()
        for _ in range(rng.randrange(5, 40)):
            t += 0.1
            stamp = datetime.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            loaded = rng.random() < 0.7
            c, p = rng.randrange(1400, 1981), rng.uniform(250, 650) if loaded else rng.uniform(80, 190)
            r = rng.choice(["0x0000000000000000", "0x0000000000000004"])
            lines.append(f"{stamp}, {c}, 3201, {p:.2f}, {rng.randrange(38, 60)}, {r}")
            if loaded:
                sm.append(c), w.append(round(p, 2)), why.add(r)
        if rng.random() < 0.5:
            lines.append("2026/12/01 00:00:00.000, [N/A], [N/A], [N/A], [N/A], [N/A]")
        open(f"{d}/bench-t{i}.end", "w").write(f"{t + 0.05:.6f}\n")
        expect.append((sm, w, why))
    open(f"{d}/smi.csv", "w").write("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, tool, d, "3"], capture_output=True, text=True)
    check(out.returncode == 0, f"exit {out.returncode}: {out.stderr}")
    got = out.stdout.strip().splitlines()
    check(len(got) == 3, f"3 lines: {got}")
    for (sm, w, why), line in zip(expect, got):
        if not sm:
            check("no samples" in line, line)
            continue
        m = re.search(r"(\d+) samples under load: SM (\d+) MHz \(lowest (\d+)\), memory \d+ MHz, power (\d+) W "
                      r"\(highest (\d+)\), \d+ C, reasons (.*)$", line)
        check(m is not None, f"format: {line}")
        if not m:
            continue
        check(int(m.group(1)) == len(sm), f"count {m.group(1)} != {len(sm)}")
        check(abs(int(m.group(2)) - statistics.median(sm)) <= 0.5, f"median SM {m.group(2)} vs {statistics.median(sm)}")
        check(int(m.group(3)) == min(sm), f"lowest SM {m.group(3)} vs {min(sm)}")
        check(abs(int(m.group(4)) - statistics.median(w)) <= 0.5, f"median power {m.group(4)}")
        check(abs(int(m.group(5)) - max(w)) <= 0.5, f"highest power {m.group(5)}")
        check(set(m.group(6).split()) == why, f"reasons {m.group(6)} vs {why}")
    bad = subprocess.run([sys.executable, tool, d], capture_output=True, text=True)
    check(bad.returncode != 0, "usage error without N")
finish("test_smi_summary")
