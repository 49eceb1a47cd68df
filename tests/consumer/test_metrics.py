"""/metrics of a live worker: `promtool check metrics` (Prometheus' own parser and linter, Debian's
`prometheus` package) reports nothing; the latency histograms count exactly the jobs run, their buckets
are cumulative and end at _count; the engine gauges and the per-partition consumer lag are there, the
lag is seen above 0 while a batch waits and back at 0 once it is committed. Every query of the Grafana
dashboard (ops/grafana/sluice.json) parses as PromQL (promtool check rules) and names only metrics the
worker serves."""
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request

import harness as h

T = 6          # tokens per job (ignore_eos): counts are exact
N1, N2 = 20, 40
HISTS = ["sluice_job_queue_wait_seconds", "sluice_job_time_to_first_token_seconds",
         "sluice_job_time_per_output_token_seconds", "sluice_job_e2e_latency_seconds",
         "sluice_job_added_latency_seconds"]


def scrape(port):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()


def samples(body):
    """{(name, labels-string): value} of the sample lines ('' labels for none)."""
    out = {}
    for line in body.split("\n"):
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        name, _, labels = key.partition("{")
        out[(name, labels.rstrip("}"))] = float(value)
    return out


def lags(s):
    return {lab: v for (n, lab), v in s.items() if n == "sluice_consumer_lag"}


def promtool(body):
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr).strip()


def check_dashboard(s):
    """The dashboard's queries: valid PromQL (as recording rules, with Grafana's variables filled in)
    over metric names this worker serves."""
    with open(os.path.join(h.ROOT, "ops", "grafana", "sluice.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20, len(exprs)
    served = {n for n, _ in s}
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(exprs):
        for m in re.findall(r"\bsluice_\w+", e):
            assert m in served, "dashboard query names %s, not served: %s" % (m, e)
        e = e.replace("$__rate_interval", "5m").replace("$instance", ".*")
        rules += ["      - record: sluice:dashboard_%d" % i, "        expr: %s" % json.dumps(e)]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(rules) + "\n")
    try:
        p = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    assert p.returncode == 0, "promtool check rules on the dashboard's queries:\n" + p.stdout + p.stderr
    return len(exprs)


def jobs(prefix, n, max_tokens=T):
    return [h.job_record("%s-%d" % (prefix, i), [1 + i % 200, 7, 9], max_tokens, ignore_eos=True) for i in range(n)]


def test(make):
    env = make("metrics", partitions=4)
    mport = h.free_port()
    w = env.start_worker("w-met", **{"metrics.port": mport, "engine.max_batch": 8})
    env.wait_assigned(w)

    first = jobs("m1", N1)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in first])
    res = env.results([j["id"] for j in first], timeout=60, idle=0.3)
    assert len(res) == N1, "results for %d of %d jobs" % (len(res), N1)

    # committed (auto-commit every 5 s) and seen by the statistics (every second): lag 0 on all 4 partitions
    t0 = time.time()
    while True:
        s = samples(scrape(mport))
        lg = lags(s)
        if len(lg) == 4 and all(v == 0 for v in lg.values()):
            break
        assert time.time() - t0 < 30, "consumer lag never settled at 0 on 4 partitions: %s" % lg
        time.sleep(0.3)
    assert set(lg) == {'topic="sluice.jobs",partition="%d"' % p for p in range(4)}, lg

    # a second batch: while it waits for its commit the lag is above 0
    second = jobs("m2", N2, max_tokens=T)
    watch = h.ResultWatcher(env)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in second])
    max_lag = 0
    t0 = time.time()
    while watch.distinct() < N1 + N2 or time.time() - t0 < 2:   # the watcher reads from the start
        max_lag = max([max_lag] + list(lags(samples(scrape(mport))).values()))
        assert time.time() - t0 < 60, "%d of %d results" % (watch.distinct(), N1 + N2)
        time.sleep(0.1)
    watch.close()
    assert max_lag > 0, "the consumer lag never rose above 0 while %d jobs were pending" % N2
    h.log("consumer lag: 0 when committed, up to %d during the second batch" % max_lag)

    t0 = time.time()
    while samples(scrape(mport))[("sluice_results_total", "")] < N1 + N2:
        assert time.time() - t0 < 20, "results_total below %d" % (N1 + N2)
        time.sleep(0.2)
    body = scrape(mport)
    rc, out = promtool(body)
    assert rc == 0 and out == "", "promtool check metrics: rc %d\n%s" % (rc, out)
    s = samples(body)
    n = N1 + N2
    assert s[("sluice_results_total", "")] == n and s[("sluice_jobs_consumed_total", "")] == n, s
    assert s[("sluice_tokens_generated_total", "")] == n * T, s[("sluice_tokens_generated_total", "")]
    for name in HISTS:
        count = s[(name + "_count", "")]
        assert count == n, "%s_count = %d, %d jobs ran" % (name, count, n)
        buckets = sorted(((float(lab.split('"')[1]), v) for (nm, lab), v in s.items() if nm == name + "_bucket"))
        assert len(buckets) == 21 and buckets[-1] == (float("inf"), count), (name, buckets)
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), (name, "not cumulative", buckets)
        assert s[(name + "_sum", "")] > 0, name
    # added latency is the end-to-end latency less the engine's share
    assert s[("sluice_job_added_latency_seconds_sum", "")] <= s[("sluice_job_e2e_latency_seconds_sum", "")]
    assert s[("sluice_engine_state_budget_bytes", "")] > 0 and s[("sluice_engine_steps_total", "")] > 0, s
    # batches of 8 decoding 6 tokens each: steps behind steps (engine.overlap on by default)
    assert s[("sluice_engine_steps_overlapped_total", "")] > 0, s
    for g in ("sluice_engine_running", "sluice_engine_waiting", "sluice_engine_batch_size",
              "sluice_engine_state_used_bytes", "sluice_engine_preemptions_total", "sluice_engine_tokens_per_second",
              "sluice_gpu_memory_used_bytes", "sluice_gpu_memory_total_bytes"):
        assert (g, "") in s, "no %s" % g
    assert s[("sluice_engine_running", "")] == 0 and s[("sluice_jobs_inflight", "")] == 0, s
    assert s[("sluice_ready", "")] == 1 and s[("sluice_partitions_assigned", "")] == 4, s
    # the linter is live: a counter without _total is a finding
    rc, out = promtool("# HELP x_bytes a counter\n# TYPE x_bytes counter\nx_bytes 1\n")
    assert rc != 0 and "_total" in out, (rc, out)
    nq = check_dashboard(s)
    h.log("promtool: no findings; %d dashboard queries parse over served metrics; %d jobs counted by each of %d histograms; engine gauges and lag present"
          % (nq, n, len(HISTS)))


if __name__ == "__main__":
    h.main(test)
