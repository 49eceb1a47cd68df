"""The fault suite: 3 workers in one group serve >= 1,000 jobs while faults come one after another, each
in its own phase of fresh jobs:

  baseline             no fault (the reference for the times)
  kill9-1 .. kill9-10  kill -9 of one worker (rolling over the three), restarted 1 s later under the
                       same worker.id (odd kills) or a new one (even kills)
  brokers-down         every broker of the mock cluster refuses connections for 15 s
  redis-down           redis-server (AOF, appendfsync always) killed, restarted on its AOF 15 s later
  redis-frozen         redis-server stopped with SIGSTOP for 15 s, then SIGCONT
  err-<Request>        transient broker errors injected on Produce, Fetch, OffsetCommit, JoinGroup,
                       SyncGroup, Heartbeat, InitProducerId (the mock cluster answers the next requests
                       of that type with the error; group and producer-id requests are provoked by a
                       fourth worker joining, which leaves again once the phase has settled) and on
                       Metadata (the jobs and results topics answer LEADER_NOT_AVAILABLE for 5 s while
                       a fourth worker joins: the mock's Metadata handler takes no request errors)

A phase's fault starts as soon as a worker has >= 2 of its jobs in flight (a kill hits the next
worker in turn that has). Every phase ends settled: all its results out, the group's committed offsets at the high watermark, no
job in flight. The audit at the end: every job has >= 1 result and all copies are identical (tokens,
text, status), exactly one `done` transition per job in Redis (counted in the AOF, which records every
write), every job `done`, committed offsets at the high watermark, nothing in the DLQ, and compute:
sluice_tokens_generated_total summed over every worker process (scraped until its end; a killed worker
is stopped with SIGSTOP right after its last scrape) minus the jobs' tokens must be 0 in phases without
a kill, and in a kill phase at most the tokens of the jobs the killed worker had claimed and not
finished (Redis, read while it is stopped). The recovery times are printed per phase, and with
--report FILE written as JSON (the README's table comes from it).

    /usr/bin/python3 tests/faults/fault_suite.py --build build [--phase-jobs 50] [--report FILE] [--only a,b]
"""
import glob
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "consumer"))
import harness as h  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402


def arg(name, default):
    for i, a in enumerate(sys.argv):
        if a == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


PHASE_JOBS = int(arg("--phase-jobs", "50"))
REPORT = arg("--report", None)
ONLY = arg("--only", None)   # comma list of phase names (prefixes) to run, e.g. baseline,brokers-down
TOKENS = 256            # every job: ignore_eos, max_tokens = TOKENS, so its compute is exactly TOKENS tokens
PARTITIONS = 6
OUTAGE_S = 15
SETTINGS = {"engine.max_batch": 4, "worker.max_inflight": 8, "redis.timeout_ms": 200, "worker.heartbeat_ms": 1000,
            "kafka.auto.commit.interval.ms": 1000}
REQUEST_ERRORS = [   # (request type, a transient error a broker answers it with, how many, provoke with a restart)
    ("Produce", "NOT_ENOUGH_REPLICAS", 10, False),
    ("Fetch", "NOT_LEADER_FOR_PARTITION", 10, False),
    ("OffsetCommit", "NOT_COORDINATOR", 5, False),
    ("JoinGroup", "COORDINATOR_LOAD_IN_PROGRESS", 3, True),
    ("SyncGroup", "REBALANCE_IN_PROGRESS", 3, True),
    ("Heartbeat", "REBALANCE_IN_PROGRESS", 3, False),
    ("InitProducerId", "COORDINATOR_NOT_AVAILABLE", 2, True),
]
log = h.log


# ---------------------------------------------------------------- the mock cluster's control channel

class Control:
    def __init__(self, fifo, out_path):
        self.fifo, self.out_path = fifo, out_path

    def __call__(self, line):
        """Send one command; return its answer line (the mock answers each command with one line)."""
        n = len(self._lines())
        with open(self.fifo, "w") as f:
            f.write(line + "\n")
        t0 = time.time()
        while time.time() - t0 < 10:
            lines = self._lines()
            if len(lines) > n:
                ans = lines[n]
                assert ans.startswith("ok"), "mock control '%s': %s" % (line, ans)
                return ans
            time.sleep(0.02)
        raise AssertionError("mock control '%s': no answer" % line)

    def _lines(self):
        with open(self.out_path) as f:
            return [l for l in f.read().split("\n")[1:] if l]   # line 1 = bootstrap servers

    def pending(self, api):
        return int(self("pending %s" % api).split()[-1])


# ---------------------------------------------------------------- workers and their token counters

class Fleet:
    """The three live workers, their metrics ports, and every process's last sluice_tokens_generated_total."""

    def __init__(self, env):
        self.env = env
        self.live = {}        # worker id -> Popen
        self.port = {}        # Popen -> metrics port
        self.tokens = {}      # Popen -> last scraped tokens
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def start(self, wid):
        port = h.free_port()
        p = self.env.start_worker(wid, **dict(SETTINGS, **{"metrics.port": port}))
        with self.lock:
            self.live[wid] = p
            self.port[p] = port
            self.tokens[p] = 0
        return p

    def metrics(self, p):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port[p], timeout=2) as r:
            text = r.read().decode()
        out = {}
        for line in text.split("\n"):
            if line.startswith("sluice_"):
                k, v = line.split()
                out[k] = float(v)
        return out

    def scrape(self, p):
        try:
            m = self.metrics(p)
        except OSError:
            return None
        with self.lock:
            self.tokens[p] = max(self.tokens[p], int(m["sluice_tokens_generated_total"]))
        return m

    def _poll(self):
        while not self.stop:
            with self.lock:
                procs = list(self.live.values())
            for p in procs:
                if p.poll() is None:
                    self.scrape(p)
            time.sleep(0.2)

    def total_tokens(self):
        for p in list(self.live.values()):
            self.scrape(p)
        with self.lock:
            return sum(self.tokens.values())

    def idle(self):
        """Every live worker: nothing in flight, no offset pending."""
        for p in self.live.values():
            m = self.scrape(p)
            if m is None or m["sluice_jobs_inflight"] or m["sluice_offsets_pending"]:
                return False
        return True

    def stopped_for_good(self, wid):
        """SIGSTOP right after a last scrape: the process computes nothing more, its count is final."""
        p = self.live.pop(wid)
        self.scrape(p)
        p.send_signal(signal.SIGSTOP)
        return p

    def close(self):
        self.stop = True
        self.thread.join(5)


# ---------------------------------------------------------------- Kafka and Redis views

def offsets_at_high_watermark(env):
    """[(partition, committed, high watermark)] of the jobs topic for every partition that lags."""
    c = Consumer({"bootstrap.servers": env.brokers, "group.id": env.group, "enable.auto.commit": False})
    try:
        parts = [TopicPartition("sluice.jobs", i) for i in range(PARTITIONS)]
        committed = c.committed(parts, timeout=10)
        lag = []
        for tp in committed:
            lo, hi = c.get_watermark_offsets(TopicPartition("sluice.jobs", tp.partition), timeout=10)
            got = tp.offset if tp.offset >= 0 else lo   # nothing committed yet: the start
            if got != hi:
                lag.append((tp.partition, tp.offset, hi))
        return lag
    finally:
        c.close()


def claimed_by(env, ids, wid):
    """Jobs among ids that Redis shows running under worker wid."""
    out = []
    for jid in ids:
        st, w = env.redis.cmd("HMGET", "sluice:job:" + jid, "status", "worker")
        if st == b"running" and w == wid.encode():
            out.append(jid)
    return out


def aof_transitions(aof_dir):
    """{job id: {status: n}}: the job-state writes (HSET sluice:job:<id> status S ...) in Redis's AOF."""
    trans = {}
    files = sorted(glob.glob(os.path.join(aof_dir, "appendonlydir", "*.incr.aof")),
                   key=lambda f: int(f.rsplit(".", 3)[-3]))
    for path in files:
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            assert data[i:i + 1] == b"*", "AOF %s: unexpected byte at %d" % (path, i)
            j = data.index(b"\r\n", i)
            n = int(data[i + 1:j])
            i = j + 2
            args = []
            for _ in range(n):
                j = data.index(b"\r\n", i)
                ln = int(data[i + 1:j])
                args.append(data[j + 2:j + 2 + ln])
                i = j + 2 + ln + 2
            if args[0].upper() == b"HSET" and args[1].startswith(b"sluice:job:") and args[2] == b"status":
                d = trans.setdefault(args[1][len("sluice:job:"):].decode(), {})
                d[args[3].decode()] = d.get(args[3].decode(), 0) + 1
    return trans


# ---------------------------------------------------------------- the run

def make_jobs(tag):
    jobs = h.slow_jobs(PHASE_JOBS, tag, max_tokens=TOKENS)
    return jobs


class Suite:
    def __init__(self, make):
        self.aof_dir = tempfile.mkdtemp(prefix="sluice-faults-aof-")
        self.fifo = os.path.join(self.aof_dir, "mock.ctl")
        env = make("faults", partitions=PARTITIONS, mock_args=["--control", self.fifo],
                   redis_args=["--appendonly", "yes", "--appendfsync", "always", "--dir", self.aof_dir,
                               "--auto-aof-rewrite-percentage", "0"])
        self.env = env
        assert env.redis.cmd("CONFIG", "GET", "appendonly")[1] == b"yes"
        self.ctl = Control(self.fifo, os.path.join(env.dir, "mock.out"))
        self.fleet = Fleet(env)
        self.watch = h.ResultWatcher(env)
        self.producer = env.producer()
        self.jobs = []
        self.rows = []
        self.restarts = 0

    def wait(self, cond, timeout, what):
        t0 = time.time()
        while not cond():
            assert time.time() - t0 < timeout, "timeout after %d s waiting for %s" % (timeout, what)
            time.sleep(0.05)
        return time.time()

    def have(self, ids):
        with self.watch.lock:
            return sum(1 for i in ids if i in self.watch.results)

    def busy(self, order=None):
        """The workers (in `order`) with >= 2 jobs in flight now."""
        order = order or sorted(self.fleet.live)
        return [w for w in order
                if (self.fleet.scrape(self.fleet.live[w]) or {}).get("sluice_jobs_inflight", 0) >= 2]

    def done(self, ids):
        """How many of ids Redis shows done (the workers' progress, not the reader's)."""
        return sum(1 for i in ids if self.env.job_status(i) == "done")

    def restart(self, wid, new_id):
        self.restarts += 1
        nid = "%s-r%d" % (wid.split("-r")[0], self.restarts) if new_id else wid
        return nid, self.fleet.start(nid)

    def join_extra(self):
        """A fourth worker joins the group: every member sends JoinGroup and SyncGroup, the newcomer's
        producer InitProducerId and Metadata. It leaves (SIGTERM, idle) once the phase has settled."""
        self.restarts += 1
        wid = "w4-r%d" % self.restarts
        self.fleet.start(wid)
        return wid

    def retire(self, wid):
        p = self.fleet.live.pop(wid)
        self.fleet.scrape(p)   # idle: its count is final
        p.terminate()
        p.wait(60)
        assert p.returncode == 0, "worker %s exited %s on SIGTERM" % (wid, p.returncode)

    # one phase: fresh jobs, the fault once a quarter of them have results, then settle
    def phase(self, name, fault):
        if ONLY and not any(name.startswith(o) for o in ONLY.split(",")):
            return
        jobs = make_jobs(name.replace("-", ""))
        ids = {j["id"] for j in jobs}
        self.jobs += jobs
        tok0 = self.fleet.total_tokens()
        t0 = time.time()
        self.env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs], producer=self.producer)
        self.wait(lambda: self.busy(), 120, "%s: a worker with jobs in flight" % name)
        at_start = self.done(ids)
        info = fault(ids) or {}
        t_end = info.get("t_end", time.time())
        t_all = self.wait(lambda: self.have(ids) == len(ids), 240, "%s: every result" % name)
        self.wait(lambda: self.fleet.idle(), 120, "%s: workers idle" % name)
        self.wait(lambda: not offsets_at_high_watermark(self.env), 60, "%s: committed offsets at the high watermark"
                  % name)
        t_hw = time.time()
        lost = [i for i in ids if self.env.job_status(i) != "done"]
        assert not lost, "%s: %d jobs not done in Redis, e.g. %s" % (name, len(lost), lost[:3])
        extra = self.fleet.total_tokens() - tok0 - len(ids) * TOKENS
        allowed = info.get("allowed_tokens", 0)
        # when each job was finished: result delivered and marked done (Redis's clock, this host's)
        fin = sorted(int(self.env.redis.cmd("HGET", "sluice:job:" + i, "finished")) / 1000.0 for i in ids)
        after = [f for f in fin if f > t_end]
        row = {"phase": name, "jobs": len(ids), "done_before_fault": at_start,
               "fault_s": round(t_end - info.get("t_start", t_end), 1),
               "first_finished_after_s": round(after[0] - t_end, 2) if after else None,
               "last_finished_after_s": round(fin[-1] - t_end, 2) if after else 0.0,
               "all_results_seen_after_s": round(t_all - t_end, 2) if t_all > t_end else 0.0,
               "settled_after_s": round(t_hw - t_end, 2), "phase_s": round(t_hw - t0, 1),
               "extra_tokens": extra, "allowed_tokens": allowed}
        row.update({k: v for k, v in info.items() if k not in ("t_start", "t_end", "allowed_tokens", "extra_worker")})
        log("PHASE %s" % json.dumps(row))
        assert extra >= 0, "%s: fewer tokens than the jobs need: %d" % (name, extra)
        assert extra <= allowed, "%s: %d tokens computed beyond the jobs' (the fault forced at most %d)" % (
            name, extra, allowed)
        self.rows.append(row)
        if "extra_worker" in info:
            self.retire(info["extra_worker"])

    # ---- the faults

    def no_fault(self, ids):
        return {}

    def kill9(self, k):
        def fault(ids):
            order = sorted(self.fleet.live)
            order = order[k % 3:] + order[:k % 3]   # rolling: each worker in turn, if it has work in flight
            busy = []
            self.wait(lambda: busy.extend(self.busy(order)) or busy, 60, "a worker with jobs in flight")
            wid = busy[0]
            t_start = time.time()
            p = self.fleet.stopped_for_good(wid)
            claimed = claimed_by(self.env, ids, wid)
            p.send_signal(signal.SIGKILL)
            p.wait()
            time.sleep(1)
            new_id = k % 2 == 1
            nid, _ = self.restart(wid, new_id)
            t_restart = time.time()
            t_served = self.wait(lambda: self.have(claimed) == len(claimed), 240, "the killed worker's jobs")
            return {"t_start": t_start, "t_end": t_start, "worker": wid, "restarted_as": nid,
                    "killed_inflight": len(claimed), "allowed_tokens": len(claimed) * TOKENS,
                    "inflight_served_after_s": round(t_served - t_start, 2),
                    "restart_after_s": round(t_restart - t_start, 1)}
        return fault

    def brokers_down(self, ids):
        t_start = time.time()
        self.ctl("down")
        time.sleep(OUTAGE_S)
        self.ctl("up")
        return {"t_start": t_start, "t_end": time.time()}

    def redis_down(self, ids):
        t_start = time.time()
        self.env.stop_redis()   # kill -9; the AOF (fsync always) has every acknowledged write
        time.sleep(OUTAGE_S)
        self.env.start_redis()
        return {"t_start": t_start, "t_end": time.time()}

    def redis_frozen(self, ids):
        t_start = time.time()
        self.env.redis_proc.send_signal(signal.SIGSTOP)
        time.sleep(OUTAGE_S)
        self.env.redis_proc.send_signal(signal.SIGCONT)
        return {"t_start": t_start, "t_end": time.time()}

    def request_errors(self, api, err, count, provoke):
        def fault(ids):
            t_start = time.time()
            self.ctl("request-error %s %s %d" % (api, err, count))
            extra = self.join_extra() if provoke else None
            self.wait(lambda: self.ctl.pending(api) == 0, 120, "the %s errors answered" % api)
            info = {"t_start": t_start, "t_end": time.time(), "injected": "%d x %s" % (count, err)}
            if extra:
                info["extra_worker"] = extra
            return info
        return fault

    def metadata_errors(self, ids):
        t_start = time.time()
        for t in ("sluice.jobs", "sluice.results"):
            self.ctl("topic-error %s LEADER_NOT_AVAILABLE" % t)
        extra = self.join_extra()
        time.sleep(5)
        for t in ("sluice.jobs", "sluice.results"):
            self.ctl("topic-error %s NO_ERROR" % t)
        return {"t_start": t_start, "t_end": time.time(), "injected": "5 s x LEADER_NOT_AVAILABLE",
                "extra_worker": extra}

    # ---- the audit over every phase

    def audit(self):
        time.sleep(2)   # late duplicates
        dups = h.check_complete(self.watch, self.jobs)   # >= 1 result each, no unknown id, copies identical
        with self.watch.lock:
            copies = sum(len(rs) for rs in self.watch.results.values())
            for jid, rs in self.watch.results.items():
                assert len(rs[0][1]["tokens"]) == TOKENS, (jid, rs[0][1])
        lag = offsets_at_high_watermark(self.env)
        assert not lag, "committed offsets below the high watermark: %s" % lag
        dlq = self.env.read_all("sluice.jobs.dlq", timeout=3, idle=0.5)
        assert not dlq, "%d messages in the DLQ" % len(dlq)
        trans = aof_transitions(self.aof_dir)
        ids = [j["id"] for j in self.jobs]
        not_one = [(i, trans.get(i, {}).get("done", 0)) for i in ids if trans.get(i, {}).get("done", 0) != 1]
        assert not not_one, "%d jobs without exactly one done transition, e.g. %s" % (len(not_one), not_one[:3])
        claims = sum(trans.get(i, {}).get("running", 0) for i in ids)
        undone = [i for i in ids if self.env.job_status(i) != "done"]
        assert not undone, "%d jobs not done in Redis" % len(undone)
        extra = sum(r["extra_tokens"] for r in self.rows)
        allowed = sum(r["allowed_tokens"] for r in self.rows)
        summary = {"jobs": len(ids), "results": copies, "duplicates": dups, "differing_duplicates": 0, "lost": 0,
                   "done_transitions": len(ids), "claims": claims, "tokens_expected": len(ids) * TOKENS,
                   "extra_tokens": extra, "allowed_tokens": allowed, "dlq": 0}
        log("AUDIT %s" % json.dumps(summary))
        return summary


def print_table(rows):
    """Times in seconds after the fault ended (a kill: the moment of the kill)."""
    log("%-15s %4s %6s %6s %7s %7s %7s %7s %13s" % ("phase", "jobs", "before", "fault", "1st fin", "lst fin",
                                                    "seen", "settled", "extra/allowed"))
    for r in rows:
        log("%-15s %4d %6d %6.1f %7s %7.2f %7.2f %7.2f %6d/%-6d %s" % (
            r["phase"], r["jobs"], r["done_before_fault"], r["fault_s"], r["first_finished_after_s"],
            r["last_finished_after_s"], r["all_results_seen_after_s"], r["settled_after_s"], r["extra_tokens"],
            r["allowed_tokens"],
            ("killed %s (%d in flight, served %.1f s after) -> %s" % (r["worker"], r["killed_inflight"],
                                                                    r["inflight_served_after_s"], r["restarted_as"])
             if "worker" in r else r.get("injected", ""))))


def test(make):
    s = Suite(make)
    t0 = time.time()
    try:
        for wid in ("w1", "w2", "w3"):
            s.fleet.start(wid)
        for p in s.fleet.live.values():
            s.env.wait_assigned(p, timeout=60)
        s.phase("baseline", s.no_fault)
        for k in range(10):
            s.phase("kill9-%d" % (k + 1), s.kill9(k))
        s.phase("brokers-down", s.brokers_down)
        s.phase("redis-down", s.redis_down)
        s.phase("redis-frozen", s.redis_frozen)
        for api, err, count, provoke in REQUEST_ERRORS:
            s.phase("err-" + api, s.request_errors(api, err, count, provoke))
        s.phase("err-Metadata", s.metadata_errors)
        summary = s.audit()
        summary["wall_s"] = round(time.time() - t0, 1)
        print_table(s.rows)
        if REPORT:
            with open(REPORT, "w") as f:
                json.dump({"settings": dict(SETTINGS, tokens_per_job=TOKENS, partitions=PARTITIONS, workers=3,
                                            outage_s=OUTAGE_S), "summary": summary, "phases": s.rows}, f, indent=1)
    finally:
        if s.rows and not REPORT:
            print_table(s.rows)
        s.watch.close()
        s.fleet.close()
        for p in s.env.procs:   # a stopped process cannot act on SIGTERM
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)


if __name__ == "__main__":
    sys.exit(h.main(test))
