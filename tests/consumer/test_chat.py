"""Chat jobs end to end (redis-server + mock Kafka + sluice-worker on the tiny model, whose tokenizer is bytes):
- a chat Job (schemas/job.avsc: messages, thinking) gets a Result whose prompt is DeepSeek-V4's chat encoding of
  the messages (usage.prompt_tokens == the bytes of `sluice-tokenize --chat`, and the tokens are what the engine
  alone generates from exactly those ids), with content == text (thinking off) or reasoning_content == text up
  to `</think>` (thinking on; the random tiny model rarely writes one, so then content is null);
- a Job written with the v1 schema (schemas/v1/job.avsc) still runs, and its Result has content null;
- a Result is read by a v1 reader: with Avro schema resolution (writer = current, reader = v1) and by a reader
  that knows only v1 (the added fields are at the end);
- invalid chat jobs go to the DLQ as `validation` with a line naming the problem;
- `sluice-submit --chat Q --system S [--thinking]` and --jsonl with messages print content / reasoning_content."""
import io
import json
import os
import subprocess
import sys
import tempfile

import avro.io
import avro.schema

import harness as h

V1_JOB = h.load_schema("v1/job.avsc")
V1_RESULT = h.load_schema("v1/result.avsc")


def rendered(messages, thinking):
    """The chat prompt as bytes, from sluice-tokenize --chat (engine/chat.c)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"messages": messages, "thinking": thinking}, f, ensure_ascii=False)
    try:
        out = subprocess.run([h.prog("sluice-tokenize"), "--chat", f.name], check=True, capture_output=True).stdout
    finally:
        os.unlink(f.name)
    assert out.endswith(b"\n")
    return out[:-1]


def msg(role, content, reasoning=None):
    return {"role": role, "content": content, "reasoning_content": reasoning}


def check_answer(r, thinking):
    text = r["text"]
    if not thinking:
        assert r["content"] == text and r["reasoning_content"] is None, r
    elif "</think>" in text:
        i = text.index("</think>")
        assert r["reasoning_content"] == text[:i] and r["content"] == text[i + len("</think>"):], r
    else:
        assert r["reasoning_content"] == text and r["content"] is None, r


def test(make):
    env = make("chat")
    w = env.start_worker("w-chat")
    env.wait_assigned(w)
    uid = "%06x" % (os.getpid() & 0xffffff)

    # ---- chat jobs from an independent producer (python3-avro, current schema)
    conv = [msg("system", "You are terse."), msg("user", "Hi"), msg("assistant", "Hello.", "A greeting."),
            msg("user", "Name a colour, ünïcödé welcome.")]
    chat_off = h.job_record("chat-off-" + uid, "", 12, messages=conv, thinking=False)
    chat_on = h.job_record("chat-on-" + uid, "", 12, messages=conv, thinking=True, ignore_eos=True)
    chat_merge = h.job_record("chat-merge-" + uid, "", 6, messages=[msg("user", "a"), msg("user", "b")])
    v1_rec = {k: v for k, v in h.job_record("v1-" + uid, "plain v1 prompt", 5).items()
              if k not in ("messages", "thinking")}
    v1_bytes = h.confluent(1, h.avro_encode(V1_JOB, v1_rec))

    bad = {
        "both": h.job_record("bad-both-" + uid, "x", 4, messages=[msg("user", "q")]),
        "last": h.job_record("bad-last-" + uid, "", 4, messages=[msg("user", "q"), msg("assistant", "a")]),
        "role": h.job_record("bad-role-" + uid, "", 4, messages=[msg("tool", "t"), msg("user", "q")]),
        "think": h.job_record("bad-think-" + uid, "prompt", 4, thinking=True),
        "utf8": None,   # filled below: invalid UTF-8 cannot go through python3-avro's string type
    }
    values = [(j["id"].encode(), h.encode_job(j)) for j in (chat_off, chat_on, chat_merge)]
    values.append((v1_rec["id"].encode(), v1_bytes))
    values += [(j["id"].encode(), h.encode_job(j)) for k, j in bad.items() if j]
    # a chat message with invalid UTF-8: patch the bytes of a valid encoding ("q" -> 0xff)
    utf8 = h.avro_encode(h.JOB_SCHEMA, h.job_record("bad-utf8-" + uid, "", 4, messages=[msg("user", "q")]))
    i = utf8.rindex(b"\x02q")
    values.append((b"bad-utf8-" + uid.encode(), utf8[:i] + b"\x02\xff" + utf8[i + 2:]))
    env.produce(values)

    ids = [chat_off["id"], chat_on["id"], chat_merge["id"], v1_rec["id"]]
    got = env.results(ids, timeout=60, idle=0.5)
    for jid in ids:
        assert jid in got, "no result for %s" % jid
    for job, thinking in ((chat_off, False), (chat_on, True), (chat_merge, False)):
        r = got[job["id"]][0]
        assert r["status"] == "OK", r
        prompt = rendered(job["messages"], thinking)
        assert r["usage"]["prompt_tokens"] == len(prompt), (r["usage"], len(prompt))
        ref = h.generate(list(prompt), job["max_tokens"], ignore_eos=job["ignore_eos"])
        assert r["tokens"] == ref["tokens"], (r["tokens"], ref["tokens"])
        check_answer(r, thinking)
    assert rendered(chat_merge["messages"], False).endswith("<｜User｜>a\n\nb<｜Assistant｜></think>".encode())
    assert rendered(chat_on["messages"], True).endswith("<｜Assistant｜><think>".encode())
    assert b"A greeting." not in rendered(chat_on["messages"], True)   # earlier reasoning dropped
    assert len(got[chat_on["id"]][0]["tokens"]) == 12
    r1 = got[v1_rec["id"]][0]
    assert r1["status"] == "OK" and r1["content"] is None and r1["reasoning_content"] is None, r1
    assert r1["usage"]["prompt_tokens"] == len(b"plain v1 prompt"), r1

    # ---- v1 readers of the current Result bytes
    raw = env.read_all("sluice.results", until=lambda ms: any(m.key() == chat_off["id"].encode() for m in ms),
                       timeout=20, idle=0.2)
    value = [m.value() for m in raw if m.key() == chat_off["id"].encode()][0]
    body = value[5:] if value[:1] == b"\x00" else value
    cur = h.avro_decode(h.RESULT_SCHEMA, body)
    resolved = avro.io.DatumReader(h.RESULT_SCHEMA, V1_RESULT).read(avro.io.BinaryDecoder(io.BytesIO(body)))
    plain_v1 = h.avro_decode(V1_RESULT, body)
    v1_fields = [f.name for f in V1_RESULT.fields]
    assert "content" not in resolved and "content" not in plain_v1
    assert {k: cur[k] for k in v1_fields} == resolved == plain_v1, (cur, resolved, plain_v1)

    # ---- the DLQ: one line each, class validation
    want = {"bad-both": "prompt: must be empty in a chat job", "bad-last": "messages[1]: the last message",
            "bad-role": "messages[0]: role 'tool'", "bad-think": "thinking: set on a job without messages",
            "bad-utf8": "messages[0]: content is not valid UTF-8"}
    dlq = env.read_all("sluice.jobs.dlq", until=lambda ms: len(ms) >= len(want), timeout=30, idle=0.5)
    assert len(dlq) == len(want), [dict(m.headers()) for m in dlq]
    for m in dlq:
        hdr = dict(m.headers())
        key = m.key().decode().rsplit("-", 1)[0]
        assert hdr["sluice.error.class"] == b"validation", hdr
        err = hdr["sluice.error"].decode()
        assert want[key] in err and "\n" not in err, (key, err)

    # ---- sluice-submit --chat / --system / --thinking, and --jsonl with messages
    submit = [h.prog("sluice-submit"), "--brokers", env.brokers, "--timeout", "60", "--max-tokens", "8"]
    p = subprocess.run(submit + ["--system", "Be brief.", "--chat", "What is 2+2?", "--chat", "And 3+3?"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = h.json_lines(p.stdout)
    assert len(out) == 2 and all(o["status"] == "OK" and o["content"] == o["text"] for o in out), out
    assert all("reasoning_content" not in o for o in out), out
    p = subprocess.run(submit + ["--thinking", "--chat", "Think first."], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    o = h.json_lines(p.stdout)[0]
    check_answer({"text": o["text"], "content": o.get("content"), "reasoning_content": o.get("reasoning_content")},
                 True)
    jl = os.path.join(env.dir, "chat.jsonl")
    with open(jl, "w") as f:
        f.write(json.dumps({"id": "jl-chat-" + uid, "max_tokens": 4, "thinking": False,
                            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}) + "\n")
    p = subprocess.run(submit + ["--jsonl", jl], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    o = h.json_lines(p.stdout)[0]
    assert o["id"] == "jl-chat-" + uid and o["content"] == o["text"], o
    p = subprocess.run(submit + ["--thinking", "x"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--chat" in p.stderr, (p.returncode, p.stderr)
    h.log("chat jobs OK")


if __name__ == "__main__":
    sys.exit(h.main(test))
