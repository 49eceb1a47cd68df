"""Job ids are checked: an id must be valid UTF-8 without U+0000 and at most 256 bytes. An id with a NUL
byte (which C strings would cut short: 'X\\0a' and 'X\\0b' would both become 'X'), invalid UTF-8 (which
would make every Result reader fail on the results topic), an overlong or surrogate encoding, or 257
bytes goes to the DLQ as `validation` naming the id rule; ids of 256 bytes and multi-byte UTF-8 ids
work. Every message on the results topic decodes with a strict Avro reader."""
import random
import sys

import harness as h


def with_raw_id(raw, prompt, max_tokens, **kw):
    """A Confluent-framed Job whose id is the bytes `raw` (not necessarily UTF-8): encode with a
    placeholder of the same length, then put the bytes in its place."""
    ph = "P" * len(raw)
    enc = h.encode_job(h.job_record(ph, prompt, max_tokens, **kw))
    at = enc.index(ph.encode())
    return enc[:at] + raw + enc[at + len(raw):]


def test(make):
    env = make("ids", partitions=1)
    w = env.start_worker("w-ids")
    uid = "%06x" % random.getrandbits(24)
    good = ["ok-" + uid, "\u00e9\u65e5\u672c-\U0001f600-" + uid, ("L" + uid) * (256 // 7) + "x" * (256 % 7)]
    assert len(good[2].encode()) == 256
    bad = [b"X\x00a" + uid.encode(), b"X\x00b" + uid.encode(), b"bad\xff\xfe" + uid.encode(),
           b"over\xc0\xaf" + uid.encode(), b"sur\xed\xa0\x80" + uid.encode(), ("M" + uid) * 36 + "xxxxx"]
    bad = [b if isinstance(b, bytes) else b.encode() for b in bad]
    assert len(bad[-1]) == 257
    why = ["NUL", "NUL", "UTF-8", "UTF-8", "UTF-8", "longer than 256"]
    msgs = []
    for i, raw in enumerate(bad):
        msgs.append((raw, with_raw_id(raw, [5, 6, i], 2)))
        g = good[i % len(good)] if i < len(good) else None
        if g:
            msgs.append((g.encode(), h.encode_job(h.job_record(g, [7, 8, i], 2))))
    env.wait_assigned(w)
    where = env.produce(msgs, partition=0)
    res = env.results(good, timeout=60, idle=2)
    for g in good:
        assert g in res and res[g][0]["status"] == "OK" and len(res[g]) == 1, (g, res.get(g))
    assert set(res) == set(good), "results for ids that were not sent: %r" % sorted(set(res) - set(good))
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= len(bad), timeout=30, idle=1)
    assert len(dlq) == len(bad), "DLQ has %d messages, want %d" % (len(dlq), len(bad))
    by_key = {m.key(): m for m in dlq}
    for raw, reason in zip(bad, why):
        m = by_key.get(raw)
        assert m is not None, "no DLQ message for id %r" % raw
        hd = dict(m.headers())
        err = hd["sluice.error"].decode()
        assert hd["sluice.error.class"] == b"validation" and "id: " in err and reason in err, (raw, hd)
        err.encode("utf-8")   # the error header itself is valid UTF-8 (the id is escaped in it)
        h.log("DLQ %-40r %s" % (raw[:40], err[:100]))
    env.wait_committed(0, where[-1][1] + 1)
    assert w.poll() is None, "the worker died"


if __name__ == "__main__":
    sys.exit(h.main(test))
