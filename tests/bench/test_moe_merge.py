#!/usr/bin/env python3
"""bench/moe_merge.py on fresh random runs: per row the median time of the runs, every reading kept in run
order, TB/s and % of the ceiling recomputed from the medians, and a refusal (exit != 0, one message) for runs
of different commits or different rows. Usage: test_moe_merge.py path/to/moe_merge.py"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_check import check, finish, rng   # tests/bench/bench_check.py

merge = sys.argv[1]


def run(n, commit="abc1234", tweak=None):
    rows = []
    for b in (1, 4, 64, 512):
        for routing in ("random", "skewed"):
            rows.append({"batch": b, "routing": routing, "ms": 0.0, "bytes": int(1e8 * b ** 0.5) + b,
                         "tb_per_s": 0.0, "pct_of_ceiling": 0.0, "peer_ms": 0.25 * b})
    out = []
    for i in range(n):
        r = {"gpu": "NVIDIA H200", "commit": commit, "command": "cmd", "read_ceiling_tb_per_s": rng.uniform(4.3, 4.7),
             "rows": json.loads(json.dumps(rows))}
        for row in r["rows"]:
            row["ms"] = round(rng.uniform(0.05, 2.0), 5)
            row["sm_mhz"] = rng.randrange(1100, 1981)
            row["sm_mhz_during"] = rng.randrange(1100, 1981)
        out.append(r)
    if tweak:
        tweak(out)
    return out


with tempfile.TemporaryDirectory() as d:
    def files(runs):
        ps = []
        for i, r in enumerate(runs):
            p = os.path.join(d, "run%d.json" % i)
            json.dump(r, open(p, "w"))
            ps.append(p)
        return ps

    runs = run(3)
    res = subprocess.run([sys.executable, merge] + files(runs), capture_output=True, text=True)
    check(res.returncode == 0, "merge of 3 runs exits 0 (%s)" % res.stderr.strip())
    m = json.loads(res.stdout)
    ceil = statistics.median(r["read_ceiling_tb_per_s"] for r in runs)
    check(abs(m["read_ceiling_tb_per_s"] - ceil) < 1e-4, "median ceiling")
    check(m["read_ceiling_runs"] == [r["read_ceiling_tb_per_s"] for r in runs], "ceilings in run order")
    check(len(m["rows"]) == len(runs[0]["rows"]), "row count")
    for i, row in enumerate(m["rows"]):
        ms = [r["rows"][i]["ms"] for r in runs]
        check(row["ms_runs"] == ms, "row %d readings in run order" % i)
        check(abs(row["ms"] - statistics.median(ms)) < 1e-9, "row %d median" % i)
        tb = row["bytes"] / (row["ms"] * 1e-3) / 1e12
        check(abs(row["tb_per_s"] - tb) < 1e-3 and abs(row["pct_of_ceiling"] - 100 * tb / m["read_ceiling_tb_per_s"]) < 0.02,
              "row %d TB/s and %% from the medians" % i)
        check(row["peer_ms"] == runs[0]["rows"][i]["peer_ms"], "row %d peer" % i)
        for k in ("sm_mhz", "sm_mhz_during"):
            check(row.get(k + "_runs") == [r["rows"][i][k] for r in runs], "row %d %s of every run in run order" % (i, k))
    for k in ("gpu", "commit", "command"):
        check(m[k] == runs[0][k], "key %s kept" % k)
    out = os.path.join(d, "merged.json")
    json.dump(m, open(out, "w"))
    res = subprocess.run([sys.executable, merge, "--table", out], capture_output=True, text=True)
    check(res.returncode == 0 and len(res.stdout.splitlines()) == 2 + len(m["rows"]), "--table prints every row")
    line = res.stdout.splitlines()[2]
    check("{%s}" % " ".join("%d" % r["rows"][0]["sm_mhz_during"] for r in runs) in line, "--table shows the clocks during")

    def other_commit(rs):
        rs[1]["commit"] = "def5678"

    def other_bytes(rs):
        rs[2]["rows"][3]["bytes"] += 1

    for name, tw in (("commit", other_commit), ("bytes", other_bytes)):
        res = subprocess.run([sys.executable, merge] + files(run(3, tweak=tw)), capture_output=True, text=True)
        check(res.returncode != 0 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1,
              "runs with another %s are refused with one line" % name)
    res = subprocess.run([sys.executable, merge], capture_output=True, text=True)
    check(res.returncode != 0, "no input is refused")

finish("test_moe_merge")
