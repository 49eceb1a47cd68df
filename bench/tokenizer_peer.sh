#!/usr/bin/env bash
# tokenizer_peer.sh — encode throughput, one core: sluice's C tokenizer vs the Rust `tokenizers`
# library (python binding, TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1, pinned to one core),
# same tokenizer.json, same 10 MB mixed text, one run on one machine. Also checks that both give
# the same ids for every line. Writes a JSON summary to $1 (default bench/results/tokenizer.json).
#
#   bench/tokenizer_peer.sh [OUT.json]
# Needs gcc, python3 with `tokenizers`, and Oniguruma + jansson + libunistring headers: when /usr/include lacks
# them, .debs/*.deb (apt-get download libonig5 libonig-dev libjansson4 libjansson-dev libunistring2
# libunistring-dev) are
# unpacked into /tmp/tokdeps and used.
set -euo pipefail
cd "$(dirname "$0")/.."
OUTJ=${1:-bench/results/tokenizer.json}
TOK=tests/data/tokenizer/tokenizer.json
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

source bench/device_deps.sh   # INC / LIBS for gcc
# the same flags as the CMake Release build
gcc -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iengine "${INC[@]}" \
    engine/tokenizer.c engine/tokenizer_load.c engine/tokenizer_decode.c engine/cli/sluice_tokenize.c \
    "${LIBS[@]}" -lonig -ljansson -lunistring -lpthread -o "$W/sluice-tokenize"

python3 tests/tokenizer/make_vectors.py --bench-text "$W/bench.txt" --mb 10
CPU_C=${CPU_C:-2} CPU_R=${CPU_R:-3}
taskset -c "$CPU_C" "$W/sluice-tokenize" --tokenizer "$TOK" --bench "$W/bench.txt" --repeat 3 | tee "$W/c.json"
TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 taskset -c "$CPU_R" \
  python3 tests/tokenizer/make_vectors.py --bench-rust "$TOK" "$W/bench.txt" | tee "$W/rust.json"

# same ids for every line (C --encode on JSON lines vs Rust encode_batch)
python3 - "$W" "$TOK" <<'EOF'
import json, os, subprocess, sys
w, tok = sys.argv[1], sys.argv[2]
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer
t = Tokenizer.from_file(tok)
lines = open(f"{w}/bench.txt", encoding="utf-8", newline="").read().split("\n")[:-1]
inp = "".join(json.dumps(l) + "\n" for l in lines).encode()
r = subprocess.run([f"{w}/sluice-tokenize", "--tokenizer", tok, "--encode"], input=inp, capture_output=True, check=True)
got = [json.loads(x) for x in r.stdout.decode().split("\n")[:-1]]
exp = [e.ids for e in t.encode_batch(lines, add_special_tokens=False)]
bad = sum(1 for a, b in zip(got, exp) if a != b) + abs(len(got) - len(exp))
json.dump({"lines": len(exp), "lines_with_other_ids": bad}, open(f"{w}/same.json", "w"))
print("same ids:", len(exp) - bad, "of", len(exp), "lines")
EOF

python3 - "$W" "$OUTJ" <<'EOF'
import json, platform, subprocess, sys
w, out = sys.argv[1], sys.argv[2]
c, r, same = (json.load(open(f"{w}/{n}.json")) for n in ("c", "rust", "same"))
peer = max((k for k in ("encode_batch_fast", "encode_batch", "encode") if k in r), key=lambda k: r[k]["MBps"])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
res = {
    "what": "encode throughput, one core, 10 MB mixed text (code, licences, docs, multilingual prose, emoji, "
            "random Unicode), one document per line, no special tokens added",
    "command": "bench/tokenizer_peer.sh (on the GPU machine: nvidia-h200; C pinned to one core with taskset, "
               "Rust tokenizers via python with TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 pinned to another)",
    "tokenizer": "tests/data/tokenizer/tokenizer.json (16k byte-level BPE, DeepSeek-V3 pre-tokenizer)",
    "cpu": cpu, "bytes": c["bytes"], "lines": c["lines"],
    "sluice_c": {"MBps": c["MBps"], "best_seconds": c["best_seconds"], "tokens": c["tokens"], "runs": c["runs"]},
    "rust_tokenizers": {"version": r["tokenizers"], "peer_method": peer,
                        **{k: r[k] for k in ("encode_batch_fast", "encode_batch", "encode") if k in r}},
    "speedup_vs_peer": round(c["MBps"] / r[peer]["MBps"], 2),
    "goal": ">= 1.5x the peer",
    "same_ids": same,
}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({"C_MBps": c["MBps"], "peer": peer, "peer_MBps": r[peer]["MBps"], "speedup": res["speedup_vs_peer"],
                  "same_ids": same}))
EOF
