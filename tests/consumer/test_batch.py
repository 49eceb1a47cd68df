"""sluice-batch end to end (redis-server + mock Kafka + sluice-worker on the tiny model):
- a 200-line OpenAI Batch input file (chat and completion bodies, 12 bad lines: invalid JSON, another url,
  n=2, tools, no messages, bad max_tokens, no custom_id, a max_tokens the worker refuses) is submitted and
  collected; an independent reader (json.loads here) checks OpenAI's output and error formats, that every
  custom_id is in exactly one of the two files (0 lost), that greedy completions are what the engine alone
  generates, and that `status` counts match the files;
- resume: collect killed (-9) half way, the batch submitted again under its id (the workers re-emit the
  Results already done), collect run again: every line once, counts exact; a second collect of a finished
  batch writes the same bytes;
- cancel: a batch of long jobs cancelled while the worker runs them: it ends `cancelled`, its jobs stop
  (CANCELLED Results with fewer tokens than asked), each is a `batch_cancelled` line of the error file."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import harness as h

N = 200


def batch_cmd(env, *args, timeout=180):
    p = subprocess.run([h.prog("sluice-batch")] + list(args[:1]) + ["--brokers", env.brokers, "--redis",
                       "redis://127.0.0.1:%d" % env.redis_port] + list(args[1:]),
                       capture_output=True, text=True, timeout=timeout)
    return p


def submit(env, path, *extra):
    p = batch_cmd(env, "submit", path, *extra)
    assert p.returncode == 0, p.stderr
    bid = p.stdout.strip()
    assert re.fullmatch(r"batch_[0-9a-f]{32}", bid) or extra, p.stdout
    return bid


def collect(env, bid, out, err, timeout=120):
    p = batch_cmd(env, "collect", bid, "--output", out, "--errors", err, "--timeout", str(timeout),
                  timeout=timeout + 60)
    assert p.returncode == 0, p.stderr
    return p


def status(env, bid):
    p = batch_cmd(env, "status", bid)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def read_lines(path):
    """The independent reader: one JSON object per line, nothing else."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text == "" or text.endswith("\n"), path
    return [json.loads(l) for l in text.split("\n") if l]


def chat_line(cid, content, **body):
    b = {"model": "deepseek-v4-tiny", "messages": [{"role": "user", "content": content}]}
    b.update(body)
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": b}


def completion_line(cid, prompt, **body):
    b = {"model": "tiny-completions", "prompt": prompt}
    b.update(body)
    return {"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": b}


def make_file(path, tag):
    """N lines; returns (lines as written, {custom_id: expected error code} for the bad ones)."""
    lines, bad = [], {}
    for i in range(N):
        cid = "%s-%03d" % (tag, i)
        k = i % 6
        if k == 0:
            obj = chat_line(cid, "Question %d: name a colour." % i, max_tokens=1 + i % 8)
        elif k == 1:
            obj = chat_line(cid, "ü %d" % i, max_completion_tokens=1 + i % 5, temperature=0.7, seed=i, top_p=0.9)
            obj["body"]["messages"].insert(0, {"role": "system", "content": [{"type": "text", "text": "Be brief."}]})
        elif k == 2:
            obj = completion_line(cid, "prompt number %d" % i, max_tokens=1 + i % 10, temperature=0)
        elif k == 3:
            obj = completion_line(cid, "stop me %d" % i, max_tokens=6, stop=["\n", "zz"], n=1, stream=False)
            del obj["body"]["model"]   # the worker's model name is recorded then
        elif k == 4:
            obj = chat_line(cid, "think %d" % i, max_tokens=4, thinking={"type": "enabled"})
        else:
            obj = completion_line(cid, ["one prompt in a list %d" % i], max_tokens=3, seed=7, user="u1")
        lines.append(json.dumps(obj, ensure_ascii=(i % 2 == 0)))
    # bad lines, replacing some of the good ones (the file stays N lines)
    bads = [
        (10, "invalid_json", '{"custom_id": "%s-010", "url": "/v1/chat/completions", "body": {' % tag),
        (20, "invalid_json", "this is not json at all"),
        (30, "invalid_url", json.dumps({"custom_id": "%s-030" % tag, "method": "POST", "url": "/v1/embeddings",
                                        "body": {"model": "m", "input": "x"}})),
        (40, "unsupported_parameter", json.dumps(chat_line("%s-040" % tag, "two please", n=2, max_tokens=3))),
        (50, "unsupported_parameter", json.dumps(chat_line("%s-050" % tag, "tools", max_tokens=3,
                                                           tools=[{"type": "function"}]))),
        (60, "invalid_request", json.dumps({"custom_id": "%s-060" % tag, "method": "POST",
                                            "url": "/v1/chat/completions", "body": {"model": "m", "max_tokens": 3}})),
        (70, "invalid_request", json.dumps(completion_line("%s-070" % tag, "x", max_tokens="ten"))),
        (80, "invalid_request", json.dumps(chat_line("%s-080" % tag, "x", max_tokens=0))),
        (90, "invalid_request", json.dumps(completion_line("%s-090" % tag, "x", max_tokens=-5))),
        (100, "invalid_custom_id", json.dumps({"method": "POST", "url": "/v1/completions",
                                               "body": {"prompt": "no id", "max_tokens": 2}})),
        (110, "invalid_request", json.dumps(completion_line("%s-110" % tag, "too long", max_tokens=100000))),  # worker
        (120, "unsupported_parameter", json.dumps(chat_line("%s-120" % tag, "x", logprobs=True, max_tokens=2))),
    ]
    for i, code, text in bads:
        lines[i] = text
        bad["%s-%03d" % (tag, i)] = code
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return lines, bad


def check_files(out, err, lines, bad, tag):
    """OpenAI's formats, and every custom_id exactly once across both files."""
    requests = {}
    for i, l in enumerate(lines):
        try:
            obj = json.loads(l)
            if "custom_id" in obj:
                requests[obj["custom_id"]] = obj
        except ValueError:
            pass
    seen = {}
    ids = set()
    for o in out:
        assert set(o) == {"id", "custom_id", "response", "error"}, o
        assert o["error"] is None and o["id"].startswith("batch_req_") and o["id"] not in ids, o
        ids.add(o["id"])
        seen[o["custom_id"]] = seen.get(o["custom_id"], 0) + 1
        req = requests[o["custom_id"]]
        resp = o["response"]
        assert resp["status_code"] == 200 and resp["request_id"], resp
        body = resp["body"]
        chat = req["url"] == "/v1/chat/completions"
        assert body["object"] == ("chat.completion" if chat else "text_completion"), body
        assert body["id"] and isinstance(body["created"], int) and body["created"] > 1.6e9, body
        assert body["model"] == req["body"].get("model", body["model"]) and body["model"], body
        assert len(body["choices"]) == 1 and body["choices"][0]["index"] == 0, body
        ch = body["choices"][0]
        assert ch["finish_reason"] in ("stop", "length"), ch
        if chat:
            m = ch["message"]
            assert m["role"] == "assistant" and set(m) == {"role", "content", "reasoning_content"}, m
            if "thinking" in req["body"]:   # the random model rarely ends its thinking: then content is null
                assert isinstance(m["reasoning_content"], str), m
            else:
                assert isinstance(m["content"], str) and m["reasoning_content"] is None, m
        else:
            assert isinstance(ch["text"], str), ch
        u = body["usage"]
        want_max = req["body"].get("max_completion_tokens", req["body"].get("max_tokens"))
        assert 1 <= u["completion_tokens"] <= want_max, (u, want_max)
        assert u["prompt_tokens"] > 0 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
        if ch["finish_reason"] == "length":
            assert u["completion_tokens"] == want_max, (u, want_max)
    no_id = 0
    for e in err:
        assert set(e) == {"id", "custom_id", "response", "error"}, e
        assert e["id"].startswith("batch_req_") and e["id"] not in ids, e
        ids.add(e["id"])
        assert e["error"]["code"] and e["error"]["message"], e
        if e["response"] is not None:
            assert e["response"]["status_code"] in (400, 500), e
            assert e["response"]["body"]["error"]["message"], e
        if e["custom_id"] is None:
            no_id += 1
            continue
        seen[e["custom_id"]] = seen.get(e["custom_id"], 0) + 1
        if e["custom_id"] in bad:
            assert e["error"]["code"] == bad[e["custom_id"]], (e, bad[e["custom_id"]])
    assert all(n == 1 for n in seen.values()), [c for c, n in seen.items() if n > 1][:5]
    lost = set(requests) - set(seen)
    assert not lost, "lost: %s" % sorted(lost)[:5]
    assert len(out) + len(err) == len(lines), (len(out), len(err), len(lines))
    # the lines that could not name their custom_id: the two invalid JSON lines and the one without one
    assert no_id == 3, no_id
    return seen


def test(make):
    env = make("batch")
    w = env.start_worker("w-batch", **{"engine.max_batch": 4})   # the cancel batch: 4 jobs run, the rest wait
    env.wait_assigned(w)
    d = env.dir

    # ---- 200 lines round trip
    path = os.path.join(d, "input.jsonl")
    lines, bad = make_file(path, "r")
    bid = submit(env, path)
    out_p, err_p = os.path.join(d, "out.jsonl"), os.path.join(d, "err.jsonl")
    collect(env, bid, out_p, err_p)
    out, err = read_lines(out_p), read_lines(err_p)
    check_files(out, err, lines, bad, "r")
    assert len(err) == len(bad), [e["error"] for e in err]
    by_cid = {o["custom_id"]: o for o in out + err if o["custom_id"]}
    e = by_cid["r-040"]
    assert e["response"]["status_code"] == 400 and "n: only 1" in e["error"]["message"], e
    assert "tools" in by_cid["r-050"]["error"]["message"], by_cid["r-050"]
    assert "/v1/embeddings" in by_cid["r-030"]["error"]["message"] and by_cid["r-030"]["response"] is None
    assert by_cid["r-080"]["response"]["body"]["error"]["param"] == "max_tokens", by_cid["r-080"]
    w110 = by_cid["r-110"]   # valid for sluice-batch, refused by the worker (its DLQ copy)
    assert "max_tokens: 100000 outside" in w110["error"]["message"] and w110["response"]["status_code"] == 400, w110
    # greedy completions: the engine alone gives the same text
    checked = 0
    for i in range(2, N, 6):
        cid = "r-%03d" % i
        if cid in bad:
            continue
        req = json.loads(lines[i])["body"]
        ref = h.generate(req["prompt"], req["max_tokens"])
        ch = by_cid[cid]["response"]["body"]["choices"][0]
        assert ch["text"] == ref["text"] and ch["finish_reason"] == ref["finish_reason"], (cid, ch, ref)
        checked += 1
        if checked == 8:
            break
    st = status(env, bid)
    assert st["id"] == bid and st["object"] == "batch" and st["status"] == "completed", st
    assert st["request_counts"] == {"total": N, "completed": len(out), "failed": len(err)}, st
    assert st["completed_at"] >= st["in_progress_at"] >= st["created_at"] > 0, st
    assert st["output_file"] == out_p and st["error_file"] == err_p, st
    # a second collect of a finished batch writes the same bytes
    collect(env, bid, out_p + ".2", err_p + ".2")
    assert open(out_p, "rb").read() == open(out_p + ".2", "rb").read()
    assert open(err_p, "rb").read() == open(err_p + ".2", "rb").read()
    h.log("200 lines: %d output, %d errors, 0 lost" % (len(out), len(err)))

    # ---- bad usage
    p = batch_cmd(env, "status", "batch_nope")
    assert p.returncode == 1 and "no batch 'batch_nope'" in p.stderr, p.stderr
    p = batch_cmd(env, "collect", bid)
    assert p.returncode == 2 and "--output" in p.stderr, p.stderr
    p = batch_cmd(env, "cancel", bid)
    assert p.returncode == 1 and "already completed" in p.stderr, p.stderr

    # ---- resume: collect killed half way, the batch resent under its id, collect again
    ref = h.generate("xyz", 2000)
    assert ref["finish_reason"] == "length", ref   # a prompt the tiny model does not end early
    rpath = os.path.join(d, "resume.jsonl")
    rlines = [json.dumps(completion_line("k-%02d" % i, "xyz", max_tokens=2000, temperature=0)) for i in range(40)]
    with open(rpath, "w") as f:
        f.write("\n".join(rlines) + "\n")
    rbid = submit(env, rpath)
    rout, rerr = os.path.join(d, "rout.jsonl"), os.path.join(d, "rerr.jsonl")
    args = [h.prog("sluice-batch"), "collect", "--brokers", env.brokers, "--redis",
            "redis://127.0.0.1:%d" % env.redis_port, rbid, "--output", rout, "--errors", rerr]
    c = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while env.redis.cmd("HLEN", "sluice:batch:%s:out" % rbid) < 5 and time.time() - t0 < 60:
        time.sleep(0.02)
    c.send_signal(signal.SIGKILL)
    c.wait()
    stored = env.redis.cmd("HLEN", "sluice:batch:%s:out" % rbid)
    assert 5 <= stored < 40, "collect was not killed half way (%d stored)" % stored
    assert not os.path.exists(rout), "the output file is written only when the batch is finished"
    again = submit(env, rpath, "--batch-id", rbid)
    assert again == rbid, again
    collect(env, rbid, rout, rerr)
    ro, re_ = read_lines(rout), read_lines(rerr)
    assert len(ro) == 40 and re_ == [], (len(ro), re_[:2])
    assert sorted(o["custom_id"] for o in ro) == ["k-%02d" % i for i in range(40)]
    for o in ro:
        assert o["response"]["body"]["choices"][0]["text"] == ref["text"], o
    st = status(env, rbid)
    assert st["status"] == "completed" and st["request_counts"] == {"total": 40, "completed": 40, "failed": 0}, st
    h.log("resume: killed at %d of 40 stored, resent, collected again: 40 lines, each once" % stored)

    # ---- cancel: long jobs (the tiny model greedy on "xyz" runs to max_tokens)
    long_ref = h.generate("xyz", 3000)
    assert long_ref["finish_reason"] == "length", long_ref
    cpath = os.path.join(d, "cancel.jsonl")
    clines = [json.dumps(completion_line("c-%02d" % i, "xyz", max_tokens=3000, temperature=0)) for i in range(24)]
    with open(cpath, "w") as f:
        f.write("\n".join(clines) + "\n")
    cbid = submit(env, cpath)
    t0 = time.time()
    while time.time() - t0 < 30 and env.job_status("%s-1" % cbid) != "running":
        time.sleep(0.02)
    p = batch_cmd(env, "cancel", cbid)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] in ("cancelling", "cancelled"), p.stdout
    t_cancel = time.time()
    cout, cerr = os.path.join(d, "cout.jsonl"), os.path.join(d, "cerr.jsonl")
    collect(env, cbid, cout, cerr, timeout=60)
    took = time.time() - t_cancel
    co, ce = read_lines(cout), read_lines(cerr)
    assert len(co) + len(ce) == 24, (len(co), len(ce))
    assert sorted(o["custom_id"] for o in co + ce) == ["c-%02d" % i for i in range(24)]
    assert all(e["error"]["code"] == "batch_cancelled" and e["response"] is None for e in ce), ce[:2]
    assert len(ce) >= 20, "only %d of 24 jobs cancelled" % len(ce)
    st = status(env, cbid)
    assert st["status"] == "cancelled" and st["cancelled_at"] >= st["cancelling_at"] > 0, st
    assert st["request_counts"] == {"total": 24, "completed": len(co), "failed": len(ce)}, st
    # the jobs stopped: the workers' Results are CANCELLED, short of max_tokens
    res = env.results(["%s-%d" % (cbid, i) for i in range(1, 25)], timeout=30, idle=0.5)
    cancelled = [r[0] for r in res.values() if r[0]["status"] == "CANCELLED"]
    assert len(cancelled) == len(ce), (len(cancelled), len(ce))
    assert all(r["usage"]["completion_tokens"] < 3000 for r in cancelled), [r["usage"] for r in cancelled]
    h.log("cancel: %d of 24 cancelled, %d finished first; cancelled %.1f s after the cancel" % (len(ce), len(co),
                                                                                               took))


if __name__ == "__main__":
    sys.exit(h.main(test))
