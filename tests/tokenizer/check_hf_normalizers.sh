#!/usr/bin/env bash
# check_hf_normalizers.sh — on a machine with the `tokenizers` library (the GPU machine): the Rust
# library's NFC/NFD/NFKC/NFKD normalizers against tests/data/tokenizer/normalizer.jsonl (made with
# Python's unicodedata), and whole encodes of those strings with an NFC variant of
# tests/data/tokenizer/tokenizer.json, HF vs sluice-tokenize. Prints a summary; exit 1 on a mismatch.
#   tests/tokenizer/check_hf_normalizers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
source bench/device_deps.sh   # INC / LIBS for gcc
gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iengine "${INC[@]}" engine/tokenizer*.c \
    engine/cli/sluice_tokenize.c "${LIBS[@]}" -lonig -ljansson -lunistring -lpthread -o "$W/sluice-tokenize"
TOKENIZERS_PARALLELISM=false python3 - "$W" <<'PY'
import json, subprocess, sys
from tokenizers import Tokenizer, normalizers
import tokenizers
w = sys.argv[1]
recs = [json.loads(l) for l in open("tests/data/tokenizer/normalizer.jsonl", encoding="utf-8")][1:]
forms = {"nfc": normalizers.NFC(), "nfd": normalizers.NFD(), "nfkc": normalizers.NFKC(), "nfkd": normalizers.NFKD()}
bad = {k: sum(1 for r in recs if n.normalize_str(r["s"]) != r[k]) for k, n in forms.items()}
print("tokenizers", tokenizers.__version__, "normalizer mismatches vs unicodedata vectors:", bad, "of", len(recs))
j = json.load(open("tests/data/tokenizer/tokenizer.json", encoding="utf-8"))
j["normalizer"] = {"type": "NFC"}
p = f"{w}/nfc.json"
json.dump(j, open(p, "w", encoding="utf-8"), ensure_ascii=False)
t = Tokenizer.from_file(p)
exp = [e.ids for e in t.encode_batch([r["s"] for r in recs], add_special_tokens=False)]
inp = "".join(json.dumps(r["s"]) + "\n" for r in recs).encode()
out = subprocess.run([f"{w}/sluice-tokenize", "--tokenizer", p, "--encode"], input=inp, capture_output=True, check=True)
got = [json.loads(x) for x in out.stdout.decode().split("\n")[:-1]]
diff = sum(1 for a, b in zip(got, exp) if a != b) + abs(len(got) - len(exp))
print("NFC tokenizer encode, HF vs sluice-tokenize:", len(exp) - diff, "of", len(exp), "identical")
sys.exit(1 if diff or any(bad.values()) else 0)
PY
