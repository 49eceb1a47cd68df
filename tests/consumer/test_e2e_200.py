"""200 jobs from an independent client (confluent_kafka + python3-avro, Confluent framing) through one
worker: every Result decodes, status OK, tokens identical to sluice-generate for the same prompt and
seed, text = the tokens' bytes as UTF-8 with U+FFFD, Redis shows each job done."""
import random
import sys

import harness as h

EOS = 2


def test(make):
    env = make("e2e200")
    w = env.start_worker("w-e2e")
    rnd = random.Random()
    jobs = []
    for i in range(200):
        kind = i % 4
        jid = "e2e-%d-%08x" % (i, rnd.getrandbits(32))
        if kind in (0, 2):
            text = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz ,.!?ABCXYZ0123456789") for _ in range(rnd.randint(1, 20)))
            prompt, ids = text, list(text.encode())
        else:
            ids = [rnd.randrange(256) for _ in range(rnd.randint(1, 24))]
            prompt = ids
        kw = {}
        if kind == 1:
            kw = dict(temperature=0.9, seed=rnd.getrandbits(63), top_k=rnd.randint(0, 50))
        elif kind == 2:
            kw = dict(temperature=1.0, top_p=0.9)          # no seed: derived from the id
        elif kind == 3:
            kw = dict(ignore_eos=True)
        rec = h.job_record(jid, prompt, rnd.randint(1, 24 if kind == 3 else 12), **kw)
        jobs.append((rec, ids))
    env.wait_assigned(w)
    env.produce([(r["id"].encode(), h.encode_job(r, schema_id=7)) for r, _ in jobs])
    res = env.results([r["id"] for r, _ in jobs], timeout=120)
    missing = [r["id"] for r, _ in jobs if r["id"] not in res]
    assert not missing, "no result for %d jobs, e.g. %s" % (len(missing), missing[:3])
    n_stop = 0
    for rec, ids in jobs:
        got = res[rec["id"]][0]
        assert got["status"] == "OK", got
        assert got["_framed"], "a Confluent-framed job must get a Confluent-framed result"
        seed = rec["seed"] if rec["seed"] is not None else h.seed_from_id(rec["id"])
        ref = h.generate(ids, rec["max_tokens"], seed=seed, temperature=rec["temperature"], top_k=rec["top_k"],
                         top_p=rec["top_p"], ignore_eos=rec["ignore_eos"])
        assert got["tokens"] == ref["tokens"], (rec, got["tokens"], ref["tokens"])
        assert got["finish_reason"] == ref["finish_reason"].upper(), (got["finish_reason"], ref["finish_reason"])
        n_stop += got["finish_reason"] == "STOP"
        want_text = bytes(t for t in got["tokens"] if t != EOS).decode("utf-8", errors="replace")
        assert got["text"] == want_text, (got["text"], want_text)
        assert got["usage"]["prompt_tokens"] == len(ids) and got["usage"]["completion_tokens"] == len(got["tokens"])
        assert got["worker"] == "w-e2e" and got["model"], got
        assert env.job_status(rec["id"]) == "done", rec["id"]
        assert env.redis.cmd("EXISTS", "sluice:result:" + rec["id"]) == 1
    hb = env.redis.cmd("HGETALL", "sluice:worker:w-e2e")
    assert hb and b"partitions" in hb, hb
    h.log("200 jobs OK (%d finished by EOS), all tokens equal sluice-generate, all done in Redis" % n_stop)


if __name__ == "__main__":
    sys.exit(h.main(test))
