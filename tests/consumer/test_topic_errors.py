"""Topics the cluster refuses: a job whose reply_topic does not exist (UNKNOWN_TOPIC_OR_PART, a cluster
without auto-create) gets its result on the default result topic with a `sluice.error` header naming
the reply topic, once, instead of being retried forever; a DLQ topic that is missing for a few seconds
delays the DLQ message (the worker keeps it and writes it again) but loses nothing: once the topic
exists the DLQ message arrives with its headers, and the good jobs around it complete meanwhile.
A Result larger than Kafka takes (here the producer's message.max.bytes, lowered to 2000) does not
stall the partition: an ERROR Result says where the full one is (Redis sluice:result:<id>, which
holds it whole). (topic.metadata.propagation.max.ms / refresh.interval.ms are shortened so the test
takes seconds.)"""
import random
import sys
import time

import harness as h

DLQ_DOWN_S = 12   # from the mock's start; the worker meets the refusal ~5 s in (start, assignment, 1 s propagation)


def test(make):
    env = make("topicerr", partitions=1, topic_errors=(
        "replies.denied=UNKNOWN_TOPIC_OR_PART", "sluice.jobs.dlq=UNKNOWN_TOPIC_OR_PART:%d" % DLQ_DOWN_S))
    t_env = time.time()
    w = env.start_worker("w-topicerr", **{"kafka.topic.metadata.propagation.max.ms": 1000,
                                          "kafka.topic.metadata.refresh.interval.ms": 1000,
                                          "kafka.message.max.bytes": 2000})
    uid = "%06x" % random.getrandbits(24)
    good = [h.job_record("good%d-%s" % (i, uid), "hello %d" % i, 3) for i in range(4)]
    denied = h.job_record("denied-" + uid, [5, 6, 7], 3, reply_topic="replies.denied", metadata={"t": uid})
    big = h.job_record("big-" + uid, [9, 8, 7], 600, ignore_eos=True, logprobs=True, metadata={"t": uid})
    bad = h.confluent(1, b"\x06abc\x0e" + bytes(random.getrandbits(8) for _ in range(40)))
    env.wait_assigned(w)
    msgs = [(good[0]["id"].encode(), h.encode_job(good[0])), (b"bad-" + uid.encode(), bad),
            (good[1]["id"].encode(), h.encode_job(good[1])), (denied["id"].encode(), h.encode_job(denied)),
            (good[2]["id"].encode(), h.encode_job(good[2])), (big["id"].encode(), h.encode_job(big)),
            (good[3]["id"].encode(), h.encode_job(good[3]))]
    where = env.produce(msgs, partition=0)

    res = env.results([j["id"] for j in good + [denied, big]], timeout=60, idle=0.5)
    for j in good:
        r = res[j["id"]][0]
        assert r["status"] == "OK" and "_error" not in r, r
    r = res[denied["id"]][0]
    assert r["status"] == "OK" and r["metadata"] == {"t": uid}, r
    assert "replies.denied" in r.get("_error", "") and "nknown" in r["_error"], r.get("_error")
    assert len(res[denied["id"]]) == 1, "the fallback result was written %d times" % len(res[denied["id"]])
    # the oversized result: ERROR on Kafka naming the Redis key, the whole Result in Redis
    r = res[big["id"]][0]
    key = "sluice:result:" + big["id"]
    assert r["status"] == "ERROR" and r["tokens"] == [] and key in r["error"] and "message limit" in r["error"], r
    assert r["metadata"] == {"t": uid} and r["usage"]["completion_tokens"] == 600, r
    full = h.avro_decode(h.RESULT_SCHEMA, env.redis.cmd("GET", key))
    assert full["status"] == "OK" and len(full["tokens"]) == 600 and len(full["logprobs"]) == 600, full["status"]
    assert full["tokens"] == h.generate([9, 8, 7], 600, ignore_eos=True)["tokens"]

    # the DLQ message arrives once the topic exists again (a reader's metadata for a missing topic has
    # no partitions, so read only after that), with its headers and the original bytes
    time.sleep(max(0.0, t_env + DLQ_DOWN_S + 1 - time.time()))
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 1, timeout=30, idle=1.0)
    assert len(dlq) == 1, "DLQ has %d messages, want 1" % len(dlq)
    hd = dict(dlq[0].headers())
    assert dlq[0].value() == bad and dlq[0].key() == b"bad-" + uid.encode()
    assert hd["sluice.error.class"] == b"decode" and int(hd["sluice.original.offset"]) == where[1][1], hd
    log = open(w.errpath).read()
    assert "DLQ" in log and "retrying" in log, "the DLQ write never failed: the test did not test the retry"
    # everything done in Redis, and the worker stores the offset past all six messages
    for j in good + [denied, big]:
        assert env.job_status(j["id"]) == "done", j["id"]
    env.wait_committed(0, where[-1][1] + 1)
    assert w.poll() is None, "the worker died"
    h.log("reply_topic refused -> default topic with sluice.error; DLQ refused %d s -> retried, delivered; "
          "%d-byte result over message.max.bytes -> ERROR result + full copy in Redis: OK" % (DLQ_DOWN_S, len(
              env.redis.cmd("GET", key))))


if __name__ == "__main__":
    sys.exit(h.main(test))
