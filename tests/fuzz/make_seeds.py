#!/usr/bin/env python3
"""Seeds for the fuzz corpora (tests/fuzz/corpus/<target>): a few
well-formed inputs per target that reach deep into the parser, from which libFuzzer mutates.
Job messages are Avro written by hand (schemas/job.avsc, field order). The job_resolver seeds (a writer
schema and a Job written with it) are written by python3-avro, as a producer with that schema would.
    python3 tests/fuzz/make_seeds.py    (from the repository root; overwrites seed_* files only)
"""
import io
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def zz(n):
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return zz(len(b)) + b


def arr(items, enc):
    return (zz(len(items)) + b"".join(enc(i) for i in items) + zz(0)) if items else zz(0)


def job(id="job-1", prompt="Hello world", max_tokens=8, tenant="t", temperature=0.0, top_p=1.0, top_k=0,
        min_p=0.0, rep=1.0, seed=None, stop=(), stop_ids=(), ignore_eos=False, logprobs=False, stream=False,
        priority=0, deadline=None, reply=None, meta=None, messages=(), thinking=False, v1=False):
    b = s(id)
    b += zz(0) + s(prompt) if isinstance(prompt, str) else zz(1) + arr(list(prompt), zz)
    b += zz(max_tokens) + s(tenant)
    b += struct.pack("<ff", temperature, top_p) + zz(top_k) + struct.pack("<ff", min_p, rep)
    b += zz(0) if seed is None else zz(1) + zz(seed)
    b += arr(list(stop), s) + arr(list(stop_ids), zz)
    b += bytes([ignore_eos, logprobs, stream]) + zz(priority)
    b += zz(0) if deadline is None else zz(1) + zz(deadline)
    b += zz(0) if reply is None else zz(1) + s(reply)
    b += arr(sorted((meta or {}).items()), lambda kv: s(kv[0]) + s(kv[1]))
    if v1:
        return b
    def msg(m):
        r = s(m[0]) + s(m[1])
        return r + (zz(0) if len(m) < 3 else zz(1) + s(m[2]))
    b += arr(list(messages), msg) + bytes([thinking])
    return b


def confluent(sid, body):
    return b"\0" + struct.pack(">i", sid) + body


def safetensors(tensors, meta=None):
    hdr, data = {}, b""
    if meta:
        hdr["__metadata__"] = meta
    for name, dtype, shape, size in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 7) & 0xFF for i in range(size))
    h = json.dumps(hdr).encode()
    return struct.pack("<Q", len(h)) + h + data


def write(target, name, b):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(b)


# ---- job_resolver: 2-byte big-endian schema length, the writer schema (JSON), the Avro bytes


def avsc(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return json.load(f)


def record(name, fields, ns=None):
    r = {"type": "record", "name": name, "fields": [{"name": n, "type": t} if len(f) == 2 else
                                                   {"name": n, "type": t, "default": f[2]}
                                                   for f in fields for n, t in [f[:2]]]}
    if ns:
        r["namespace"] = ns
    return r


def schema_text(schema):
    return schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))


def avro_encode(schema, datum):
    import avro.io
    import avro.schema
    out = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(schema_text(schema))).write(datum, avro.io.BinaryEncoder(out))
    return out.getvalue()


def resolver_seed(name, schema, datum=None, raw=b""):
    text = schema_text(schema).encode()
    body = raw if datum is None else avro_encode(schema, datum)
    write("job_resolver", name, struct.pack(">H", len(text)) + text + body)


def resolver_seeds():
    cur, v1, v3 = avsc("schemas/job.avsc"), avsc("schemas/v1/job.avsc"), avsc("tests/consumer/schemas/job_v3.avsc")
    full = {"id": "job-1", "prompt": "Hello, 中文", "max_tokens": 8, "tenant": "t", "temperature": 0.5,
            "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "seed": 42, "stop": ["\n\n", "x\0y"],
            "stop_token_ids": [2], "ignore_eos": True, "logprobs": True, "stream": False, "priority": -3,
            "deadline_ms": 1700000000123, "reply_topic": "replies.a", "metadata": {"k": "v", "trace": "abc"},
            "messages": [], "thinking": False}
    resolver_seed("current_text", cur, full)
    resolver_seed("current_ids", cur, dict(full, prompt=[1, 2, 3], seed=None, deadline_ms=None, reply_topic=None,
                                           metadata={}, stop=[]))
    resolver_seed("current_chat", cur, dict(full, prompt="", thinking=True, messages=[
        {"role": "system", "content": "Be brief.", "reasoning_content": None},
        {"role": "assistant", "content": "Hello", "reasoning_content": "thought"}]))
    resolver_seed("v1", v1, {k: v for k, v in full.items() if k not in ("messages", "thinking")})
    resolver_seed("v3_a", v3, {"max_tokens": 9, "prompt": "Hi there", "id": "v3-a", "priority_class": "interactive",
                               "seed": 1234567890123, "temperature": 0.25, "stop": ["\n"], "metadata": {"k": "v"},
                               "messages": [], "top_k": 5})
    resolver_seed("v3_b", v3, {"max_tokens": 3, "prompt": "", "id": "v3-b", "priority_class": "batch", "seed": 7,
                               "temperature": 0.0, "stop": [], "metadata": {},
                               "messages": [{"content": "hello", "role": "user"}], "top_k": 0})
    minimal = record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int")], "sluice")
    resolver_seed("minimal", minimal, {"id": "m", "prompt": "p", "max_tokens": 1})
    # int and long read as float, int as long, plain types into the reader's unions
    promoted = record("Job", [("id", "string"), ("prompt", {"type": "array", "items": "int"}), ("max_tokens", "int"),
                              ("temperature", "int"), ("top_p", "long"), ("seed", "int"), ("deadline_ms", "long"),
                              ("reply_topic", "string"), ("stop_token_ids", {"type": "array", "items": "int"})])
    resolver_seed("promoted", promoted, {"id": "p", "prompt": [5, 6], "max_tokens": 2, "temperature": 1,
                                         "top_p": 1, "seed": -9, "deadline_ms": 1 << 40, "reply_topic": "r",
                                         "stop_token_ids": [7, 8]})
    # writer unions in another order than the reader's
    msg_rev = record("Message", [("content", "string"), ("reasoning_content", ["string", "null"]), ("role", "string")])
    reversed_ = record("Job", [("prompt", [{"type": "array", "items": "int"}, "string"]), ("id", "string"),
                               ("max_tokens", "int"), ("seed", ["long", "null"]), ("reply_topic", ["string", "null"]),
                               ("messages", {"type": "array", "items": msg_rev})], "other.ns")
    resolver_seed("reversed_ids", reversed_, {"prompt": [1], "id": "r1", "max_tokens": 1, "seed": None,
                                              "reply_topic": "t", "messages": []})
    resolver_seed("reversed_chat", reversed_, {"prompt": "", "id": "r2", "max_tokens": 1, "seed": 3,
                                               "reply_topic": None, "messages": [
                                                   {"content": "c", "reasoning_content": "why", "role": "user"},
                                                   {"content": "d", "reasoning_content": None, "role": "user"}]})
    # fields the worker does not know, of every kind, skipped
    node = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"},
                                                         {"name": "next", "type": ["null", "Node"]}]}
    msg_extra = record("Message", [("role", "string"), ("name", ["null", "string"]), ("content", "string")])
    extras = record("Job", [
        ("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}), ("id", "string"),
        ("hash", {"type": "fixed", "name": "H", "size": 4}), ("blob", "bytes"), ("score", "double"),
        ("prompt", "string"), ("flag", "boolean"), ("list", node), ("max_tokens", "int"),
        ("tags", {"type": "map", "values": {"type": "array", "items": "long"}}),
        ("opt", ["null", record("Inner", [("a", "float"), ("b", "Kind")])]), ("none", "null"),
        ("messages", {"type": "array", "items": msg_extra})])
    resolver_seed("extras", extras, {"kind": "B", "id": "e", "hash": b"abcd", "blob": b"\x00\xff", "score": 2.5,
                                     "prompt": "q", "flag": True, "list": {"v": 1, "next": {"v": 2, "next": None}},
                                     "max_tokens": 4, "tags": {"a": [1, 2]}, "opt": {"a": 0.5, "b": "A"},
                                     "none": None, "messages": [{"role": "user", "name": "bob", "content": "hi"}]})
    # values that take no bytes in fields the worker skips (avro-c cannot read an array of records
    # without fields: it allocates 0 bytes for them and fails)
    empty = record("Job", [("id", "string"), ("nulls", {"type": "array", "items": "null"}),
                           ("empty", record("E", [])), ("prompt", "string"), ("max_tokens", "int")])
    resolver_seed("zero_size_items", empty, {"id": "z", "nulls": [None] * 3, "empty": {}, "prompt": "a prompt",
                                             "max_tokens": 1})
    # refused pairs (the Avro bytes are a current-schema job, for mutations that make the pair resolve)
    job_bytes = avro_encode(cur, full)
    refused = {
        "prompt_int": avsc("tests/consumer/schemas/job_prompt_int.avsc"),
        "no_max_tokens": record("Job", [("id", "string"), ("prompt", "string")]),
        "long_to_int": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "long")]),
        "nullable_id": record("Job", [("id", ["null", "string"]), ("prompt", "string"), ("max_tokens", "int")]),
        "double_to_float": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                          ("temperature", "double")]),
        "enum_tenant": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                      ("tenant", {"type": "enum", "name": "T", "symbols": ["a"]})]),
        "bytes_stop": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                     ("stop", {"type": "array", "items": "bytes"})]),
        "role_int": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                   ("messages", {"type": "array", "items": record("Message", [
                                       ("role", "int"), ("content", "string")])})]),
        "message_in_union": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                           ("messages", {"type": "array", "items": ["null", record("Message", [
                                               ("role", "string"), ("content", "string")])]})]),
        "no_content": record("Job", [("id", "string"), ("prompt", "string"), ("max_tokens", "int"),
                                     ("messages", {"type": "array", "items": record("Message", [
                                         ("role", "string")])})]),
        "result": record("Result", []),
        "string": '"string"',
        "unparsable": '{"type": "record", "name": ',
    }
    for name, schema in refused.items():
        resolver_seed("refused_" + name, schema, raw=job_bytes)


def main():
    resolver_seeds()
    write("job", "ids", confluent(1, job(prompt=[1, 2, 3, 4], stop_ids=[5])))
    write("job", "text", confluent(7, job(prompt="Hello world, 中文 😀", seed=42, stop=["\n\n", "end"],
                                          meta={"k": "v", "trace": "abc"}, deadline=1700000000000,
                                          reply="sluice.results.alt", temperature=0.7, top_p=0.9, top_k=40)))
    write("job", "bare", job(id="bare-1", prompt=[10, 20], max_tokens=3, logprobs=True, stream=True, priority=5))
    write("job", "chat", confluent(1, job(id="chat-1", prompt="", thinking=True,
                                          messages=[("system", "Be brief."), ("user", "Hi"),
                                                    ("assistant", "Hello", "thought"), ("user", "2+2?")])))
    write("job", "v1", confluent(1, job(id="old", prompt=[1, 2], v1=True)))
    write("job", "badid", confluent(1, job(id="X\0a", prompt=[1])))

    write("safetensors", "one", safetensors([("w", "F32", [2, 3], 24)]))
    write("safetensors", "many", safetensors([("a.weight", "BF16", [4, 2], 16), ("a.scale", "F8_E8M0", [4], 4),
                                              ("b", "I64", [1], 8), ("c", "F8_E4M3", [2, 2, 2, 2], 16),
                                              ("e", "F16", [0], 0), ("s", "I32", [], 4)],
                                             meta={"format": "pt"}))
    write("safetensors_index", "two", json.dumps({"metadata": {"total_size": 19}, "weight_map": {
        "a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}}).encode())
    write("safetensors_index", "one", json.dumps({"weight_map": {"c": "s2.safetensors"}}).encode())
    cfg_dir = os.path.join(ROOT, "tests", "data")
    for d in sorted(os.listdir(cfg_dir)):
        p = os.path.join(cfg_dir, d, "config.json")
        if os.path.exists(p):
            with open(p, "rb") as f:
                raw = json.loads(f.read())
            write("config", d, json.dumps(raw, separators=(",", ":")).encode())

    vocab = {c: i for i, c in enumerate(["H", "e", "l", "o", "Ġ", "w", "r", "d", "He", "ll", "Ġw", "llo"])}
    base = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 12, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [12], "tokens": ["<s>"]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": ["H e", "l l", "Ġ w", "ll o"]}}
    write("tokenizer_load", "bytelevel", json.dumps(base).encode())
    split = json.loads(json.dumps(base))
    split["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    split["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
    split["model"]["merges"] = [["H", "e"], ["l", "l"]]
    split["model"]["ignore_merges"] = True
    split["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "RobertaProcessing", "sep": ["<s>", 12], "cls": ["<s>", 12], "trim_offsets": True,
         "add_prefix_space": True}]}
    write("tokenizer_load", "split", json.dumps(split).encode())
    fb = json.loads(json.dumps(base))
    fb["model"]["byte_fallback"] = True
    fb["model"]["unk_token"] = "<unk>"
    fb["model"]["fuse_unk"] = True
    fb["model"]["vocab"].update({"<unk>": 13, "<0x41>": 14, "<0xE4>": 15})
    fb["pre_tokenizer"] = None
    fb["decoder"] = None
    fb["added_tokens"].append({"id": 16, "content": "ab", "single_word": True, "lstrip": True, "rstrip": True,
                               "normalized": True, "special": False})
    fb["post_processor"] = {"type": "BertProcessing", "sep": ["<s>", 12], "cls": ["<s>", 12]}
    write("tokenizer_load", "fallback", json.dumps(fb).encode())


if __name__ == "__main__":
    main()
