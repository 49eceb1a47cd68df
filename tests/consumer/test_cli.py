"""Program contracts (sluice-worker, sluice-submit, sluice-mock-kafka, sluice-batch): --help exits 0; bad usage / bad config / unreachable Redis / a model that fails
to load give ONE line on stderr and a non-zero exit; sluice-mock-kafka's first stdout line is the
bootstrap servers; sluice-submit exits 1 when a job fails (DLQ'd: no result) and 0 when all succeed;
sluice-submit --jsonl and bare framing work against a worker with input.framing=bare."""
import json
import os
import subprocess
import sys
import tempfile

import harness as h


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def one_line_error(p, code, must):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == code, (p.returncode, p.stderr)
    assert len(lines) == 1, "want one error line, got:\n" + p.stderr
    assert must in lines[0], lines[0]


def test(make):
    for name in ("sluice-worker", "sluice-submit", "sluice-mock-kafka", "sluice-batch"):
        p = run([h.prog(name), "--help"])
        assert p.returncode == 0 and "usage" in p.stdout, (name, p.stdout, p.stderr)
    worker = h.prog("sluice-worker")
    one_line_error(run([worker, "--bogus"]), 2, "unknown argument")
    one_line_error(run([worker, "--set", "nope.key=1"]), 1, "unknown key 'nope.key'")
    one_line_error(run([worker, "--set", "model.path=/x"]), 1, "kafka.bootstrap.servers is required")
    one_line_error(run([worker, "--set", "kafka.bootstrap.servers=x:1", "--set", "model.path=/x",
                        "--set", "worker.max_inflight=0"]), 1, "worker.max_inflight")
    one_line_error(run([worker, "--set", "kafka.bootstrap.servers=x:1", "--set", "model.path=/x",
                        "--set", "engine.gpu_memory_fraction=2"]), 1, "engine.gpu_memory_fraction")
    one_line_error(run([worker, "--set", "kafka.bootstrap.servers=x:1", "--set", "model.path=/x",
                        "--set", "engine.deterministic=maybe"]), 1, "engine.deterministic")
    one_line_error(run([worker, "--set", "kafka.bootstrap.servers=x:1", "--set", "model.path=/x",
                        "--set", "engine.devices=0,1,0"]), 1, "engine.devices")
    one_line_error(run([worker, "--config", "/nonexistent.conf"]), 1, "cannot open")
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("kafka.bootstrap.servers=127.0.0.1:1\nmodel.path=%s\nthis line is bad\n" % h.MODEL)
    one_line_error(run([worker, "--config", f.name]), 1, ":3:")
    os.unlink(f.name)
    base = ["--set", "kafka.bootstrap.servers=127.0.0.1:1", "--set", "redis.url=redis://127.0.0.1:%d" % h.free_port()]
    one_line_error(run([worker] + base + ["--set", "model.path=/nonexistent/model"]), 1, "model /nonexistent/model")
    one_line_error(run([worker] + base + ["--set", "model.path=" + h.MODEL]), 1, "redis 127.0.0.1:")
    one_line_error(run([h.prog("sluice-mock-kafka"), "--partitions", "zero"]), 2, "--partitions")
    one_line_error(run([h.prog("sluice-submit"), "--brokers", "x:1", "--rate", "5"]), 2, "--count")
    batch = h.prog("sluice-batch")
    one_line_error(run([batch, "frobnicate", "--brokers", "x:1", "f.jsonl"]), 2, "command")
    one_line_error(run([batch, "submit", "--brokers", "x:1"]), 2, "FILE")
    one_line_error(run([batch, "status", "--brokers", "x:1", "bad/id"]), 2, "batch id")
    one_line_error(run([batch, "status", "--brokers", "x:1", "--redis", "redis://127.0.0.1:%d" % h.free_port(),
                        "batch_x"]), 1, "redis 127.0.0.1:")

    env = make("cli")
    line = open(os.path.join(env.dir, "mock.out")).readline().strip()
    assert line.replace("bootstrap.servers=", "").startswith("127.0.0.1:"), line
    w = env.start_worker("w-cli", **{"input.framing": "bare"})
    env.wait_assigned(w)
    submit = h.prog("sluice-submit")
    jl = os.path.join(env.dir, "jobs.jsonl")
    with open(jl, "w") as f:
        f.write(json.dumps({"id": "cli-a", "prompt": "hello", "max_tokens": 3}) + "\n")
        f.write(json.dumps({"id": "cli-b", "prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0.5, "seed": 9}) + "\n")
    p = run([submit, "--brokers", env.brokers, "--framing", "bare", "--jsonl", jl, "--timeout", "30"])
    assert p.returncode == 0, p.stderr
    out = h.json_lines(p.stdout)
    bare = env.results(["cli-a", "cli-b"], timeout=20, idle=0.2)
    assert not any(rs[0]["_framed"] for rs in bare.values()), "bare jobs must get bare results"
    assert sorted(o["id"] for o in out) == ["cli-a", "cli-b"] and all(o["status"] == "OK" for o in out), out
    assert [len(o["tokens"]) for o in sorted(out, key=lambda o: o["id"])] == [3, 2] or any(
        o["finish_reason"] == "STOP" for o in out), out
    # a job the worker rejects (max_tokens out of range) never gets a result: exit 1 after the timeout
    p = run([submit, "--brokers", env.brokers, "--framing", "bare", "--max-tokens", "99999", "--timeout", "3", "x"])
    assert p.returncode == 1 and "no result" in p.stderr, (p.returncode, p.stderr)
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= 1, timeout=20, idle=0.2)
    assert len(dlq) == 1 and b"max_tokens" in dict(dlq[0].headers())["sluice.error"]
    h.log("CLI contracts OK")


if __name__ == "__main__":
    sys.exit(h.main(test))
