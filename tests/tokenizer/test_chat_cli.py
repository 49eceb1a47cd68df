#!/usr/bin/env python3
"""`sluice-tokenize --chat FILE.json`: for every case of chat_cases.jsonl, stdout is the case's prompt as raw
UTF-8 plus one newline, byte for byte; bad input exits 1 with one line naming the problem.
    test_chat_cli.py PATH/TO/sluice-tokenize CHAT_CASES.jsonl
"""
import json
import os
import subprocess
import sys
import tempfile

BIN, CASES = sys.argv[1], sys.argv[2]
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg, file=sys.stderr)


def run(doc, raw=None):
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(raw if raw is not None else json.dumps(doc, ensure_ascii=False).encode())
        path = f.name
    try:
        return subprocess.run([BIN, "--chat", path], capture_output=True, timeout=30)
    finally:
        os.unlink(path)


n = 0
with open(CASES, encoding="utf-8") as f:
    for line in f:
        c = json.loads(line)
        doc = {"messages": c["messages"], "thinking": c["thinking"]}
        r = run(doc)
        want = c["prompt"].encode() + b"\n"
        if r.returncode != 0 or r.stdout != want:
            fail("%s thinking=%s: rc %d\n got  %r\n want %r\n%s" % (c["name"], c["thinking"], r.returncode,
                                                                   r.stdout, want, r.stderr.decode()))
        n += 1
if n < 40:
    fail("only %d cases" % n)

# thinking defaults to false; stdin as "-"
r = subprocess.run([BIN, "--chat", "-"], input=json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(),
                   capture_output=True, timeout=30)
if r.stdout != "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>\n".encode():
    fail("stdin / default thinking: %r" % r.stdout)

for doc, raw, want in [
    (None, b"{not json", "line 1"),
    ([1], None, "expected {\"messages\""),
    ({"messages": [], "thinking": "yes"}, None, "expected {\"messages\""),
    ({"messages": {}}, None, "\"messages\" must be an array"),
    ({"messages": [{"role": "tool", "content": "x"}]}, None, "messages[0]: \"role\" must be one of"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "developer", "content": ""}]}, None,
     "messages[1]: a developer message needs content"),
    ({"messages": [{"role": "system", "content": "x", "tools": [{}]}]}, None, "\"tools\" is not supported"),
]:
    r = run(doc, raw)
    err = r.stderr.decode()
    if r.returncode != 1 or want not in err or err.count("\n") != 1 or r.stdout:
        fail("%r: rc %d stderr %r stdout %r (want %r)" % (raw or doc, r.returncode, err, r.stdout, want))

r = subprocess.run([BIN, "--help"], capture_output=True, timeout=30)
if b"--chat" not in r.stdout:
    fail("--help does not mention --chat")

if failures:
    sys.exit("%d failures" % failures)
print("ok: %d cases" % n)
