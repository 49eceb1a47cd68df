"""Startup and readiness: with an unreachable kafka.bootstrap.servers /healthz is 200 and /readyz 503
naming the brokers, and after 10 s the worker logs one line `cannot reach Kafka brokers X for 10 s:
<reason>` instead of librdkafka's own lines; kafka.startup_timeout_ms makes it exit 1 with that line;
a healthy worker's /readyz turns 200, goes 503 while Redis is down and 200 again after; the first
Result of a fresh worker is not held up by producer metadata or its idempotent PID."""
import time
import urllib.error
import urllib.request

import harness as h


def get(port, path):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:   # not listening yet
        return 0, str(e)


def wait_status(port, path, status, timeout, what):
    t0 = time.time()
    while True:
        got = get(port, path)
        if got[0] == status:
            return got[1]
        assert time.time() - t0 < timeout, "%s: %s stayed %r for %d s" % (what, path, got, timeout)
        time.sleep(0.2)


def test(make):
    env = make("readyz", partitions=2)

    # unreachable brokers: a closed loopback port
    bad = "127.0.0.1:%d" % h.free_port()
    mport = h.free_port()
    w = env.start_worker("w-bad", **{"kafka.bootstrap.servers": bad, "metrics.port": mport})
    body = wait_status(mport, "/readyz", 503, 20, "bad brokers")
    t0 = time.time()
    assert get(mport, "/healthz")[0] == 200
    while "not reachable" not in body and time.time() - t0 < 10:   # "model not loaded yet" first
        time.sleep(0.2)
        body = get(mport, "/readyz")[1]
    assert body.count("\n") == 1 and ("Kafka brokers %s not reachable" % bad) in body, body
    line = "cannot reach Kafka brokers %s for 10 s: " % bad
    while line not in open(w.errpath).read():
        assert w.poll() is None, open(w.errpath).read()
        assert time.time() - t0 < 25, "no '%s' line:\n%s" % (line, open(w.errpath).read())
        time.sleep(0.2)
    time.sleep(3)
    log = open(w.errpath).read()
    assert log.count("cannot reach Kafka brokers") == 1, log        # at most once a minute
    assert "Connection refused" in log.split(line, 1)[1].split("\n")[0], log
    assert "librdkafka" not in log, "librdkafka's own lines still printed:\n" + log
    assert get(mport, "/readyz")[0] == 503 and get(mport, "/metrics")[1].count("sluice_ready 0") == 1
    w.terminate()
    assert w.wait(timeout=30) == 0
    h.log("bad brokers: /readyz 503 (%s), one line after 10 s, no librdkafka lines" % body.strip())

    # kafka.startup_timeout_ms: exit 1 with the line
    w = env.start_worker("w-timeout", **{"kafka.bootstrap.servers": "nosuchhost.invalid:9092",
                                         "kafka.startup_timeout_ms": 1500})
    t0 = time.time()
    rc = w.wait(timeout=30)
    took = time.time() - t0
    log = open(w.errpath).read()
    assert rc == 1, "exit %d:\n%s" % (rc, log)
    assert "cannot reach Kafka brokers nosuchhost.invalid:9092 for 1.5 s: " in log, log
    assert "librdkafka" not in log, log
    h.log("startup timeout: exit 1 after %.1f s" % took)

    # healthy: /readyz 200; Redis down -> 503, back -> 200
    mport = h.free_port()
    w = env.start_worker("w-ok", **{"metrics.port": mport})
    t0 = time.time()
    assert wait_status(mport, "/readyz", 200, 30, "healthy worker") == "ready\n"
    h.log("healthy worker ready after %.1f s" % (time.time() - t0))
    env.stop_redis()
    body = wait_status(mport, "/readyz", 503, 20, "Redis stopped")
    assert "Redis" in body, body
    env.start_redis()
    wait_status(mport, "/readyz", 200, 30, "Redis back")
    h.log("Redis down: /readyz 503 (%s), back: 200" % body.strip())

    # warm producer: the first job's Result leaves within the delivery time of later ones (not ~1 s of
    # metadata and PID requests); the worker has been idle since start, so only the warm-up helps
    m = get(mport, "/metrics")[1]
    assert "sluice_job_e2e_latency_seconds_count 0" in m, m
    job = h.job_record("first", [5, 6, 7], 1)
    env.produce([(job["id"].encode(), h.encode_job(job))])
    res = env.results([job["id"]], timeout=30, idle=0.2)
    assert res[job["id"]][0]["status"] == "OK", res
    m = get(mport, "/metrics")[1]
    vals = {l.split()[0]: float(l.split()[1]) for l in m.split("\n") if l and not l.startswith("#")}
    added = vals["sluice_job_added_latency_seconds_sum"]
    assert vals["sluice_job_added_latency_seconds_count"] == 1, vals
    h.log("first job: %.1f ms added latency in the worker" % (added * 1e3))
    assert added < 0.3, "the first Result took %.0f ms beyond the engine: producer not warm" % (added * 1e3)


if __name__ == "__main__":
    h.main(test)
