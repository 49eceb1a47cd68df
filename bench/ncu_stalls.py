#!/usr/bin/env python3
"""Stall samples per SASS opcode and the hottest instructions, from one kernel's source page exported by
`ncu -i REP --page source --csv --print-source sass > FILE.csv` (bench/runs/v23-run1.sh).

    python3 bench/ncu_stalls.py FILE.csv [TOP]

Prints the total of the "Warp Stall Sampling (All Samples)" column, then per opcode (modifiers dropped,
predicate removed) its share of the samples and of the executed instructions, then the TOP (default 20)
instructions with the most samples. Where the export has one column per stall reason (names containing
"stall", other than the two sampling totals), their totals are printed too.
"""
import csv
import re
import sys
from collections import defaultdict


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with open(sys.argv[1], newline="", errors="replace") as f:
        lines = f.read().splitlines()
    head = next((i for i, l in enumerate(lines) if '"Source"' in l and ('"Address"' in l or '"#"' in l)), None)
    if head is None:
        print("ncu_stalls: no header with Source/Address in", sys.argv[1])
        print("\n".join(lines[:5]))
        return 1
    rows = list(csv.DictReader(lines[head:]))
    cols = list(rows[0].keys()) if rows else []
    col_all = next((c for c in cols if "Sampling (All" in c), None)
    col_ni = next((c for c in cols if "Not-issued" in c or "Not Issued" in c), None)
    col_ex = next((c for c in cols if c.startswith("Instructions Executed")), None)
    reasons = [c for c in cols if "stall" in c.lower() and c not in (col_all, col_ni)]
    if col_all is None:
        print("ncu_stalls: no sampling column; columns:", cols[:40])
        return 1
    tot = sum(num(r[col_all]) for r in rows) or 1.0
    tex = sum(num(r[col_ex]) for r in rows) if col_ex else 0.0
    print(f"samples {tot:.0f} (not issued {sum(num(r[col_ni]) for r in rows):.0f})" if col_ni else f"samples {tot:.0f}",
          f"executed {tex:.0f}" if col_ex else "")
    by = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        src = re.sub(r"^@!?U?P[T0-9]+\s+", "", r["Source"].strip())
        op = src.split(" ")[0].split(".")[0] if src else "?"
        by[op][0] += num(r[col_all])
        by[op][1] += num(r[col_ex]) if col_ex else 0.0
    print("opcode   %samples  %executed")
    for op, (s, e) in sorted(by.items(), key=lambda kv: -kv[1][0])[:18]:
        print(f"{op:10s} {100 * s / tot:6.1f}   {100 * e / tex if tex else 0:6.1f}")
    print(f"top {top} instructions by samples (% of all):")
    for r in sorted(rows, key=lambda r: -num(r[col_all]))[:top]:
        addr = r.get("Address", r.get("#", ""))
        print(f"  {addr:>6s} {100 * num(r[col_all]) / tot:5.2f}  {r['Source'].strip()[:90]}")
    if reasons:
        print("per stall-reason column (% of all samples):")
        for c in sorted(reasons, key=lambda c: -sum(num(r[c]) for r in rows))[:12]:
            print(f"  {100 * sum(num(r[c]) for r in rows) / tot:6.1f}  {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
