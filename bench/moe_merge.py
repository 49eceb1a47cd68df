#!/usr/bin/env python3
"""Merge the JSONs of several `sluice-bench moe` processes (bench/moe_device_run.sh REPEAT=N) into one in the
issue's format: per (batch, routing) row the median time of the runs (ms_runs: every reading, in run order),
the read ceiling the median of the runs' (read_ceiling_runs), TB/s and % of the ceiling from those two
medians. bytes and peer_ms must agree across the runs (same routing, one peer measurement).
  python3 bench/moe_merge.py run1.json run2.json ... > moe-h200.json
  python3 bench/moe_merge.py --table moe-h200.json      # a text table of a merged JSON"""
import json
import statistics
import sys


def merge(paths):
    runs = [json.load(open(p)) for p in paths]
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
        if all("ms_queued" in o for o in others):   # v25: the same replays queued behind the hold kernel
            out_row["ms_queued"] = round(statistics.median([o["ms_queued"] for o in others]), 5)
        # v25: the SM clock each run's replays left; v40: the SM clock during one more replay
        for k in ("sm_mhz", "sm_mhz_during"):
            if all(k in o for o in others):
                out_row[k + "_runs"] = [o[k] for o in others]
        if row.get("peer_ms_queued") is not None:
            out_row["peer_ms_queued"] = row["peer_ms_queued"]
        rows.append(out_row)
    out = {k: base[k] for k in ("gpu", "commit", "command")}
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        table(sys.argv[2])
    else:
        json.dump(merge(sys.argv[1:]), sys.stdout, indent=1)
        sys.stdout.write("\n")
