#!/usr/bin/env python3
"""Seeds for the fuzz corpora (tests/fuzz/corpus/<target>): a few
well-formed inputs per target that reach deep into the parser, from which libFuzzer mutates.
Job messages are Avro written by hand (schemas/job.avsc, field order), so no Avro package is needed.
    python3 tests/fuzz/make_seeds.py    (from the repository root; overwrites seed_* files only)
"""
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


def main():
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
