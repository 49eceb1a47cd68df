"""The worker on the GPU: sluice-worker with engine.backend=cuda (real redis-server, the librdkafka mock
cluster) answers 48 jobs of a fixture model sent by sluice-submit, greedy and seeded; each job's tokens equal
`sluice-generate --backend cuda` for the same prompt and seed (the GPU forward is batch-invariant on this model,
so a job batched with others gives the tokens it gives alone), and Redis shows every job done. Jobs go in and
results come out through sluice-submit, so the test needs no Python Kafka or Avro client (GPU machines lack
them). Exit 77 where there is no CUDA device or the build has no cuda backend."""
import json
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
        job = {"id": "cuda-%d-%08x" % (i, rnd.getrandbits(32)),
               "prompt": [rnd.randrange(256) for _ in range(rnd.randint(1, 40))], "max_tokens": rnd.randint(1, 16)}
        if i % 2:
            job.update(temperature=0.8, seed=rnd.getrandbits(63))
        jobs.append(job)
    path = os.path.join(env.dir, "jobs.jsonl")
    with open(path, "w") as f:
        for j in jobs:
            f.write(json.dumps(j) + "\n")
    env.wait_assigned(w, timeout=120)
    out = subprocess.run([h.prog("sluice-submit"), "--brokers", env.brokers, "--jsonl", path, "--timeout", "180"],
                         capture_output=True, text=True)
    res = {r["id"]: r for r in h.json_lines(out.stdout)}
    missing = [j["id"] for j in jobs if j["id"] not in res]
    assert not missing, "no result for %d jobs, e.g. %s (sluice-submit: %s)" % (len(missing), missing[:3],
                                                                                 out.stderr[-500:])
    for j in jobs:
        got = res[j["id"]]
        assert got["status"] == "OK", got
        seed = j.get("seed", h.seed_from_id(j["id"]))
        ref = gpu_generate(j["prompt"], j["max_tokens"], seed, j.get("temperature", 0))
        assert ref["backend"] == "cuda", ref
        assert got["tokens"] == ref["tokens"], (j["id"], got["tokens"], ref["tokens"])
        assert env.job_status(j["id"]) == "done", j["id"]
    h.log("48 jobs answered by the cuda backend, tokens equal sluice-generate --backend cuda, all done in Redis")


if __name__ == "__main__":
    probe = subprocess.run([h.prog("sluice-generate"), "--model", MODEL, "--backend", "cuda", "--tokens", "1",
                            "--max-new-tokens", "1"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("no cuda backend or no CUDA device (%s): skipped" % probe.stderr.strip()[:200])
        sys.exit(77)
    sys.exit(h.main(test))
