#!/usr/bin/env python3
"""make_normalizer_vectors.py — oracle vectors for the tokenizer's Unicode normalizers.

    python3 tests/tokenizer/make_normalizer_vectors.py > tests/data/tokenizer/normalizer.jsonl

Each line: {"s": text, "nfc": ..., "nfd": ..., "nfkc": ..., "nfkd": ...} with the forms from
Python's unicodedata.normalize (the oracle; its Unicode version is in the first line,
{"unidata_version": "14.0.0", "n": N}). Texts mix what normalization actually changes: Latin with
random combining marks in random order (canonical reordering), precomposed Latin, Vietnamese in
composed and decomposed spelling, Hangul conjoining jamo and syllables, CJK compatibility
ideographs, composition exclusions and singletons, Greek, Arabic, Devanagari, Hebrew
presentation forms, compatibility characters (ligatures, fullwidth, superscripts, circled,
half-width katakana), emoji with variation selectors, skin tones and ZWJ, and plain ASCII.
No added-token text ("<", "[" and "_" never appear): tests/tokenizer/test_normalizer.c checks
encode(tokenizer with NFC, s) == encode(tokenizer without normalizer, nfc) on these lines.
Deterministic (fixed seed).
"""
import json
import random
import sys
import unicodedata

COMBINING = list(range(0x300, 0x370)) + [0x1DC0, 0x1DC4, 0x20D0, 0x20D7, 0x0591, 0x05B0, 0x0653, 0x0654,
                                          0x0655, 0x093C, 0x094D, 0x3099, 0x309A]
LATIN_BASE = "aeiouycnsgzAEIOUYCNSGZwWhHtTrRlLkK"
PRECOMPOSED = [c for c in range(0xC0, 0x250) if c not in (0xD7, 0xF7)] + list(range(0x1E00, 0x1F00))
VIETNAMESE = ["Tiếng Việt", "người", "Nguyễn", "thường", "những", "được", "đẹp", "chữ Quốc ngữ",
              "hỏi ngã", "Hà Nội", "phở bò", "cảm ơn", "xin chào", "ưu tiên", "khuyến mãi"]
GREEK = "άέήίόύώΐΰϊϋ ΆΈΉΊΌΎΏ αβγδ ᾳ ῷ ἀ ἁ ὰ"
ARABIC = ["\u0627\u0653", "\u0627\u0654", "\u0648\u0654", "\u064a\u0654", "\u0627\u0655", "سلام عليكم"]
DEVANAGARI = ["\u0915\u093c", "\u0958", "\u0929", "\u0928\u093c", "हिन्दी", "\u09c7\u09be", "\u0b47\u0b3e"]
HEBREW_PF = [chr(c) for c in range(0xFB1D, 0xFB50) if unicodedata.category(chr(c)) != "Cn"]
SINGLETONS = ["\u212b", "\u2126", "\u212a", "\u0340", "\u0341", "\u0343", "\u0374", "\u037e", "\u0387",
              "\u1f71", "\u2000", "\u2001", "\u2329", "\u232a"]
COMPAT = (["\ufb01", "\ufb02", "\ufb00", "\u00b2", "\u00b3", "\u00b9", "\u00bd", "\u2460", "\u2473", "\u3392",
           "\u338f", "\u2122", "\u2163", "\u00aa", "\u00b5", "\u017f", "\u1e9b\u0323", "\u2024", "\u2025",
           "\u2026", "\u00a0", "\u2002", "\u3000", "\u00a8", "\u00b4", "\u02dc", "\u0132", "\u01c4", "\u1d2c"]
          + [chr(c) for c in range(0xFF01, 0xFF5F) if chr(c) not in "\uff1c\uff3b\uff3f"]
          + [chr(c) for c in range(0xFF66, 0xFF9F)])
CJK_COMPAT = ([chr(c) for c in range(0xF900, 0xFADA) if unicodedata.category(chr(c)) != "Cn"]
              + [chr(c) for c in range(0x2F800, 0x2FA1E)])
EMOJI = ["\u2764\ufe0f", "\u263a\ufe0f", "\u2639\ufe0e", "\u0031\ufe0f\u20e3", "\U0001f44d\U0001f3fd",
         "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466", "\U0001f3f3\ufe0f\u200d\U0001f308",
         "\U0001f1fb\U0001f1f3", "\U0001f600", "\u2728", "\u00a9\ufe0f", "\U0001f9d1\U0001f3ff\u200d\U0001f4bb"]
ASCII_WORDS = ["hello", "world", "the", "quick", "brown", "fox", "def f(x):", "return 42", "1234567",
               "  ", "\n", "\t", "foo.bar", "a,b;c", "(x)", "{y}", "x == y", "e"]


def hangul(rnd):
    kind = rnd.randrange(4)
    if kind == 0:                       # L V
        return chr(0x1100 + rnd.randrange(19)) + chr(0x1161 + rnd.randrange(21))
    if kind == 1:                       # L V T
        return chr(0x1100 + rnd.randrange(19)) + chr(0x1161 + rnd.randrange(21)) + chr(0x11A8 + rnd.randrange(27))
    if kind == 2:                       # LV syllable + T
        return chr(0xAC00 + 28 * rnd.randrange(399)) + chr(0x11A8 + rnd.randrange(27))
    return chr(0xAC00 + rnd.randrange(11172))


def decompose_some(s, rnd):
    return unicodedata.normalize("NFD", s) if rnd.random() < 0.5 else s


def piece(rnd):
    k = rnd.randrange(14)
    if k == 0:
        return rnd.choice(LATIN_BASE) + "".join(chr(rnd.choice(COMBINING)) for _ in range(rnd.randrange(1, 5)))
    if k == 1:
        return chr(rnd.choice(PRECOMPOSED))
    if k == 2:
        return decompose_some(rnd.choice(VIETNAMESE), rnd)
    if k == 3:
        return hangul(rnd)
    if k == 4:
        return rnd.choice(CJK_COMPAT)
    if k == 5:
        return decompose_some(rnd.choice(GREEK.split(" ")), rnd)
    if k == 6:
        return rnd.choice(ARABIC)
    if k == 7:
        return rnd.choice(DEVANAGARI)
    if k == 8:
        return rnd.choice(HEBREW_PF)
    if k == 9:
        return rnd.choice(SINGLETONS)
    if k == 10:
        return rnd.choice(COMPAT)
    if k == 11:
        return rnd.choice(EMOJI)
    if k == 12:                         # a mark with no base, or after a space
        return rnd.choice(["", " "]) + chr(rnd.choice(COMBINING))
    return rnd.choice(ASCII_WORDS)


def main():
    rnd = random.Random(20261130)
    texts = ["", "plain ascii only", "e\u0301", "\u00e9", "\u1100\u1161\u11a8", "\uf900", "\u212b",
             "a\u0323\u0302", "a\u0302\u0323", "\u1e9b\u0323", "\ufb01", "\u0958", "\u2764\ufe0f"]
    while len(texts) < 600:
        n = rnd.randrange(1, 12)
        texts.append((" " if rnd.random() < 0.5 else "").join(piece(rnd) for _ in range(n)))
    for t in texts:
        for f in ("NFC", "NFD", "NFKC", "NFKD"):
            assert not any(c in unicodedata.normalize(f, t) for c in "<[_"), t
    out = sys.stdout
    out.write(json.dumps({"unidata_version": unicodedata.unidata_version, "n": len(texts)}) + "\n")
    for t in texts:
        row = {"s": t}
        for f in ("NFC", "NFD", "NFKC", "NFKD"):
            row[f.lower()] = unicodedata.normalize(f, t)
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
