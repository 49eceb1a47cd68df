#!/usr/bin/env python3
"""make_vectors.py — reference vectors for sluice's C tokenizer, made with HF `tokenizers`.

Run once on a machine whose python3 has `tokenizers` (the GPU machine does):

    python3 tests/tokenizer/make_vectors.py --out DIR

It trains a byte-level BPE (16k vocab) with a DeepSeek-V3-style pre-tokenizer (Split on the
DeepSeek regexes for digits / CJK / letters+punctuation, then ByteLevel without its own regex) on a
corpus found on that machine (python stdlib sources, licence texts, package docs) plus generated
multilingual text, adds special tokens, and writes into DIR:

    tokenizer.json        the trained tokenizer (DeepSeek-like: normalizer Sequence[], ByteLevel
                          post-processor and decoder)
    variants.json         {name: {component: json, ...}} components that replace the base ones
                          (other Split behaviours, ByteLevel with regex/prefix space, templates, ...)
    vectors.jsonl.gz      one JSON object a line:
                          {"kind":"encode","variant":V|null,"add_special":B,"text":S,"ids":[...]}
                          {"kind":"decode","ids":[...],"text":S}   (skip_special_tokens=False)
                          {"kind":"pre","text":S,"pieces":[...]}  (base pre_tokenize_str, debugging)

Other modes (benchmark):
    make_vectors.py --bench-text PATH [--mb 10]       write the mixed benchmark text, one line per doc
    make_vectors.py --bench-rust TOKENIZER.json PATH  time Rust `tokenizers` (single thread) on it
"""
import argparse
import glob
import gzip
import json
import os
import random
import sys
import sysconfig
import time

SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]

# DeepSeek-V3's pre-tokenizer regexes (tokenizer.json of deepseek-ai/DeepSeek-V3)
RE_DIGITS = r"\p{N}{1,3}"
RE_CJK = "[一-龥\u3040-ゟ゠-ヿ]+"
RE_MAIN = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
           r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

MULTI = {
    "zh": ["我们今天去公园散步，天气非常好。", "机器学习模型需要大量的数据进行训练。", "这个函数返回一个列表，其中包含所有的结果。",
           "北京是中华人民共和国的首都，有三千多年的历史。", "请把文件保存到服务器上，然后重新启动程序。"],
    "ja": ["今日はとても良い天気ですね。", "東京タワーは高さ三百三十三メートルです。", "プログラムを実行する前に設定ファイルを確認してください。",
           "ひらがなとカタカナと漢字を組み合わせて書きます。", "コンピューターサイエンスの勉強はおもしろい。"],
    "ko": ["안녕하세요, 만나서 반갑습니다.", "서울은 대한민국의 수도입니다.", "이 프로그램은 데이터를 처리합니다."],
    "ar": ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية هي لغة جميلة وغنية.", "يعمل هذا البرنامج على معالجة البيانات بسرعة.",
           "القاهرة هي عاصمة جمهورية مصر العربية."],
    "he": ["שלום עולם, מה שלומך?", "ירושלים היא עיר עתיקה."],
    "ru": ["Привет, мир! Как дела?", "Москва — столица Российской Федерации.", "Эта функция возвращает список всех значений."],
    "el": ["Γειά σου Κόσμε! Τι κάνεις;", "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας."],
    "hi": ["नमस्ते दुनिया, आप कैसे हैं?", "भारत एक विशाल देश है जिसकी संस्कृति बहुत पुरानी है।"],
    "th": ["สวัสดีชาวโลก วันนี้อากาศดีมาก", "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย"],
    "de": ["Größenwahn ist keine Lösung, aber Übung macht den Meister.", "Die Straße führt über die Brücke."],
    "fr": ["L'été dernier, nous sommes allés à la plage près de Nice.", "Ça coûte vingt-cinq euros, s'il vous plaît."],
    "es": ["¿Dónde está la biblioteca? ¡Está allí!", "El niño comió una manzana en el jardín."],
    "vi": ["Tiếng Việt có nhiều dấu thanh điệu khác nhau.", "Hà Nội là thủ đô của Việt Nam."],
}
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇫🇷", "1️⃣", "❤️", "🧑‍💻", "👩🏿‍🚀", "🐍", "✅", "🔥", "🤖",
         "😂😂😂", "🙏🏻", "👁️‍🗨️", "🏴‍☠️", "🐕‍🦺"]
# Blocks assigned long ago (stable across Unicode versions): no surrogates, no noncharacters.
BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE5B), (0x1100, 0x11FF), (0x2000, 0x206F), (0x20A0, 0x20B5),
          (0x2100, 0x218F), (0x2190, 0x23FF), (0x2500, 0x27BF), (0x3000, 0x30FF), (0x3400, 0x4DB5),
          (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F),
          (0x10000, 0x1007F), (0x1D400, 0x1D7FF), (0x300, 0x36F)]
WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c", "\u2003", "\u200b", " \n "]


def find_corpus(limit_bytes):
    """Text found on this machine: python stdlib sources, licence texts, package docs."""
    files = []
    stdlib = sysconfig.get_paths()["stdlib"]
    files += sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True))
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    for sp in sorted(set(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))):
        for ext in ("md", "rst", "txt"):
            files += sorted(glob.glob(os.path.join(sp, "**", "*." + ext), recursive=True))[:400]
    rng = random.Random(1)
    rng.shuffle(files)
    docs, total = [], 0
    for f in files:
        try:
            with open(f, "r", encoding="utf-8") as fh:
                t = fh.read(200000)
        except (OSError, UnicodeDecodeError):
            continue
        if not t.strip():
            continue
        docs.append(t)
        total += len(t)
        if total >= limit_bytes:
            break
    return docs


def multilingual(rng, n):
    out = []
    langs = list(MULTI)
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            lang = rng.choice(langs)
            parts.append(rng.choice(MULTI[lang]))
            if rng.random() < 0.2:
                parts.append(rng.choice(EMOJI))
            if rng.random() < 0.2:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
        out.append(rng.choice([" ", "\n", "", " "]).join(parts))
    return out


def rand_unicode(rng, n):
    s = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            s.append(rng.choice(WS))
        elif r < 0.25:
            s.append(rng.choice(EMOJI))
        else:
            lo, hi = rng.choice(BLOCKS)
            s.append(chr(rng.randint(lo, hi)))
    return "".join(s)


def test_strings(rng, docs, added):
    S = ["", " ", "  ", "\n", "\t", "a", "0", "1234567", "hello world", "Hello, World!", "\x00", "a\x00b",
         "\x00\x00 \x00", "don't you're I'll we've he'd she's it'm", "   leading", "trailing   ", "a  b   c    d",
         "\r\n\r\n", " \n \n", "ĠHello", "Ġ", "Ċ", "<｜User｜>", "<｜User｜>hi<｜Assistant｜>", "<｜User", "｜User｜>",
         "<tag>ab<tag>a<tag>", "[WORD] x[WORD] [WORD]y [WORD]", "a <mask> b", "a   <mask>b", "<rs>   x", "x<rs>\n\ny",
         "hello_world", "say hello_world!", "<|fim|>def f(): pass", "１２３４５", "٣٤٥٦", "12345678901234567890",
         "3.14159 2,718 1e10 0x1F", "e\u0301", "ﬁ ligature", "Ωmega", "\ufeffBOM", "\u200d", "👨‍👩‍👧‍👦👨‍👩‍👧‍👦",
         "🏳️‍🌈 flag", "a\u0300\u0301\u0302b", "tab\tseparated\tvalues", "def f(x):\n    return x * 2\n",
         "    \n    \n", "x" * 300, "ab" * 200, "\u3000\u3000全角", "😀" * 50, "<｜begin▁of▁sentence｜>" * 3]
    S += [rng.choice(["<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"]) + m for m in MULTI["zh"]]
    # ASCII prose and code: slices of the corpus
    for _ in range(500):
        d = rng.choice(docs)
        i = rng.randrange(max(1, len(d)))
        S.append(d[i:i + rng.choice([10, 40, 100, 300, 1000])])
    # whitespace runs
    for _ in range(150):
        S.append("".join(rng.choice(WS + ["x", "ab", "1", "."]) for _ in range(rng.randint(1, 40))))
    # digits
    for _ in range(150):
        k = rng.randint(1, 25)
        t = "".join(rng.choice("0123456789") for _ in range(k))
        S.append(rng.choice(["", " ", "x", "$", "(", "v"]) + t + rng.choice(["", " ", ".", "px", "%", "１２", "٣"]))
    # multilingual sentences, CJK, Arabic, emoji and ZWJ sequences
    S += multilingual(rng, 300)
    for _ in range(100):
        S.append("".join(rng.choice(EMOJI + [" ", "a", "中", "\u200d", "\ufe0f"]) for _ in range(rng.randint(1, 15))))
    # random code points from many blocks
    for _ in range(400):
        S.append(rand_unicode(rng, rng.randint(1, 80)))
    # special tokens inside text
    for _ in range(250):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(added))
            elif r < 0.7:
                d = rng.choice(docs)
                i = rng.randrange(max(1, len(d)))
                parts.append(d[i:i + rng.randint(0, 30)])
            else:
                parts.append(rand_unicode(rng, rng.randint(0, 8)))
        S.append(rng.choice(["", " ", "  ", "\n"]).join(parts))
    # big strings: ~100 KB each, plus pathological single pre-tokens
    big = []
    for kind in range(3):
        parts, size = [], 0
        while size < 100000:
            if kind == 0:
                d = rng.choice(docs)
                i = rng.randrange(max(1, len(d)))
                p = d[i:i + 2000]
            elif kind == 1:
                p = " ".join(multilingual(rng, 3)) + rng.choice(EMOJI)
            else:
                p = rand_unicode(rng, 200)
            parts.append(p)
            size += len(p.encode("utf-8"))
        big.append("".join(parts))
    big += ["a" * 20000, "1" * 5000, " " * 30000, "\n" * 5000, "ab" * 10000]
    return S, big


def added_tokens_json(tok_json):
    return [a["content"] for a in tok_json["added_tokens"]]


def make(out):
    from tokenizers import Tokenizer, Regex, AddedToken, models, trainers, pre_tokenizers, decoders
    from tokenizers import processors, normalizers
    rng = random.Random(1234)
    t0 = time.time()
    docs = find_corpus(12_000_000)
    train = docs + multilingual(rng, 20000) + [rand_unicode(rng, 200) for _ in range(3000)]
    print(f"corpus: {len(docs)} files, {sum(len(d) for d in docs)} chars; found in {time.time()-t0:.1f}s",
          flush=True)

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(RE_DIGITS), "isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_CJK), "isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_MAIN), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=16000, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train, trainer=trainer)
    print(f"trained in {time.time()-t0:.1f}s, vocab {tok.get_vocab_size()}", flush=True)
    tok.add_special_tokens([AddedToken("<|fim|>", special=True, normalized=False),
                            AddedToken("<tag>", special=True, normalized=False),
                            AddedToken("<tag>ab", special=True, normalized=False),
                            AddedToken("[WORD]", special=True, single_word=True, normalized=False),
                            AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                            AddedToken("<rs>", special=True, rstrip=True, normalized=True)])
    tok.add_tokens([AddedToken("hello_world", special=False, normalized=True)])
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    base = json.loads(tok.to_str())
    added = added_tokens_json(base)

    # Variants: replace components of the base file
    def comp(pre=None, post=None):
        t = Tokenizer.from_str(tok.to_str())
        d = {}
        if pre is not None:
            t.pre_tokenizer = pre
            d["pre_tokenizer"] = json.loads(t.to_str())["pre_tokenizer"]
        if post is not None:
            t.post_processor = post
            d["post_processor"] = json.loads(t.to_str())["post_processor"]
        return d

    BL = pre_tokenizers.ByteLevel
    SP = pre_tokenizers.Split
    bos_id = tok.token_to_id(SPECIAL[0])
    eos_id = tok.token_to_id(SPECIAL[1])
    variants = {
        "gpt2": comp(pre=BL(add_prefix_space=True, use_regex=True)),
        "gpt2_noprefix": comp(pre=BL(add_prefix_space=False, use_regex=True)),
        "removed": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"\s+"), "removed"), BL(add_prefix_space=False, use_regex=False)])),
        "merged_prev": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"\p{P}"), "merged_with_previous"),
                                                         BL(add_prefix_space=False, use_regex=True)])),
        "merged_next": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"\s"), "merged_with_next"),
                                                         BL(add_prefix_space=True, use_regex=False)])),
        "contiguous": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"\p{N}|[.,]"), "contiguous"),
                                                        BL(add_prefix_space=False, use_regex=False)])),
        "invert": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"\p{L}+"), "isolated", invert=True),
                                                    SP(" ", "removed"), SP(".", "isolated"),
                                                    BL(add_prefix_space=False, use_regex=False)])),
        "invert_merged": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"[aeiou]"), "merged_with_next", invert=True),
                                                           BL(add_prefix_space=False, use_regex=False)])),
        "empty_matches": comp(pre=pre_tokenizers.Sequence([SP(Regex(r"x*"), "merged_with_previous"),
                                                           SP(Regex(r"\b"), "contiguous"),
                                                           SP(Regex(r"$"), "isolated"),
                                                           BL(add_prefix_space=False, use_regex=False)])),
        "template": comp(post=processors.TemplateProcessing(
            single=f"{SPECIAL[0]} $A {SPECIAL[1]}", pair=f"{SPECIAL[0]} $A {SPECIAL[1]} $B:1 {SPECIAL[1]}:1",
            special_tokens=[(SPECIAL[0], bos_id), (SPECIAL[1], eos_id)])),
        "seq_post": comp(post=processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                                   processors.TemplateProcessing(
                                                       single=f"{SPECIAL[0]} $A",
                                                       special_tokens=[(SPECIAL[0], bos_id)])])),
    }
    variants["ignore_merges"] = {"model_flags": {"ignore_merges": True}}
    with open(os.path.join(out, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(variants, f, ensure_ascii=False, indent=1)

    strings, big = test_strings(rng, docs, added)
    lines = []
    n_enc = n_dec = 0
    for s in strings + big:
        ids = tok.encode(s, add_special_tokens=False).ids
        lines.append({"kind": "encode", "variant": None, "add_special": False, "text": s, "ids": ids})
        n_enc += 1
        if len(s) < 2000:
            pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)]
            lines.append({"kind": "pre", "text": s, "pieces": pieces})
        dec = tok.decode(ids, skip_special_tokens=False)
        lines.append({"kind": "decode", "ids": ids, "text": dec})
        n_dec += 1
    # with special tokens added (ByteLevel post-processor adds nothing)
    for s in strings[:100]:
        lines.append({"kind": "encode", "variant": None, "add_special": True, "text": s,
                      "ids": tok.encode(s, add_special_tokens=True).ids})
        n_enc += 1
    for name, over in variants.items():
        d = json.loads(tok.to_str())
        for k, v in over.items():
            if k == "model_flags":
                d["model"].update(v)
            else:
                d[k] = v
        vt = Tokenizer.from_str(json.dumps(d))
        sub = strings[:60] + rng.sample(strings, 240)
        for s in sub:
            for add in ((False, True) if name in ("template", "seq_post") else (False,)):
                lines.append({"kind": "encode", "variant": name, "add_special": add, "text": s,
                              "ids": vt.encode(s, add_special_tokens=add).ids})
                n_enc += 1
    # decode: random id sequences, many producing invalid UTF-8
    vocab = tok.get_vocab(with_added_tokens=True)
    nvocab = max(vocab.values()) + 1
    b2u = bytes_to_unicode()
    u2b = {v: k for k, v in b2u.items()}
    partial = [i for t, i in vocab.items() if all(c in u2b for c in t)
               and not valid_utf8(bytes(u2b[c] for c in t))]
    added_ids = [vocab[a] for a in added]
    for _ in range(600):
        ids = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            if r < 0.5:
                ids.append(rng.randrange(nvocab))
            elif r < 0.85:
                ids.append(rng.choice(partial))
            elif r < 0.95:
                ids.append(rng.choice(added_ids))
            else:
                ids.append(nvocab + rng.randrange(1000))
        lines.append({"kind": "decode", "ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
        n_dec += 1
    lines.append({"kind": "decode", "ids": [], "text": tok.decode([], skip_special_tokens=False)})
    with gzip.open(os.path.join(out, "vectors.jsonl.gz"), "wt", encoding="utf-8", compresslevel=9) as f:
        for l in lines:
            f.write(json.dumps(l, ensure_ascii=False) + "\n")
    import tokenizers
    meta = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0], "encode": n_enc,
            "decode": n_dec, "vocab": nvocab, "partial_utf8_tokens": len(partial),
            "seconds": round(time.time() - t0, 1)}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(json.dumps(meta), flush=True)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def bench_text(path, mb):
    """Mixed text: corpus slices (code, licences, docs), multilingual prose, random Unicode."""
    rng = random.Random(99)
    docs = find_corpus(30_000_000)
    out, size = [], 0
    while size < mb * 1_000_000:
        r = rng.random()
        if r < 0.6:
            d = rng.choice(docs)
            i = rng.randrange(max(1, len(d)))
            p = d[i:i + rng.randint(200, 3000)]
        elif r < 0.9:
            p = " ".join(multilingual(rng, rng.randint(1, 8)))
        else:
            p = rand_unicode(rng, rng.randint(20, 400))
        # one document per line: escape line breaks (python's text mode would also split at \r)
        p = p.replace("\r", "\\r").replace("\n", "\\n")
        out.append(p)
        size += len(p.encode("utf-8")) + 1
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(out) + "\n")
    print(f"bench text: {len(out)} lines, {size} bytes")


def bench_rust(tok_path, text_path):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    import tokenizers
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    with open(text_path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    nbytes = sum(len(l.encode("utf-8")) for l in lines)
    res = {"tokenizers": tokenizers.__version__, "lines": len(lines), "bytes": nbytes}
    for name in ("encode_batch_fast", "encode_batch", "encode"):
        if name != "encode" and not hasattr(tok, name):
            continue
        best, ntok = None, 0
        for _ in range(2):
            t0 = time.perf_counter()
            if name == "encode":
                encs = [tok.encode(l, add_special_tokens=False) for l in lines]
            else:
                encs = getattr(tok, name)(lines, add_special_tokens=False)
            dt = time.perf_counter() - t0
            ntok = sum(len(e.ids) for e in encs)
            best = dt if best is None else min(best, dt)
        res[name] = {"seconds": round(best, 4), "MBps": round(nbytes / best / 1e6, 3), "tokens": ntok}
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--bench-text")
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--bench-rust", nargs=2, metavar=("TOKENIZER", "TEXT"))
    a = ap.parse_args()
    if a.bench_text:
        bench_text(a.bench_text, a.mb)
    elif a.bench_rust:
        bench_rust(*a.bench_rust)
    elif a.out:
        os.makedirs(a.out, exist_ok=True)
        make(a.out)
    else:
        ap.error("one of --out, --bench-text, --bench-rust")
