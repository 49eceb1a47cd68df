"""The worker on the GPU: sluice-worker with engine.backend=cuda (real redis-server, the librdkafka mock
cluster, an independent client) answers 48 jobs of a fixture model, greedy and seeded; each job's tokens
equal `sluice-generate --backend cuda` for the same prompt and seed (the GPU forward is batch-invariant on
this model, so a job batched with others gives the tokens it gives alone), and Redis shows every job done.
Exit 77 where there is no CUDA device or the build has no cuda backend."""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "consumer"))
import harness as h  # noqa: E402

MODEL = os.path.join(h.ROOT, "tests", "data", "tiny-v4-public")


def gpu_generate(ids, max_tokens, seed, temperature):
    args = [h.prog("sluice-generate"), "--model", MODEL, "--backend", "cuda", "--max-new-tokens", str(max_tokens),
            "--tokens", ",".join(map(str, ids)), "--seed", str(seed)]
    if temperature:
        args += ["--temperature", repr(temperature)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return h.json_lines(out)[-1]


def test(make):
    env = make("worker-cuda")
    w = env.start_worker("w-cuda", **{"engine.backend": "cuda", "model.path": MODEL})
    rnd = random.Random()
    jobs = []
    for i in range(48):
        ids = [rnd.randrange(256) for _ in range(rnd.randint(1, 40))]
        kw = dict(temperature=0.8, seed=rnd.getrandbits(63)) if i % 2 else {}
        rec = h.job_record("cuda-%d-%08x" % (i, rnd.getrandbits(32)), ids, rnd.randint(1, 16), **kw)
        jobs.append((rec, ids))
    env.wait_assigned(w, timeout=120)
    env.produce([(r["id"].encode(), h.encode_job(r, schema_id=7)) for r, _ in jobs])
    res = env.results([r["id"] for r, _ in jobs], timeout=180)
    missing = [r["id"] for r, _ in jobs if r["id"] not in res]
    assert not missing, "no result for %d jobs, e.g. %s" % (len(missing), missing[:3])
    for rec, ids in jobs:
        got = res[rec["id"]][0]
        assert got["status"] == "OK", got
        seed = rec["seed"] if rec["seed"] is not None else h.seed_from_id(rec["id"])
        ref = gpu_generate(ids, rec["max_tokens"], seed, rec["temperature"])
        assert ref["backend"] == "cuda", ref
        assert got["tokens"] == ref["tokens"], (rec["id"], got["tokens"], ref["tokens"])
        assert env.job_status(rec["id"]) == "done", rec["id"]
    h.log("48 jobs answered by the cuda backend, tokens equal sluice-generate --backend cuda, all done in Redis")


if __name__ == "__main__":
    probe = subprocess.run([h.prog("sluice-generate"), "--model", MODEL, "--backend", "cuda", "--tokens", "1",
                            "--max-new-tokens", "1"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("no cuda backend or no CUDA device (%s): skipped" % probe.stderr.strip()[:200])
        sys.exit(77)
    h.main(test)
