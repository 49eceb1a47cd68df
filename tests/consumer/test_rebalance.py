"""A second worker joins mid-run: the cooperative rebalance moves two partitions; the first worker
flushes and commits what it finished and hands back its running jobs on those partitions; every job
gets a result, distinct ids == submitted, duplicates are identical, all done in Redis."""
import sys
import time

import harness as h

N = 300


def test(make):
    env = make("rebal")
    settings = {"engine.max_batch": 4, "worker.max_inflight": 16}
    a = env.start_worker("wA", **settings)
    jobs = h.slow_jobs(N, "rb", max_tokens=256)
    env.wait_assigned(a)
    watch = h.ResultWatcher(env)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    watch.wait(lambda: watch.distinct() >= 20, 60, "20 results")
    b = env.start_worker("wB", **settings)
    t0 = time.time()
    while not h.assignment(b):
        assert time.time() - t0 < 40, "the second worker got no partitions"
        time.sleep(0.1)
    at_join = watch.distinct()
    h.log("wB joined with %d/%d results out; wA holds %s, wB %s" % (at_join, N, sorted(h.assignment(a)),
                                                                   sorted(h.assignment(b))))
    assert at_join < N, "the run finished before the rebalance; make the jobs slower"
    watch.wait(lambda: watch.distinct() >= N, 180, "all results")
    time.sleep(2)
    dups = h.check_complete(watch, jobs)
    watch.close()
    with watch.lock:
        workers = {rs[-1][1]["worker"] for rs in watch.results.values()}
    assert workers == {"wA", "wB"}, workers
    for j in jobs:
        assert env.job_status(j["id"]) == "done", j["id"]
    log = open(a.errpath).read()
    h.log("all %d jobs done; %d duplicates (identical); wA revoked: %s" % (N, dups, "revoked" in log))
    assert "revoked" in log


if __name__ == "__main__":
    sys.exit(h.main(test))
