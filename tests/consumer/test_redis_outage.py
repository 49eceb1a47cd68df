"""Redis stopped for 5 s during a run (killed, then a fresh redis-server on the same port): the worker
keeps going (claims fail open, done writes are retried), no job is lost, and every job that finished
from the outage on is marked done in the new Redis once it is back."""
import sys
import time

import harness as h

N = 300


def test(make):
    env = make("redis")
    settings = {"engine.max_batch": 4, "worker.max_inflight": 16, "redis.timeout_ms": 200}
    w = env.start_worker("w-redis", **settings)
    jobs = h.slow_jobs(N, "rd")
    env.wait_assigned(w)
    watch = h.ResultWatcher(env)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    watch.wait(lambda: watch.distinct() >= 30, 60, "30 results")
    t_down = time.time()
    env.stop_redis()
    at_down = watch.distinct()
    h.log("redis stopped with %d/%d results out" % (at_down, N))
    time.sleep(5)
    during = watch.distinct() - at_down
    env.start_redis()
    h.log("redis back; %d results arrived while it was down" % during)
    assert at_down < N
    watch.wait(lambda: watch.distinct() >= N, 120, "all results")
    time.sleep(1)
    dups = h.check_complete(watch, jobs)
    watch.close()
    assert w.poll() is None, "the worker died"
    # jobs whose result came out after the outage began: their done writes were retried into the new Redis
    with watch.lock:
        late = [jid for jid, rs in watch.results.items() if rs[0][0] >= t_down + 0.5]
    t0 = time.time()
    while True:
        missing = [jid for jid in late if env.job_status(jid) != "done"]
        if not missing:
            break
        assert time.time() - t0 < 20, "%d jobs not done in Redis, e.g. %s" % (len(missing), missing[:3])
        time.sleep(0.5)
    log = open(w.errpath).read()
    h.log("no job lost (%d duplicates, identical); %d late jobs done in Redis; worker log mentions reconnect: %s"
          % (dups, len(late), "reconnected" in log))
    assert "reconnected" in log


if __name__ == "__main__":
    sys.exit(h.main(test))
