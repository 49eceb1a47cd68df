"""The worker on a real tokenizer.json: a copy of tiny-v4-public (links to its config and weights) in a temp
dir plus a hand-written byte-level BPE tokenizer.json whose 256 ids are NOT the raw byte values (GPT-2's
bytes_to_unicode order, printable bytes first; id 1 = <bos> special, added by a TemplateProcessing post-
processor; id 2 = <eos> special = the model's EOS; bytes FE/FF, never in UTF-8, are left out). Checks, for text
prompts with multi-byte characters: the prompt ids are the tokenizer's (sluice-tokenize, usage.prompt_tokens,
and the engine fed those ids gives the worker's tokens, while raw bytes give different ones); Result.tokens ==
`sluice-generate --model TMP --prompt TEXT` for the same seed; Result.text == sluice-generate's text ==
`sluice-tokenize --decode` of the tokens without the specials; a stop string spanning tokens cuts the text;
streamed chunk texts add up to Result.text even with a stop string; token-id prompts still work; a broken
tokenizer.json stops the worker at start with an error."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import harness as h

BOS, EOS = 1, 2


def bytes_to_unicode():
    """GPT-2's byte -> printable character map, in its order (printable bytes first)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def make_model_dir():
    d = tempfile.mkdtemp(prefix="sluice-tok-model-")
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(h.MODEL, f), os.path.join(d, f))
    free_ids = [0] + list(range(3, 256))
    byte_id, vocab = {}, {"<bos>": BOS, "<eos>": EOS}
    for (b, ch) in [x for x in bytes_to_unicode() if x[0] not in (0xFE, 0xFF)]:
        byte_id[b] = free_ids[len(byte_id)]
        vocab[ch] = byte_id[b]
    assert len(vocab) == 256 and sorted(vocab.values()) == list(range(256))
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(BOS, "<bos>"), special(EOS, "<eos>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [BOS], "tokens": ["<bos>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    return d, byte_id


def tokenize(model_dir, mode, lines):
    out = subprocess.run([h.prog("sluice-tokenize"), "--tokenizer", os.path.join(model_dir, "tokenizer.json"), mode],
                         input="".join(json.dumps(x) + "\n" for x in lines), check=True, capture_output=True,
                         text=True).stdout
    return h.json_lines(out)


def rand_text(rnd):
    pieces = ["the", " ", "cat", "é", "中文", "😀", "42", ",", "Привет", "\n", "x", "ß", "!"]
    return "".join(rnd.choice(pieces) for _ in range(rnd.randint(2, 10)))


def test(make):
    model_dir, byte_id = make_model_dir()
    try:
        run(make, model_dir, byte_id)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def run(make, model_dir, byte_id):
    rnd = random.Random()
    uid = "%06x" % rnd.getrandbits(24)
    env = make("tokenizer")
    w = env.start_worker("w-tok", **{"model.path": model_dir})

    prompts = [rand_text(rnd) for _ in range(6)]
    want_ids = [[BOS] + [byte_id[b] for b in p.encode()] for p in prompts]
    # the tokenizer is the one we wrote (no specials added by --encode)
    assert tokenize(model_dir, "--encode", prompts) == [ids[1:] for ids in want_ids]

    jobs, refs = [], {}
    differs = 0
    for i, p in enumerate(prompts):
        kw = {"temperature": 0.8, "seed": rnd.getrandbits(62)} if i % 2 else {}
        if i < 2:
            kw["ignore_eos"] = True
        ref = h.generate(p, 24, model=model_dir, **kw)
        assert ref["n_prompt"] == len(want_ids[i]), (ref["n_prompt"], want_ids[i])
        # the engine fed the tokenizer's ids gives the same; fed the raw bytes, (usually) not
        same = h.generate(want_ids[i], 24, model=model_dir, **kw)
        assert same["tokens"] == ref["tokens"]
        raw = h.generate(list(p.encode()), 24, **kw)
        differs += raw["tokens"] != ref["tokens"]
        j = h.job_record("tok-%d-%s" % (i, uid), p, 24, stream=(i == 3), **kw)
        jobs.append(j)
        refs[j["id"]] = (ref, want_ids[i])
    assert differs >= 1, "raw bytes and the tokenizer's ids gave the same outputs for every prompt"

    # a stop string spanning tokens: two characters of a greedy continuation (after its first one)
    for attempt in range(30):
        p = rand_text(rnd)
        sref = h.generate(p, 32, model=model_dir, ignore_eos=True)
        t = sref["text"]
        cand = [k for k in range(1, len(t) - 1) if "\ufffd" not in t[k:k + 2]]
        if cand:
            break
    assert cand, "no usable continuation for the stop-string job"
    k = cand[0]
    stop = t[k:k + 2]
    j_stop = h.job_record("tokstop-" + uid, p, 32, ignore_eos=True, stop=[stop], stream=True)
    j_ids = h.job_record("tokids-" + uid, want_ids[0], 24, ignore_eos=True)
    env.wait_assigned(w)
    env.produce([(j["id"].encode(), h.encode_job(j)) for j in jobs + [j_stop, j_ids]])
    res = env.results([j["id"] for j in jobs + [j_stop, j_ids]], timeout=60)

    for j in jobs:
        r = res[j["id"]][0]
        ref, ids = refs[j["id"]]
        assert r["status"] == "OK", r
        assert r["tokens"] == ref["tokens"], (j["id"], r["tokens"], ref["tokens"])
        assert r["usage"]["prompt_tokens"] == len(ids), (r["usage"], len(ids))
        assert r["text"] == ref["text"], (r["text"], ref["text"])
        plain = [x for x in r["tokens"] if x not in (BOS, EOS)]
        assert r["text"] == tokenize(model_dir, "--decode", [plain])[0], r["text"]
    # the token-id prompt: same tokens as the text prompt it spells
    r = res[j_ids["id"]][0]
    assert r["tokens"] == res[jobs[0]["id"]][0]["tokens"] and r["text"] == res[jobs[0]["id"]][0]["text"], r
    # the stop string: text cut where it starts, tokens up to the one that completed it
    r = res[j_stop["id"]][0]
    cut = t.index(stop)
    assert r["finish_reason"] == "STOP" and r["text"] == t[:cut], (r["text"], t, stop)
    n = len(r["tokens"])
    assert r["tokens"] == sref["tokens"][:n], (r["tokens"], sref["tokens"])
    # Result.text skips specials (a generated <bos> gives no text), so decode the same way here
    nospec = lambda ids: [x for x in ids if x not in (BOS, EOS)]
    full = tokenize(model_dir, "--decode", [nospec(r["tokens"]), nospec(r["tokens"][:-1])])
    assert stop in full[0] and stop not in full[1], (full, stop)   # the last token completed it
    # streamed chunks add up to the Result's text (nothing of the stop string leaked)
    for j in (jobs[3], j_stop):
        chunks = [h.avro_decode(h.CHUNK_SCHEMA, m.value()[5:]) for m in env.read_all(
            "sluice.chunks", until=lambda ms: any(h.avro_decode(h.CHUNK_SCHEMA, m.value()[5:])["done"]
                                                   for m in ms if m.key() == j["id"].encode()), timeout=20, idle=0.3)
            if m.key() == j["id"].encode()]
        assert chunks and chunks[-1]["done"], chunks
        rr = res[j["id"]][0]
        assert sum((c["tokens"] for c in chunks), []) == rr["tokens"]
        assert "".join(c["text"] or "" for c in chunks) == rr["text"], ([c["text"] for c in chunks], rr["text"])
    # a tokenizer.json that is there but broken: the worker refuses to start, naming the problem
    with open(os.path.join(model_dir, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "WordPiece"')
    bad = env.start_worker("w-bad", **{"model.path": model_dir})
    assert bad.wait(timeout=60) != 0
    err = open(bad.errpath).read()
    assert "tokenizer.json" in err or "JSON" in err, err
    h.log("tokenizer.json prompts: %d jobs, tokens and text equal sluice-generate / sluice-tokenize; raw bytes "
          "differ for %d of %d prompts; stop %r cut at %d" % (len(jobs) + 2, differs, len(prompts), stop, cut))


if __name__ == "__main__":
    sys.exit(h.main(test))
