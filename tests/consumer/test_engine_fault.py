"""A device fault: the engine fails a step (SLUICE_FAIL_STEP stands in for a GPU that stops answering). The worker
says so in one line, delivers the results it had, hands every unfinished job back and exits 1; no job gets an error
Result or goes to the DLQ, and another worker finishes them all with the same results a clean run gives."""
import sys

import harness as h

N = 60
FAIL_STEP = 200   # engine.max_batch 4, 64 tokens a job: a dozen jobs done, the rest unfinished or waiting


def test(make):
    env = make("engine_fault")
    settings = {"engine.max_batch": 4, "worker.max_inflight": 16}
    w = env.start_worker("w-fault", _env={"SLUICE_FAIL_STEP": str(FAIL_STEP)}, **settings)
    env.wait_assigned(w)
    watch = h.ResultWatcher(env)
    jobs = h.slow_jobs(N, "fault", max_tokens=64)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs])
    rc = w.wait(timeout=180)
    log = open(w.errpath).read()
    lines = [l for l in log.splitlines() if "engine failed" in l]
    h.log("exit %d; %s" % (rc, lines[0].split("] ", 1)[-1] if lines else "no 'engine failed' line"))
    assert rc == 1, "exit status %d:\n%s" % (rc, log[-1500:])
    assert len(lines) == 1 and "SLUICE_FAIL_STEP" in lines[0] and "handing back" in lines[0], log[-1500:]
    watch.wait(lambda: watch.distinct() > 0, 30, "the results delivered before the fault")
    before = watch.distinct()
    assert before < N, "every job done before the fault: move FAIL_STEP"
    h.log("%d of %d results out before the fault" % (before, N))
    dups = h.finish_with_worker(env, "w-after", settings, watch, jobs)   # every first result OK, duplicates equal
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: True, timeout=10, idle=2)
    assert not dlq, "%d jobs in the DLQ" % len(dlq)
    h.log("all %d jobs have an OK result after another worker took over; %d duplicates (identical); DLQ empty"
          % (N, dups))


if __name__ == "__main__":
    sys.exit(h.main(test))
