"""A job that kills its worker is not run forever: each time a worker takes a job over from a holder that
died running it, Redis counts a crash, and at worker.max_job_crashes the job goes to the DLQ (class
`crashes`) instead of being run again. One partition, one worker at a time (max_inflight 1, so the job is
alone in flight when the worker dies): the job P runs, the worker is killed with -9 and restarted under
its id, twice; the second restart sends P to the DLQ, its Redis state says `poisoned` with 2 crashes, it
gets no Result, the job after it in the partition completes, and the committed offset moves past both.
A worker stopped with SIGTERM hands its job back without counting a crash (the last phase)."""
import signal
import sys
import time

import harness as h

CRASHES = 2


def job_hash(env, job_id):
    v = env.redis.cmd("HGETALL", "sluice:job:" + job_id) or []
    return {v[i].decode(): v[i + 1].decode() for i in range(0, len(v), 2)}


def test(make):
    env = make("poison", partitions=1)
    settings = {"worker.max_job_crashes": CRASHES, "engine.max_batch": 1, "worker.max_inflight": 1, "worker.grace_ms": 0,
                "kafka.session.timeout.ms": 3000, "kafka.heartbeat.interval.ms": 300}
    poison = h.job_record("poison-%d" % int(time.time() * 1000), "a long story", 4000, ignore_eos=True)
    after = h.job_record("after-%d" % int(time.time() * 1000), "hello", 4)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in (poison, after)], partition=0)

    incarnations = set()
    for k in range(CRASHES):
        w = env.start_worker("w-p", **settings)
        t0 = time.time()
        while True:   # P running under this process's claim (a new incarnation), then the kill
            st = job_hash(env, poison["id"])
            if st.get("status") == "running" and st.get("incarnation") not in incarnations | {None}:
                break
            assert w.poll() is None, "worker exited with %s" % w.returncode
            assert time.time() - t0 < 60, "job not running under the restarted worker: %s" % st
            time.sleep(0.05)
        assert int(st.get("crashes", "0")) == k, "crashes %s before kill %d" % (st.get("crashes"), k + 1)
        incarnations.add(st["incarnation"])
        w.send_signal(signal.SIGKILL)
        w.wait()
        h.log("killed the worker running %s (%d crashes counted before)" % (poison["id"], k))

    w = env.start_worker("w-p", **settings)
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 1, timeout=60)
    assert len(dlq) == 1, "DLQ has %d messages, want 1" % len(dlq)
    hd = dict(dlq[0].headers())
    assert dlq[0].key().decode() == poison["id"], dlq[0].key()
    assert hd["sluice.error.class"] == b"crashes", hd
    err = hd["sluice.error"].decode()
    assert poison["id"] in err and "%d times" % CRASHES in err, err
    assert int(hd["sluice.original.offset"]) == 0, hd
    assert dlq[0].value() == h.encode_job(poison), "the DLQ copy is not the original message"
    h.log("DLQ: %s" % err)
    res = env.results([after["id"]], timeout=60)
    assert res[after["id"]][0]["status"] == "OK", res[after["id"]][0]
    st = job_hash(env, poison["id"])
    assert st.get("status") == "poisoned" and st.get("crashes") == str(CRASHES), st
    env.wait_committed(0, 2, timeout=30)
    got = env.results([poison["id"], after["id"]], timeout=5)
    assert poison["id"] not in got, "the poisoned job got a Result"
    # it stays poisoned: the same message again goes to the DLQ without running
    env.produce([(poison["id"].encode(), h.encode_job(poison))], partition=0)
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 2, timeout=30)
    assert len(dlq) == 2 and int(dict(dlq[1].headers())["sluice.original.offset"]) == 2, len(dlq)
    env.wait_committed(0, 3, timeout=30)

    # a SIGTERM'd worker hands its job back: no crash counted
    slow = h.job_record("slow-%d" % int(time.time() * 1000), "another long story", 4000, ignore_eos=True)
    env.produce([(slow["id"].encode(), h.encode_job(slow))], partition=0)
    t0 = time.time()
    while job_hash(env, slow["id"]).get("status") != "running":
        assert time.time() - t0 < 60, "job not running"
        time.sleep(0.05)
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0, "SIGTERM: exit %s" % w.returncode
    st = job_hash(env, slow["id"])
    assert st.get("status") == "queued" and "crashes" not in st, st
    h.log("SIGTERM handed %s back: %s, no crash counted" % (slow["id"], st.get("status")))


if __name__ == "__main__":
    sys.exit(h.main(test))
