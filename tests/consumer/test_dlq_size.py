"""Big messages reach the DLQ and never stall their partition, with default settings: a job message
between librdkafka's default message.max.bytes (1,000,000) and input.max_bytes (1,048,576) goes to the
DLQ with its original bytes (the worker's producer limit follows input.max_bytes); a key that makes the
message larger than input.max_bytes, and a value larger than it, go to the DLQ as `size` with a cut copy
and the headers sluice.dlq.truncated=true, sluice.original.size and sluice.original.key.size. The good
jobs around them complete and the committed offset moves past all of them."""
import random
import sys

import harness as h
from confluent_kafka import Producer

MID = 1_020_000          # between the librdkafka default message.max.bytes and input.max_bytes
BIG_KEY = 1_100_000
BIG_VALUE = 1_200_000


def test(make):
    env = make("dlqsize", partitions=1)
    w = env.start_worker("w-dlqsize")
    uid = "%06x" % random.getrandbits(24)
    good = [h.job_record("g%d-%s" % (i, uid), [4, 5, i], 2) for i in range(4)]
    # a real job with a prompt far past the model context: `validation`, original bytes in the DLQ
    mid = h.encode_job(h.job_record("mid-" + uid, "x" * (MID - 60), 2))
    assert 1_000_000 < len(mid) + len(b"mid-" + uid.encode()) < 1_048_576, len(mid)
    key_job = h.encode_job(h.job_record("bigkey-" + uid, [1, 2], 2))
    big_key = (b"K" + uid.encode()) * (BIG_KEY // 7) + b"k" * (BIG_KEY % 7)
    big_value = h.confluent(1, bytes(random.getrandbits(8) for _ in range(BIG_VALUE)))
    msgs = [(good[0]["id"].encode(), h.encode_job(good[0])), (b"mid-" + uid.encode(), mid),
            (good[1]["id"].encode(), h.encode_job(good[1])), (big_key, key_job),
            (good[2]["id"].encode(), h.encode_job(good[2])), (b"bigvalue-" + uid.encode(), big_value),
            (good[3]["id"].encode(), h.encode_job(good[3]))]
    env.wait_assigned(w)
    where = env.produce(msgs, partition=0, producer=Producer({"bootstrap.servers": env.brokers,
                                                              "message.max.bytes": 4_000_000}))
    res = env.results([j["id"] for j in good], timeout=60, idle=0.5)
    for j in good:
        assert j["id"] in res and res[j["id"]][0]["status"] == "OK", j["id"]
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 3, timeout=30, idle=1)
    assert len(dlq) == 3, "DLQ has %d of the 3 big messages" % len(dlq)
    by_off = {int(dict(m.headers())["sluice.original.offset"]): m for m in dlq}
    # between the two limits: whole
    m = by_off[where[1][1]]
    hd = dict(m.headers())
    assert hd["sluice.error.class"] == b"validation" and "sluice.dlq.truncated" not in hd, hd
    assert m.value() == mid and m.key() == msgs[1][0]
    # the oversized key: `size`, the value whole, the key cut, the original sizes in headers
    m = by_off[where[3][1]]
    hd = dict(m.headers())
    assert hd["sluice.error.class"] == b"size" and hd["sluice.dlq.truncated"] == b"true", hd
    assert int(hd["sluice.original.key.size"]) == BIG_KEY and int(hd["sluice.original.size"]) == len(key_job), hd
    assert m.value() == key_job and 0 < len(m.key()) < BIG_KEY and big_key.startswith(m.key()), len(m.key() or b"")
    # the oversized value: a cut copy (a prefix of the original)
    m = by_off[where[5][1]]
    hd = dict(m.headers())
    assert hd["sluice.error.class"] == b"size" and hd["sluice.dlq.truncated"] == b"true", hd
    assert int(hd["sluice.original.size"]) == BIG_VALUE + 5 and "input.max_bytes" in hd["sluice.error"].decode(), hd
    assert 1_000_000 < len(m.value()) < BIG_VALUE and big_value.startswith(m.value()), len(m.value())
    assert m.key() == msgs[5][0]
    h.log("DLQ: %d-byte message whole; %d-byte key cut to %d; %d-byte value cut to %d" % (
        len(mid), BIG_KEY, len(by_off[where[3][1]].key()), BIG_VALUE + 5, len(m.value())))
    env.wait_committed(0, where[-1][1] + 1)
    assert w.poll() is None, "the worker died"


if __name__ == "__main__":
    sys.exit(h.main(test))
