"""One job id, one job, computed at most once at a time. 30 jobs sent twice back to back (15 pairs on
one partition, 15 split over two partitions of the same worker) and one sent again after its result:
each is computed once (sluice_tokens_generated_total counts exactly one run per job) and every message
gets the same Result (the duplicate re-emits the first one's). A different payload under an id that is
in progress, or under an id already done (known from Redis), goes to the DLQ as `conflict` naming the
id, and the first job's Result stands."""
import random
import sys
import time
import urllib.request

import harness as h

T = 8   # tokens per job (ignore_eos): the engine's token count is exact


def metric(port, name):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError("no %s in /metrics" % name)


def test(make):
    env = make("dupids", partitions=2)
    mport = h.free_port()
    w = env.start_worker("w-dup", **{"metrics.port": mport, "engine.max_batch": 8})
    uid = "%06x" % random.getrandbits(24)
    rnd = random.Random()

    def job(name, max_tokens=T):
        return h.job_record("%s-%s" % (name, uid), [rnd.randrange(256) for _ in range(6)], max_tokens,
                            ignore_eos=True)

    pairs = [job("dup%d" % i) for i in range(30)]
    again = job("again")
    c1 = job("conflict1")
    c1b = dict(c1, max_tokens=12)           # same id, another payload, sent right behind the first
    c2 = job("conflict2")
    c2b = dict(c2, max_tokens=12)           # same id, another payload, sent after the first is done
    env.wait_assigned(w)
    t = env.producer()
    msgs0, msgs1 = [], []
    for i, j in enumerate(pairs):
        v = h.encode_job(j)
        msgs0.append((j["id"].encode(), v))
        (msgs0 if i < 15 else msgs1).append((j["id"].encode(), v))
    msgs0 += [(c1["id"].encode(), h.encode_job(c1)), (c1["id"].encode(), h.encode_job(c1b)),
              (again["id"].encode(), h.encode_job(again)), (c2["id"].encode(), h.encode_job(c2))]
    env.produce(msgs1, partition=1, producer=t)
    env.produce(msgs0, partition=0, producer=t)
    ids = [j["id"] for j in pairs + [c1, c2, again]]
    res = env.results(ids, timeout=60, idle=0.5)
    # later: the same job again (absorbed: re-emitted), and another payload under a done id (conflict)
    env.produce([(again["id"].encode(), h.encode_job(again)), (c2["id"].encode(), h.encode_job(c2b))],
                partition=0, producer=t)
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 2, timeout=30, idle=0.5)
    twice = [j["id"] for j in pairs + [again]]
    res = env.results(twice, timeout=30, idle=2, count=2)   # every message of a job gets its Result
    for jid in ids:
        rs = res.get(jid, [])
        want = 1 if jid in (c1["id"], c2["id"]) else 2
        assert len(rs) == want, "%s: %d results, want %d" % (jid, len(rs), want)
        assert all(h.same_result(rs[0], r) for r in rs), (jid, rs)
        assert rs[0]["status"] == "OK" and len(rs[0]["tokens"]) == T, (jid, rs[0])
    assert len(dlq) == 2, "DLQ has %d messages, want the 2 conflicting payloads" % len(dlq)
    for m in dlq:
        hd = dict(m.headers())
        err = hd["sluice.error"].decode()
        assert hd["sluice.error.class"] == b"conflict" and m.key().decode() in err and "different payload" in err, hd
        assert m.value() in (h.encode_job(c1b), h.encode_job(c2b)), "the DLQ holds another message"
        h.log("DLQ: " + err)
    assert {m.value() for m in dlq} == {h.encode_job(c1b), h.encode_job(c2b)}
    # each job ran once: 30 + 3 jobs of T tokens
    t0 = time.time()
    while metric(mport, "sluice_tokens_generated_total") < 33 * T and time.time() - t0 < 5:
        time.sleep(0.1)
    tokens = metric(mport, "sluice_tokens_generated_total")
    assert tokens == 33 * T, "the engine generated %d tokens for 33 jobs of %d: duplicates were computed" % (
        tokens, T)
    for jid in ids:
        assert env.job_status(jid) == "done", jid
    assert w.poll() is None, "the worker died"
    h.log("33 jobs, %d messages: %d tokens computed, duplicates re-emitted, 2 conflicts in the DLQ" % (
        len(msgs0) + len(msgs1) + 2, tokens))


if __name__ == "__main__":
    sys.exit(h.main(test))
