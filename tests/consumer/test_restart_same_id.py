"""A worker killed with -9 and restarted under the same worker.id (as the README recommends) must not
make the others wait for its dead claims' leases: the restarted process writes its heartbeat under the
same key, but with a new incarnation, so a worker that meets a claim of the dead incarnation takes it at
once. One partition, two workers: A runs the jobs and is killed mid-run with claims held; A restarts
at once under the same id (its heartbeat is live again) while B takes the partition over. (The
restarted A subscribes another topic, so that the partition goes to B every time: which of two idle
members gets it is otherwise up to the assignor.) With the default 60 s lease, all 200 jobs still
finish within 30 s of being sent; every job has a result, duplicates are identical."""
import signal
import sys
import time

import harness as h

N = 200
LIMIT_S = 30


def test(make):
    env = make("sameid", partitions=1, topics=("sluice.jobs.other",))
    # the group notices the dead member after session.timeout.ms (then the mock takes seconds to
    # rebalance): a short one leaves most of the 30 s to the jobs on a loaded machine
    settings = {"engine.max_batch": 16, "worker.max_inflight": 32, "kafka.session.timeout.ms": 3000,
                "kafka.heartbeat.interval.ms": 300}
    a = env.start_worker("w-a", **settings)
    env.wait_assigned(a)                   # A holds the one partition; B joins as a standby
    b = env.start_worker("w-b", **settings)
    jobs = h.slow_jobs(N, "sid", max_tokens=16)
    watch = h.ResultWatcher(env)
    t0 = time.time()
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    watch.wait(lambda: watch.distinct() >= 20, 60, "20 results")
    # kill while A holds claims of jobs whose results are not out (between engine rounds it may hold
    # none; a claimed job whose result is out already needs nobody to wait for it)
    def some_running():
        with watch.lock:
            out = set(watch.results)
        return sum(env.job_status(j["id"]) == "running" and j["id"] not in out for j in jobs) >= 4
    # A is stopped (SIGSTOP) before it is judged, so nothing it does between the check and the kill can
    # empty its claims; if it holds none without a result, it runs on and is caught again
    for _ in range(50):
        watch.wait(some_running, 60, "4 jobs running under A's claims")
        a.send_signal(signal.SIGSTOP)
        time.sleep(1)   # results A delivered before it stopped reach the watcher
        with watch.lock:
            out = set(watch.results)
        stuck = [j["id"] for j in jobs if env.job_status(j["id"]) == "running" and j["id"] not in out]
        if stuck:
            break
        a.send_signal(signal.SIGCONT)
        time.sleep(0.2)
    a.send_signal(signal.SIGKILL)
    a.wait()
    at_kill = watch.distinct()
    h.log("killed A with %d/%d results out, %d jobs claimed by it without a result" % (at_kill, N, len(stuck)))
    assert stuck, "A held no claim of an unfinished job when it died: the test tests nothing"
    a2 = env.start_worker("w-a", **dict(settings, **{"topic.jobs": "sluice.jobs.other"}))   # same id, new process
    env.wait_assigned(b, timeout=30)       # B takes the partition once A's session times out
    h.log("A restarted under the same id; B assigned %.1f s after the jobs were sent" % (time.time() - t0))
    watch.wait(lambda: watch.distinct() >= N, LIMIT_S + 30, "all results")
    took = time.time() - t0
    time.sleep(1)
    dups = h.check_complete(watch, jobs)
    watch.close()
    h.log("all %d jobs done %.1f s after they were sent (%d duplicates, identical)" % (N, took, dups))
    assert took < LIMIT_S, "the run took %.1f s: the dead incarnation's claims were waited for" % took
    for j in jobs:
        assert env.job_status(j["id"]) == "done", j["id"]
    assert b.poll() is None and a2.poll() is None, "a worker died"


if __name__ == "__main__":
    sys.exit(h.main(test))
