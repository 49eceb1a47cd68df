"""SIGTERM while Redis is down: Results delivered during the outage cannot be marked done in Redis, but
they are in Kafka. The drain does not wait for those Redis writes: it ends as soon as the running jobs
are finished (well inside worker.grace_ms), stores the offsets of every delivered Result and hands
nothing back, so a worker started afterwards (Redis back, empty) computes only what was never
delivered: every job has exactly one result."""
import signal
import sys
import time
import urllib.request

import harness as h

N = 60
GRACE_MS = 15000


def metric(port, name):
    for line in urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode().split("\n"):
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def test(make):
    env = make("termredis")
    mport = h.free_port()
    settings = {"engine.max_batch": 4, "worker.max_inflight": 8, "redis.timeout_ms": 200,
                "worker.grace_ms": GRACE_MS, "metrics.port": mport}
    w = env.start_worker("w-tr1", **settings)
    jobs = h.slow_jobs(N, "tr", max_tokens=64)
    env.wait_assigned(w)
    watch = h.ResultWatcher(env)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    watch.wait(lambda: watch.distinct() >= 10, 60, "10 results")
    # Redis goes down while jobs run (the worker pauses its partitions at 8 in flight and waits for a re-fetch, so
    # right after a result it can hold none): their Results are delivered during the outage and cannot be marked done
    watch.wait(lambda: metric(mport, "sluice_jobs_inflight") >= 2, 60, "jobs in flight")
    env.stop_redis()
    at_down = watch.distinct()
    delivered = metric(mport, "sluice_results_total")
    watch.wait(lambda: metric(mport, "sluice_results_total") > delivered, 60, "a Result delivered with Redis down")
    t0 = time.time()
    w.send_signal(signal.SIGTERM)
    rc = w.wait(timeout=GRACE_MS / 1000 + 10)
    took = time.time() - t0
    at_exit = watch.distinct()
    log = open(w.errpath).read()
    h.log("SIGTERM with Redis down: exit %d after %.2f s, %d/%d results out (%d since Redis went down)"
          % (rc, took, at_exit, N, at_exit - at_down))
    assert rc == 0, "exit status %d" % rc
    assert took < 6, "the drain took %.1f s of a %d ms grace: it waited for Redis" % (took, GRACE_MS)
    assert "handing back" not in log, [l for l in log.splitlines() if "handing back" in l]
    assert "not marked done in Redis" in log, "no delivered result waited for Redis: the test did not test it"
    env.start_redis()
    w2 = env.start_worker("w-tr2", **settings)
    env.wait_assigned(w2)
    watch.wait(lambda: watch.distinct() >= N, 90, "all results after the restart")
    time.sleep(2)   # a recomputed job's second result would arrive by now
    h.check_complete(watch, jobs)
    with watch.lock:
        twice = [jid for jid, rs in watch.results.items() if len(rs) > 1]
    assert not twice, "%d jobs delivered before the SIGTERM were computed again, e.g. %s" % (len(twice), twice[:3])
    watch.close()
    h.log("%d jobs, one result each; the drain ended in %.2f s" % (N, took))


if __name__ == "__main__":
    sys.exit(h.main(test))
