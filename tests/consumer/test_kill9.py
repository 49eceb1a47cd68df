"""kill -9 of a worker mid-run, then a restart (same worker.id): every job has a result, the distinct
job ids in the result topic equal the submitted ones, and duplicates (re-emitted from Redis or
recomputed from the same seed) carry identical results."""
import signal
import sys
import time

import harness as h

N = 300


def test(make):
    env = make("kill9")
    settings = {"engine.max_batch": 4, "worker.max_inflight": 16}
    w = env.start_worker("w-k9", **settings)
    jobs = h.slow_jobs(N, "k9")
    env.wait_assigned(w)
    watch = h.ResultWatcher(env)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    watch.wait(lambda: watch.distinct() >= 40, 60, "40 results")
    w.send_signal(signal.SIGKILL)
    w.wait()
    at_kill = watch.distinct()
    h.log("killed the worker with %d/%d results out" % (at_kill, N))
    assert at_kill < N, "the run finished before the kill; make the jobs slower"
    time.sleep(1)
    dups = h.finish_with_worker(env, "w-k9", settings, watch, jobs)
    h.log("all %d jobs have a result; %d duplicates, all identical" % (N, dups))


if __name__ == "__main__":
    sys.exit(h.main(test))
