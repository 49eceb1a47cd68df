"""Malformed, oversized, truncated, wrong-schema, unknown-schema-id, empty and invalid messages land in
the DLQ with the original bytes and key and the error headers; the worker keeps going, the good jobs
around them (same partition) complete, and the committed offset moves past all of them."""
import random
import sys

import harness as h


def test(make):
    env = make("dlq")
    w = env.start_worker("w-dlq", **{"input.max_bytes": 16384, "input.schema_ids": "1,7"})
    rnd = random.Random()
    good, msgs = [], []   # msgs: (key, value, expected error class or None)
    names = {}            # index in msgs -> what the error line must name (the field)

    def add_good():
        j = h.job_record("ok-%d-%06x" % (len(msgs), rnd.getrandbits(24)), "hello %d" % len(msgs), 3)
        good.append(j)
        msgs.append((j["id"].encode(), h.encode_job(j, schema_id=rnd.choice([1, 7])), None))

    def add_bad(value, cls, names_field=None):
        if names_field:
            names[len(msgs)] = names_field
        msgs.append((b"bad-%d" % len(msgs), value, cls))

    def invalid(field, prompt, max_tokens, **kw):
        rec = h.job_record("inv%d-%06x" % (len(msgs), rnd.getrandbits(24)), prompt, max_tokens, **kw)
        add_bad(h.encode_job(rec), "validation", field)
        add_good()

    valid = h.avro_encode(h.JOB_SCHEMA, h.job_record("trunc-%06x" % rnd.getrandbits(24), "some prompt text", 4))
    chunk = h.avro_encode(h.CHUNK_SCHEMA, {"id": "c1", "seq": 5, "tokens": [1, 2, 3], "text": None, "done": False})
    add_good()
    add_bad(h.confluent(1, b"\x06abc\x0e" + bytes(rnd.getrandbits(8) for _ in range(40))), "decode")  # malformed
    add_good()
    add_bad(h.confluent(1, b"\x02a" + bytes(20000)), "size")                             # oversized
    add_good()
    add_bad(h.confluent(7, valid[: len(valid) // 2]), "decode")                          # truncated
    add_good()
    add_bad(h.confluent(7, chunk), "decode")                                             # wrong schema
    add_good()
    add_bad(h.confluent(99, valid), "schema")                                            # schema id not allowed
    add_good()
    add_bad(None, "framing")                                                             # null value
    add_good()
    add_bad(b"\x00\x00\x01", "framing")                                                  # short Confluent header
    add_good()
    add_bad(h.encode_job(h.job_record("inv-%06x" % rnd.getrandbits(24), "x", 0)), "validation")   # max_tokens 0
    add_good()
    add_bad(h.encode_job(h.job_record("inv2-%06x" % rnd.getrandbits(24), [1, 999], 2)), "validation")  # bad id
    add_good()
    add_bad(h.encode_job(h.job_record("inv3-%06x" % rnd.getrandbits(24), "", 2)), "validation")  # empty prompt
    add_good()
    add_bad(h.encode_job(h.job_record("inv4-%06x" % rnd.getrandbits(24), "x", 2, top_p=1.5)), "validation")
    add_good()
    # every other rule names its field (the tiny model's context is 4096 tokens)
    invalid("max_tokens: 5000 outside", [1, 2], 5000)
    invalid("prompt: 4096 tokens, longer than the model context", [7] * 4096, 1)
    invalid("max_tokens: prompt 4000 + max_tokens 200 exceed", [7] * 4000, 200)
    invalid("temperature", "x", 2, temperature=-0.5)
    invalid("top_k", "x", 2, top_k=-1)
    invalid("min_p", "x", 2, min_p=2.0)
    invalid("repetition_penalty", "x", 2, repetition_penalty=0.0)
    invalid("stop[0]: empty", "x", 2, stop=[""])
    env.wait_assigned(w)
    where = env.produce([(k, v) for k, v, _ in msgs], partition=0)
    res = env.results([j["id"] for j in good], timeout=60)
    for j in good:
        assert j["id"] in res and res[j["id"]][0]["status"] == "OK", j["id"]
    bad = [(m, wh) for m, wh in zip(msgs, where) if m[2]]
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= len(bad), timeout=30)
    assert len(dlq) == len(bad), "DLQ has %d messages, want %d" % (len(dlq), len(bad))
    by_off = {int(dict(m.headers())["sluice.original.offset"]): m for m in dlq}
    for i, ((key, value, cls), (part, off)) in enumerate(zip(msgs, where)):
        if not cls:
            continue
        m = by_off.get(off)
        assert m is not None, "no DLQ message for offset %d (%s)" % (off, cls)
        hd = dict(m.headers())
        assert hd["sluice.error.class"].decode() == cls, (off, cls, hd)
        assert hd["sluice.error"] and len(hd["sluice.error"]) > 5, hd
        assert names.get(i, "") in hd["sluice.error"].decode(), (names[i], hd["sluice.error"])
        assert hd["sluice.original.topic"] == b"sluice.jobs" and int(hd["sluice.original.partition"]) == part
        assert m.value() == value and m.key() == key, (off, m.value()[:20] if m.value() else None)
        h.log("DLQ @%d %-10s %s" % (off, cls, hd["sluice.error"].decode()[:110]))
    # the committed offset (auto-commit every 5 s) moves past every message
    env.wait_committed(0, where[-1][1] + 1)
    assert w.poll() is None, "the worker died"


if __name__ == "__main__":
    sys.exit(h.main(test))
