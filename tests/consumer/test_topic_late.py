"""The jobs topic is unavailable when the worker subscribes (the cluster refuses it with
TOPIC_AUTHORIZATION_FAILED for the first seconds, as while an ACL is being granted): the worker keeps
asking for the cluster's metadata while the topic is missing or refused, so it is assigned the topic's
partitions within seconds of its return, not at librdkafka's next periodic refresh
(topic.metadata.refresh.interval.ms, 5 minutes by default), and runs the jobs."""
import random
import sys
import time

import harness as h

DOWN_S = 8          # from the mock's start; the worker subscribes ~1-2 s in
ASSIGN_WITHIN_S = 15
# librdkafka's group join keeps asking for a topic that is unknown, but a topic it was refused stays
# refused until the periodic refresh
ERR = "TOPIC_AUTHORIZATION_FAILED"


def test(make):
    env = make("topiclate", topic_errors=("sluice.jobs=%s:%d" % (ERR, DOWN_S),))
    t_env = time.time()
    w = env.start_worker("w-late")
    t0 = time.time()
    while "not available" not in open(w.errpath).read():
        assert time.time() - t0 < 30, "the worker never reported the missing topic:\n" + open(w.errpath).read()
        assert w.poll() is None, "the worker exited:\n" + open(w.errpath).read()
        time.sleep(0.1)
    h.log("the worker saw the topic missing %.1f s in" % (time.time() - t_env))
    assert time.time() < t_env + DOWN_S, "the topic came back before the worker saw it missing; raise DOWN_S"
    time.sleep(max(0.0, t_env + DOWN_S - time.time()))
    back = time.time()
    env.wait_assigned(w, timeout=ASSIGN_WITHIN_S)
    h.log("assigned %.1f s after the topic came back" % (time.time() - back))
    uid = "%06x" % random.getrandbits(24)
    jobs = [h.job_record("late%d-%s" % (i, uid), [3, 1, i], 3) for i in range(8)]
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    res = env.results([j["id"] for j in jobs], timeout=30, idle=0.5)
    for j in jobs:
        assert j["id"] in res and res[j["id"]][0]["status"] == "OK", j["id"]
    assert w.poll() is None, "the worker died"


if __name__ == "__main__":
    sys.exit(h.main(test))
