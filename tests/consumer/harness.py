"""Test harness for the sluice worker: real redis-server, the librdkafka mock cluster (sluice-mock-kafka),
sluice-worker processes, and an independent client (confluent_kafka + python3-avro, Debian's packages).

Every process a test starts is stopped by pid at the end. Ports are free loopback ports; group ids are fresh.
"""
import io
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

try:
    import avro.io
    import avro.schema
    from confluent_kafka import Consumer, Producer, TopicPartition
except ImportError:   # no Python Kafka/Avro clients (a GPU machine): Env still runs the services; jobs go in and
    avro = None       # results come out through sluice-submit (tests/gpu/test_worker_cuda.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "tests", "data", "tiny-v4-public")


def load_schema(name):
    if avro is None:
        return None
    with open(os.path.join(ROOT, "schemas", name)) as f:
        return avro.schema.parse(f.read())


JOB_SCHEMA = load_schema("job.avsc")
RESULT_SCHEMA = load_schema("result.avsc")
CHUNK_SCHEMA = load_schema("token_chunk.avsc")


def build_dir():
    for i, a in enumerate(sys.argv):
        if a == "--build" and i + 1 < len(sys.argv):
            return os.path.abspath(sys.argv[i + 1])
    return os.environ.get("SLUICE_BUILD", os.path.join(ROOT, "build"))


BUILD = build_dir()


def prog(name):
    for sub in ("consumer", "engine"):
        p = os.path.join(BUILD, sub, name)
        if os.path.exists(p):
            return p
    raise SystemExit("harness: %s not built in %s" % (name, BUILD))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def log(*a):
    print("[%.1f]" % (time.time() % 1000), *a, flush=True)


# ---------------------------------------------------------------- Avro

def avro_encode(schema, record):
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(record, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def avro_decode(schema, data):
    return avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(data)))


def job_record(id, prompt, max_tokens, **kw):
    """A full Job record: every field (the client fills the ones with defaults too)."""
    rec = {"id": id, "prompt": prompt, "max_tokens": max_tokens, "tenant": "", "temperature": 0.0, "top_p": 1.0,
           "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "seed": None, "stop": [], "stop_token_ids": [],
           "ignore_eos": False, "logprobs": False, "stream": False, "priority": 0, "deadline_ms": None,
           "reply_topic": None, "metadata": {}, "messages": [], "thinking": False}
    rec.update(kw)
    return rec


def confluent(schema_id, payload):
    return b"\x00" + struct.pack(">I", schema_id) + payload


def encode_job(rec, schema_id=1):
    body = avro_encode(JOB_SCHEMA, rec)
    return confluent(schema_id, body) if schema_id is not None else body


def decode_result(value):
    if value[:1] == b"\x00":
        value = value[5:]
    return avro_decode(RESULT_SCHEMA, value)


def seed_from_id(job_id):
    """The worker's seed for a job without one: FNV-1a 64 of the id, top bit cleared."""
    h = 0xcbf29ce484222325
    for b in job_id.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h & 0x7fffffffffffffff


# ---------------------------------------------------------------- Redis (minimal RESP client)

class Redis:
    def __init__(self, port, auth=()):
        self.port = port
        self.auth = tuple(auth)   # () or (password,) or (user, password): AUTH on connect
        self.sock = None

    def _conn(self):
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            self.f = self.sock.makefile("rb")
            if self.auth:
                self.cmd("AUTH", *self.auth)
        return self.sock

    def cmd(self, *args):
        s = self._conn()
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        return self._read()

    def _read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError("bad RESP reply %r" % line)

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None


# ---------------------------------------------------------------- processes

class Env:
    """redis-server + sluice-mock-kafka + workers, all stopped by pid in close()."""

    def __init__(self, name, partitions=4, topics=(), topic_errors=(), redis_args=(), redis_auth=(), mock_args=()):
        self.dir = tempfile.mkdtemp(prefix="sluice-%s-" % name)
        self.procs = []
        self.workers = {}
        self.redis_port = free_port()
        self.redis_args = list(redis_args)   # extra redis-server arguments (e.g. --requirepass PW)
        self.start_redis(new_port=True)
        args = [prog("sluice-mock-kafka"), "--partitions", str(partitions)]
        if topics:
            args += ["--topics", ",".join(topics)]
        for spec in topic_errors:   # "TOPIC=ERROR[:SECONDS]": the cluster refuses the topic (for a while)
            args += ["--topic-error", spec]
        args += list(mock_args)   # e.g. --control FIFO, --request-error API=ERR:COUNT (tests/faults)
        out = open(os.path.join(self.dir, "mock.out"), "w+")
        self.mock = subprocess.Popen(args, stdout=out, stderr=open(os.path.join(self.dir, "mock.err"), "w"))
        self.procs.append(self.mock)
        for _ in range(600):   # the mock can take seconds to start on a loaded machine
            out.seek(0)
            line = out.readline()
            if line.endswith("\n"):
                break
            time.sleep(0.05)
        self.brokers = line.strip().replace("bootstrap.servers=", "")
        assert self.brokers, "mock cluster printed no bootstrap servers"
        self.group = "g-%s-%d" % (name, random.randrange(1 << 30))
        self.redis = Redis(self.redis_port, redis_auth)
        log("env %s: redis %d, kafka %s, group %s, logs %s" % (name, self.redis_port, self.brokers, self.group,
                                                               self.dir))

    def start_redis(self, new_port=False):
        """redis-server on self.redis_port. The port free_port() found may be taken by another test's server before
        this one binds it; then this one exits at once while the port still answers, so the server is checked to be
        alive after it answers, and with new_port (the first start) another port is tried."""
        for _ in range(5):
            self.redis_proc = subprocess.Popen(
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                 "no"] + self.redis_args, stdout=open(os.path.join(self.dir, "redis.log"), "a"),
                stderr=subprocess.STDOUT)
            self.procs.append(self.redis_proc)
            answered = False
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", self.redis_port), timeout=1).close()
                    answered = True
                    break
                except OSError:
                    time.sleep(0.05)
            time.sleep(0.2)   # a server that could not bind the port has exited by now
            if self.redis_proc.poll() is None:
                if answered:
                    return
                break   # running but not answering: no other port would help
            if not new_port:
                break
            self.redis_port = free_port()
        raise RuntimeError("redis-server did not start on port %d (see %s)" % (self.redis_port,
                                                                               os.path.join(self.dir, "redis.log")))

    def stop_redis(self):
        self.redis.close()
        self.redis_proc.kill()
        self.redis_proc.wait()

    def start_worker(self, wid, _env=None, **settings):
        """A worker with these settings (--set key=value); _env: extra environment variables."""
        conf = {"kafka.bootstrap.servers": self.brokers, "kafka.group.id": self.group,
                "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500",
                "redis.url": "redis://127.0.0.1:%d" % self.redis_port, "model.path": MODEL, "worker.id": wid,
                "engine.threads": "1"}
        conf.update({k: str(v) for k, v in settings.items()})
        args = [prog("sluice-worker")]
        for k, v in conf.items():
            args += ["--set", "%s=%s" % (k, v)]
        errpath = os.path.join(self.dir, "worker-%s-%d.err" % (wid, len(self.procs)))
        p = subprocess.Popen(args, stdout=open(errpath + ".out", "w"), stderr=open(errpath, "w"),
                             env=dict(os.environ, **_env) if _env else None)
        p.errpath = errpath
        self.procs.append(p)
        self.workers[wid] = p
        return p

    def wait_assigned(self, p, timeout=20):
        t0 = time.time()
        while time.time() - t0 < timeout:
            with open(p.errpath) as f:
                if "assigned" in f.read():
                    return
            if p.poll() is not None:
                raise AssertionError("worker exited with %s:\n%s" % (p.returncode, open(p.errpath).read()))
            time.sleep(0.1)
        raise AssertionError("worker got no assignment in %d s" % timeout)

    def producer(self):
        return Producer({"bootstrap.servers": self.brokers, "linger.ms": 5})

    def produce(self, values, topic="sluice.jobs", partition=None, producer=None):
        """values: list of (key, value). Returns [(partition, offset)] in order. A warm `producer`
        (connected, topic metadata known) sends at once; a new one first spends up to ~1 s on that."""
        p = producer if producer is not None else self.producer()   # (a Producer with an empty queue is falsy)
        where = [None] * len(values)

        def cb(i):
            def f(err, msg):
                assert err is None, err
                where[i] = (msg.partition(), msg.offset())
            return f

        for i, (k, v) in enumerate(values):
            if partition is None:
                p.produce(topic, value=v, key=k, on_delivery=cb(i))
            else:
                p.produce(topic, value=v, key=k, partition=partition, on_delivery=cb(i))
            p.poll(0)
        p.flush(30)
        assert all(w is not None for w in where)
        return where

    def consumer(self, topic, group=None):
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": group or "reader-%d" % random.randrange(1 << 30),
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        md = c.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p, 0) for p in md.topics[topic].partitions]
        c.assign(parts)
        return c

    def read_all(self, topic, until=None, timeout=60, idle=1.0):
        """Read a topic from the start. until(msgs) -> True stops early (then drain `idle` more seconds)."""
        c = self.consumer(topic)
        msgs = []
        t0 = time.time()
        done_at = None
        while time.time() - t0 < timeout:
            m = c.poll(0.2)
            if m is not None and not m.error():
                msgs.append(m)
            if done_at is None and until is not None and until(msgs):
                done_at = time.time()
            if done_at is not None and time.time() - done_at > idle:
                break
        c.close()
        return msgs

    def results(self, ids, timeout=90, topic="sluice.results", idle=1.5, count=1):
        """{id: [decoded results...]} once every id has one (or timeout); checks key and header."""
        want = set(ids)
        seen = {}
        n = [0]

        def until(msgs):
            while n[0] < len(msgs):
                m = msgs[n[0]]
                n[0] += 1
                r = decode_result(m.value())
                assert m.key().decode() == r["id"], "result key must be the job id"
                hdr = dict(m.headers() or [])
                assert hdr.get("sluice.type") == b"result", hdr
                r["_framed"] = m.value()[:1] == b"\x00"   # Confluent framing (bare Results start with the id length)
                if "sluice.error" in hdr:   # set when the job's reply_topic failed and the result came here
                    r["_error"] = hdr["sluice.error"].decode()
                seen.setdefault(r["id"], []).append(r)
            return all(len(seen.get(i, ())) >= count for i in want)

        self.read_all(topic, until, timeout, idle)
        return seen

    def wait_committed(self, partition, offset, topic="sluice.jobs", timeout=20):
        """Until the group's committed offset of topic[partition] is `offset` (auto-commit: every 5 s)."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": self.group})
        t0 = time.time()
        try:
            while True:
                got = c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
                if got == offset:
                    return
                assert time.time() - t0 < timeout, "committed offset %d, want %d" % (got, offset)
                time.sleep(0.5)
        finally:
            c.close()

    def job_status(self, job_id):
        v = self.redis.cmd("HGET", "sluice:job:" + job_id, "status")
        return v.decode() if v else None

    def close(self):
        """Workers first (they commit on the way out), then the mock cluster and redis-server."""
        self.redis.close()
        workers = [p for p in self.procs if hasattr(p, "errpath")]
        others = [p for p in self.procs if not hasattr(p, "errpath")]
        for group in (workers, others):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            for p in group:
                t0 = time.time()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    log("%s did not stop in 30 s: kill" % getattr(p, "errpath", p.args[0]))
                    p.kill()
                    p.wait()
                if time.time() - t0 > 2:
                    log("%s took %.1f s to stop" % (getattr(p, "errpath", p.args[0]), time.time() - t0))


def json_lines(text):
    """The JSON objects of a CLI's line-per-object output. Split on "\n" only: str.splitlines() also splits at
    U+0085 / U+2028, which generated text holds unescaped (jansson escapes only control characters)."""
    return [json.loads(l) for l in text.split("\n") if l.strip()]


def generate(prompt, max_tokens, seed=None, temperature=0.0, top_k=0, top_p=1.0, ignore_eos=False, model=None,
             logprobs=False):
    """sluice-generate's output (the engine alone) for the same prompt and sampling: prompt token ids, or a
    text (through the model's tokenizer); model: a model directory (default MODEL)."""
    args = [prog("sluice-generate"), "--model", model or MODEL, "--max-new-tokens", str(max_tokens), "--threads", "1"]
    args += ["--prompt", prompt] if isinstance(prompt, str) else ["--tokens", ",".join(map(str, prompt))]
    if seed is not None:
        args += ["--seed", str(seed)]
    if temperature:
        args += ["--temperature", repr(temperature)]
    if top_k:
        args += ["--top-k", str(top_k)]
    if top_p != 1.0:
        args += ["--top-p", repr(top_p)]
    if ignore_eos:
        args.append("--ignore-eos")
    if logprobs:
        args.append("--logprobs")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json_lines(out)[-1]


def main(test):
    """Run test(env_factory); exit 0/1 with a clear line."""
    envs = []

    def make(name, **kw):
        e = Env(name, **kw)
        envs.append(e)
        return e

    try:
        test(make)
    except Exception:
        import traceback
        traceback.print_exc()
        for e in envs:
            for p in e.procs:
                if hasattr(p, "errpath"):
                    print("---- %s (tail)" % p.errpath)
                    print("".join(open(p.errpath).readlines()[-15:]))
        print("FAIL")
        return 1
    finally:
        for e in envs:
            e.close()
    log("PASS")
    return 0


# ---------------------------------------------------------------- helpers for the failure tests

import threading


class ResultWatcher(threading.Thread):
    """Reads the result topic from the start in the background: self.results {id: [(t, result)]}."""

    def __init__(self, env, topic="sluice.results"):
        super().__init__(daemon=True)
        self.env, self.topic = env, topic
        self.results = {}
        self.n = 0
        self.lock = threading.Lock()
        self.stop = False
        self.start()

    def run(self):
        c = self.env.consumer(self.topic)
        while not self.stop:
            m = c.poll(0.1)
            if m is None or m.error():
                continue
            r = decode_result(m.value())
            with self.lock:
                self.results.setdefault(r["id"], []).append((time.time(), r))
                self.n += 1
        c.close()

    def distinct(self):
        with self.lock:
            return len(self.results)

    def wait(self, cond, timeout, what):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError("timeout after %d s waiting for %s (have %d distinct results)" % (timeout, what,
                                                                                             self.distinct()))

    def close(self):
        self.stop = True
        self.join(5)


def slow_jobs(n, tag, max_tokens=128):
    """Jobs that keep a worker with engine.max_batch small busy for a few seconds (ignore_eos)."""
    rnd = random.Random()
    jobs = []
    for i in range(n):
        text = "".join(rnd.choice("abcdefghij ") for _ in range(rnd.randint(2, 12)))
        kw = {"ignore_eos": True}
        if i % 2:
            kw.update(temperature=0.8, seed=rnd.getrandbits(62))
        jobs.append(job_record("%s-%d-%06x" % (tag, i, rnd.getrandbits(24)), text, max_tokens, **kw))
    return jobs


def same_result(a, b):
    keys = ("id", "status", "finish_reason", "tokens", "text", "error")
    return all(a[k] == b[k] for k in keys) and a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]


def check_complete(watcher, jobs):
    """Every job has a result; distinct ids == submitted; duplicates carry identical results."""
    ids = {j["id"] for j in jobs}
    with watcher.lock:
        got = dict(watcher.results)
    assert set(got) >= ids, "missing results for %d jobs" % len(ids - set(got))
    assert len(set(got) & ids) == len(ids)
    assert set(got) == ids, "results for unknown ids: %s" % list(set(got) - ids)[:3]
    dups = 0
    for jid, rs in got.items():
        for _, r in rs[1:]:
            dups += 1
            assert same_result(rs[0][1], r), (rs[0][1], r)
        assert rs[0][1]["status"] == "OK", rs[0][1]
    return dups


def finish_with_worker(env, name, settings, watch, jobs):
    """Start worker `name`, wait until every job has a result, then check_complete and that Redis
    shows each job done. Returns the number of duplicate results (all identical)."""
    w = env.start_worker(name, **settings)
    env.wait_assigned(w)
    watch.wait(lambda: watch.distinct() >= len(jobs), 120, "all results after the restart")
    time.sleep(2)   # let late duplicates arrive
    dups = check_complete(watch, jobs)
    watch.close()
    for j in jobs:
        assert env.job_status(j["id"]) == "done", j["id"]
    return dups


def assignment(p):
    """Partitions a worker holds now, from its log."""
    held = set()
    for line in open(p.errpath):
        if " assigned sluice.jobs[" in line:
            held.add(int(line.rsplit("[", 1)[1].split("]")[0]))
        elif " revoked sluice.jobs[" in line or " lost sluice.jobs[" in line:
            held.discard(int(line.rsplit("[", 1)[1].split("]")[0]))
    return held
