"""Two workers in one group share 4 partitions: every job is done exactly once, none by both."""
import random
import sys
import time

import harness as h


def test(make):
    env = make("two")
    a = env.start_worker("wA")
    b = env.start_worker("wB")
    t0 = time.time()
    while True:
        pa, pb = h.assignment(a), h.assignment(b)
        if pa and pb and not (pa & pb) and (pa | pb) == {0, 1, 2, 3}:
            break
        assert time.time() - t0 < 40, "no stable split of 4 partitions: %s %s" % (pa, pb)
        time.sleep(0.2)
    h.log("assignment wA=%s wB=%s" % (sorted(pa), sorted(pb)))
    rnd = random.Random()
    jobs = [h.job_record("two-%d-%06x" % (i, rnd.getrandbits(24)), [rnd.randrange(256) for _ in range(5)],
                         rnd.randint(2, 8)) for i in range(200)]
    where = env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    res = env.results([j["id"] for j in jobs], timeout=120, idle=3)
    by_worker = {"wA": 0, "wB": 0}
    for j, (part, _) in zip(jobs, where):
        rs = res.get(j["id"])
        assert rs, "no result for " + j["id"]
        assert len(rs) == 1, "job %s done %d times: %s" % (j["id"], len(rs), [r["worker"] for r in rs])
        r = rs[0]
        assert r["status"] == "OK"
        owner = "wA" if part in pa else "wB"
        assert r["worker"] == owner, "job on partition %d done by %s, owner %s" % (part, r["worker"], owner)
        assert env.job_status(j["id"]) == "done"
        assert env.redis.cmd("HGET", "sluice:job:" + j["id"], "worker").decode() == owner
        by_worker[owner] += 1
    assert by_worker["wA"] > 0 and by_worker["wB"] > 0, by_worker
    assert h.assignment(a) == pa and h.assignment(b) == pb, "a rebalance happened during the run"
    h.log("200 jobs done once each: %s" % by_worker)


if __name__ == "__main__":
    sys.exit(h.main(test))
