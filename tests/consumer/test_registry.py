"""Schema Registry (schema.registry.url): the worker fetches the writer schema of a Confluent-framed job by its
id and decodes it with Avro schema resolution into its Job schema. No registry server is packaged with sluice:
tests/consumer/registry_server.py is a small stand-in implementing the endpoints as Confluent documents them.

  (a) Jobs written with schemas/v1/job.avsc (id 11) and with an evolved schema (tests/consumer/schemas/job_v3.avsc,
      id 12: fields in another order, a field the worker does not know, seed as a plain long) are answered with
      the tokens sluice-generate gives for the same prompt and sampling; each id is fetched once (cached).
  (b) an id the registry does not know goes to the DLQ (class schema) naming the id; the partition flows on.
  (c) a writer schema that does not resolve (prompt as int, id 13) goes to the DLQ naming the field.
  (e) sluice-submit --registry registers schemas/job.avsc under sluice.jobs-value and its jobs are answered.
  (d) registry down (a port that accepts and never answers, then a closed port): jobs with ids not cached go
      to the DLQ with "schema registry unreachable: ..." within the bounded attempts, the next ones at once,
      cached ids keep working, nothing stalls.
Also: an https:// registry URL is refused at start with one line."""
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

import avro.schema

import harness as h

SCHEMAS = os.path.join(h.HERE, "schemas")


class RegistryServer:
    """registry_server.py on a free loopback port, stopped by pid with the env's other processes."""

    def __init__(self, env, first_id):
        self.log = os.path.join(env.dir, "registry.out")
        out = open(self.log, "w+")
        self.proc = subprocess.Popen(["/usr/bin/python3", os.path.join(h.HERE, "registry_server.py"), "--first-id",
                                      str(first_id)], stdout=out, stderr=open(self.log + ".err", "w"))
        env.procs.append(self.proc)
        for _ in range(200):
            out.seek(0)
            line = out.readline()
            if line.endswith("\n"):
                break
            time.sleep(0.05)
        self.port = int(line.strip().split("=")[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def register(self, subject, text):
        req = urllib.request.Request("%s/subjects/%s/versions" % (self.url, subject),
                                     data=json.dumps({"schema": text}).encode(), method="POST",
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())["id"]

    def requests(self, line):
        with open(self.log) as f:
            return sum(1 for l in f if l.strip() == line)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def read(path):
    with open(path) as f:
        return f.read()


def dlq_by_key(env, keys, timeout=30):
    msgs = env.read_all("sluice.jobs.dlq", until=lambda ms: {m.key() for m in ms} >= set(keys), timeout=timeout,
                        idle=0.2)
    return {m.key(): dict(m.headers()) for m in msgs}


def test(make):
    p = subprocess.run([h.prog("sluice-worker"), "--set", "kafka.bootstrap.servers=x:1", "--set", "model.path=/x",
                        "--set", "schema.registry.url=https://registry:8081"], capture_output=True, text=True)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 1 and len(lines) == 1 and "https is not supported" in lines[0], p.stderr

    env = make("registry")
    reg = RegistryServer(env, 11)
    v1_text, v3_text = read(os.path.join(h.ROOT, "schemas", "v1", "job.avsc")), read(os.path.join(SCHEMAS, "job_v3.avsc"))
    ids = [reg.register("sluice.jobs-value", t)
           for t in (v1_text, v3_text, read(os.path.join(SCHEMAS, "job_prompt_int.avsc")))]
    assert ids == [11, 12, 13], ids
    assert reg.register("other-value", v1_text) == 11, "the same schema has one id"
    v1, v3 = avro.schema.parse(v1_text), avro.schema.parse(v3_text)
    prompt_int = avro.schema.parse(read(os.path.join(SCHEMAS, "job_prompt_int.avsc")))
    w = env.start_worker("w-reg", **{"schema.registry.url": reg.url, "schema.registry.timeout_ms": 300})
    env.wait_assigned(w)
    uid = "%06x" % random.getrandbits(24)

    def v1_job(jid, prompt, max_tokens, schema_id=11):
        """A Job written with schemas/v1/job.avsc, framed with schema_id."""
        rec = h.job_record(jid, prompt, max_tokens)
        del rec["messages"], rec["thinking"]
        return h.confluent(schema_id, h.avro_encode(v1, rec))

    # ---- (a), (b), (c) on one partition, in this order
    j3 = {"max_tokens": 6, "prompt": [5, 9, 2], "id": "v3-" + uid, "priority_class": "interactive", "seed": 99,
          "temperature": 0.7, "stop": [], "metadata": {"via": "v3"}, "messages": [], "top_k": 0}
    bad_int = {"id": "int-" + uid, "prompt": 7, "max_tokens": 2}
    msgs = [(b"v1a", v1_job("v1a-" + uid, "hello registry", 5)),
            (b"unknown", v1_job("u-" + uid, "x", 2, schema_id=77)),
            (b"incompatible", h.confluent(13, h.avro_encode(prompt_int, bad_int))),
            (b"v3", h.confluent(12, h.avro_encode(v3, j3))),
            (b"v1b", v1_job("v1b-" + uid, [1, 105, 116], 4))]
    env.produce(msgs, partition=0)
    res = env.results(["v1a-" + uid, "v3-" + uid, "v1b-" + uid], timeout=60, idle=0.2)
    r = res["v1a-" + uid][0]
    assert r["status"] == "OK" and r["tokens"] == h.generate("hello registry", 5)["tokens"], r
    r = res["v3-" + uid][0]
    assert r["status"] == "OK" and r["metadata"] == {"via": "v3"}, r
    assert r["tokens"] == h.generate([5, 9, 2], 6, seed=99, temperature=0.7)["tokens"], r
    r = res["v1b-" + uid][0]
    assert r["status"] == "OK" and r["tokens"] == h.generate([1, 105, 116], 4)["tokens"], r
    dlq = dlq_by_key(env, [b"unknown", b"incompatible"])
    e = dlq[b"unknown"]
    assert e["sluice.error.class"] == b"schema" and b"schema id 77 not found in the schema registry" in e["sluice.error"], e
    assert b"40403" in e["sluice.error"], e
    e = dlq[b"incompatible"]
    assert e["sluice.error.class"] == b"schema" and b"schema id 13 does not resolve" in e["sluice.error"], e
    assert b"field 'prompt'" in e["sluice.error"], e
    assert reg.requests("GET /schemas/ids/11 200") == 1, "id 11 must be fetched once (cached)"
    h.log("evolution, unknown id, incompatible schema OK")

    # ---- (e) sluice-submit --registry
    p = subprocess.run([h.prog("sluice-submit"), "--brokers", env.brokers, "--registry", reg.url, "--max-tokens", "3",
                        "--timeout", "30", "via sluice-submit"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "registered under sluice.jobs-value as id 14" in p.stderr, p.stderr
    out = h.json_lines(p.stdout)
    assert len(out) == 1 and out[0]["status"] == "OK", out
    assert out[0]["tokens"] == h.generate("via sluice-submit", 3)["tokens"], out
    assert reg.requests("POST /subjects/sluice.jobs-value/versions 200") == 4
    assert reg.requests("GET /schemas/ids/14 200") == 1
    h.log("sluice-submit --registry OK")

    # ---- (d) registry down: first a port that takes connections and never answers, then a closed one
    reg.stop()
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind(("127.0.0.1", reg.port))
    silent.listen(64)
    t0 = time.time()
    env.produce([(b"down15", v1_job("d15-" + uid, "x", 2, schema_id=15)), (b"down16", v1_job("d16-" + uid, "x", 2, schema_id=16)),
                 (b"cached", v1_job("cached-" + uid, "still here", 3))], partition=0)
    res = env.results(["cached-" + uid], timeout=30, idle=0.2)
    took = time.time() - t0
    assert res["cached-" + uid][0]["status"] == "OK"
    assert took < 10, "a silent registry held the partition %.1f s" % took
    dlq = dlq_by_key(env, [b"down15", b"down16"])
    e15, e16 = dlq[b"down15"]["sluice.error"], dlq[b"down16"]["sluice.error"]
    assert e15.startswith(b"schema registry unreachable: ") and b"no answer in time" in e15, e15
    assert b"schema id 15, 3 attempts" in e15, e15
    assert e16.startswith(b"schema registry unreachable: ") and b"asked again in" in e16, e16
    silent.close()
    time.sleep(5.5)   # REGISTRY_RECHECK_MS: the registry is asked again, now a closed port
    env.produce([(b"down17", v1_job("d17-" + uid, "x", 2, schema_id=17)), (b"cached2", v1_job("cached2-" + uid, "again", 2))],
                partition=0)
    res = env.results(["cached2-" + uid], timeout=30, idle=0.2)
    assert res["cached2-" + uid][0]["status"] == "OK"
    e17 = dlq_by_key(env, [b"down17"])[b"down17"]["sluice.error"]
    assert b"schema registry unreachable: connect to 127.0.0.1:%d: Connection refused" % reg.port in e17, e17
    assert w.poll() is None, "the worker must keep running"
    h.log("registry down: DLQ with the reason, no stall (%.1f s for the silent registry)" % took)


if __name__ == "__main__":
    sys.exit(h.main(test))
