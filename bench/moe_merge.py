#!/usr/bin/env python3
"""Merge the JSONs of several `sluice-bench moe` processes (bench/gpu_run.sh bench) into one: per (batch, routing)
row the median time of the runs (ms_runs: every reading, in run order), the read ceiling the median of the runs'
(read_ceiling_runs), TB/s and % of the ceiling from those two medians. bytes and peer_ms must agree across the runs
(same routing, one peer measurement). With --baseline, each row also gets baseline_ms: the median of the base tree's
runs of the same row, measured in the same session (baseline_ms_runs: its readings).
  python3 bench/moe_merge.py [--commit SHA] [--baseline b1.json,b2.json] run1.json run2.json ... > moe-h200.json
  python3 bench/moe_merge.py --table moe-h200.json      # a text table of a merged JSON
  python3 bench/moe_merge.py --ab moe-h200.json         # batch, routing, old ms, new ms, new/old, % of ceiling"""
import json
import statistics
import sys


def merge(paths, baseline=(), commit=None):
    runs = [json.load(open(p)) for p in paths]
    base_runs = [json.load(open(p)) for p in baseline]
    if not runs:
        sys.exit("moe_merge: no input JSON")
    base = runs[0]
    for r in runs[1:]:
        if r["commit"] != base["commit"] or len(r["rows"]) != len(base["rows"]):
            sys.exit("moe_merge: runs differ in commit or rows")
    ceilings = [r["read_ceiling_tb_per_s"] for r in runs]
    ceiling = statistics.median(ceilings)
    rows = []
    for i, row in enumerate(base["rows"]):
        others = [r["rows"][i] for r in runs]
        for o in others:
            if (o["batch"], o["routing"], o["bytes"]) != (row["batch"], row["routing"], row["bytes"]):
                sys.exit("moe_merge: row %d differs between runs (batch, routing or bytes)" % i)
        ms_runs = [o["ms"] for o in others]
        ms = statistics.median(ms_runs)
        tb = row["bytes"] / (ms * 1e-3) / 1e12
        out_row = {"batch": row["batch"], "routing": row["routing"], "ms": round(ms, 5), "bytes": row["bytes"],
                   "tb_per_s": round(tb, 4), "pct_of_ceiling": round(100.0 * tb / ceiling, 2),
                   "peer_ms": row["peer_ms"], "ms_runs": ms_runs}
        if all("ms_queued" in o for o in others):   # the same replays queued behind the hold kernel
            out_row["ms_queued"] = round(statistics.median([o["ms_queued"] for o in others]), 5)
        # the SM clock each run's replays left, and during one more replay
        for k in ("sm_mhz", "sm_mhz_during"):
            if all(k in o for o in others):
                out_row[k + "_runs"] = [o[k] for o in others]
        if row.get("peer_ms_queued") is not None:
            out_row["peer_ms_queued"] = row["peer_ms_queued"]
        if base_runs:
            b = [r["rows"][i] for r in base_runs]
            for o in b:
                if (o["batch"], o["routing"]) != (row["batch"], row["routing"]):
                    sys.exit("moe_merge: row %d differs between the runs and the baseline runs" % i)
            out_row["baseline_ms"] = round(statistics.median([o["ms"] for o in b]), 5)
            out_row["baseline_ms_runs"] = [o["ms"] for o in b]
        rows.append(out_row)
    out = {k: base[k] for k in ("gpu", "commit", "command")}
    if commit:
        out["commit"] = commit
    out["read_ceiling_tb_per_s"] = round(ceiling, 4)
    out["read_ceiling_runs"] = ceilings
    if "timing" in base:
        out["timing"] = base["timing"]
    out["rows"] = rows
    return out


def table(path):
    d = json.load(open(path))
    print("read ceiling %.3f TB/s (runs %s)" % (d["read_ceiling_tb_per_s"], d.get("read_ceiling_runs")))
    print("batch routing     ms   %ceil  x peer    queued  readings (ms) [SM MHz after] {SM MHz during}")
    for r in d["rows"]:
        x = r["peer_ms"] / r["ms"] if r["peer_ms"] and r["peer_ms"] > 0 else 0.0
        u = "%.4f" % r["ms_queued"] if "ms_queued" in r else "-"
        mhz = " [%s]" % " ".join("%d" % v for v in r["sm_mhz_runs"]) if "sm_mhz_runs" in r else ""
        if "sm_mhz_during_runs" in r:
            mhz += " {%s}" % " ".join("%d" % v for v in r["sm_mhz_during_runs"])
        print("%5d %-7s %.4f %5.1f%% %6.2f  %8s  %s%s" % (r["batch"], r["routing"], r["ms"], r["pct_of_ceiling"], x, u,
                                                        " ".join("%.4f" % v for v in r.get("ms_runs", [])), mhz))


def ab_table(path):
    d = json.load(open(path))
    print("commit %s, read ceiling %.3f TB/s" % (d["commit"], d["read_ceiling_tb_per_s"]))
    print("batch routing   old ms   new ms  new/old  %ceil")
    worst = 0.0
    for r in d["rows"]:
        q = r["ms"] / r["baseline_ms"]
        worst = max(worst, q)
        print("%5d %-7s %8.4f %8.4f %7.3f %5.1f%%%s" % (r["batch"], r["routing"], r["baseline_ms"], r["ms"], q,
                                                     r["pct_of_ceiling"], "  > 3 % SLOWER" if q > 1.03 else ""))
    print("worst new/old %.3f (%s)" % (worst, "within 3 %" if worst <= 1.03 else "a row is more than 3 % slower"))


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--table":
        table(args[1])
    elif len(args) == 2 and args[0] == "--ab":
        ab_table(args[1])
    else:
        commit, baseline = None, []
        while args and args[0] in ("--commit", "--baseline") and len(args) > 1:
            if args[0] == "--commit":
                commit = args[1]
            else:
                baseline = [p for p in args[1].split(",") if p]
            args = args[2:]
        json.dump(merge(args, baseline, commit), sys.stdout, indent=1)
        sys.stdout.write("\n")
