#!/usr/bin/env bash
# `make demo`: install deps if missing, build, start redis-server and the mock Kafka cluster on free
# loopback ports, run one sluice-worker on the tiny checkpoint (or MODEL=path, BACKEND=cpu|cuda), submit
# a few prompts with sluice-submit, print the results in submission order, stop everything this script
# started (by pid). The CUDA kernels are built only where a GPU is found or SLUICE_CUDA=ON asks for them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
TINY=$ROOT/tests/data/tiny-v4-public
MODEL=${MODEL:-$TINY}
BACKEND=${BACKEND:-cpu}
MAX_TOKENS=${MAX_TOKENS:-12}
PROMPTS=("The quick brown fox" "Kafka in, tokens out" "Hello, sluice" "2 + 2 =")

bash ops/install-deps.sh
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA="${SLUICE_CUDA:-AUTO}" > /dev/null
cmake --build "$BUILD" -j "$(nproc)" --target sluice-worker sluice-submit sluice-mock-kafka

RUN=$(mktemp -d /tmp/sluice-demo.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "demo: stopped; logs in $RUN"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no > "$RUN/redis.log" 2>&1 &
PIDS+=($!)
"$BUILD/consumer/sluice-mock-kafka" --partitions 4 > "$RUN/mock.out" 2> "$RUN/mock.err" &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$RUN/mock.out" ] && break; sleep 0.1; done
BROKERS=$(head -1 "$RUN/mock.out" | sed 's/^bootstrap.servers=//')
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
echo "demo: redis on 127.0.0.1:$REDIS_PORT, mock Kafka on $BROKERS, model $MODEL"

"$BUILD/consumer/sluice-worker" --set kafka.bootstrap.servers="$BROKERS" --set redis.url="redis://127.0.0.1:$REDIS_PORT" \
  --set model.path="$MODEL" --set engine.backend="$BACKEND" --set worker.id=demo-worker --set kafka.session.timeout.ms=6000 \
  > "$RUN/worker.out" 2> "$RUN/worker.err" &
WORKER=$!
PIDS+=($WORKER)
sleep 1
kill -0 "$WORKER" 2>/dev/null || { echo "demo: the worker did not start:"; cat "$RUN/worker.err"; exit 1; }

echo "demo: submitting ${#PROMPTS[@]} prompts (max_tokens=$MAX_TOKENS); the first result waits for the group assignment (~3 s)"
set +e
"$BUILD/consumer/sluice-submit" --brokers "$BROKERS" --max-tokens "$MAX_TOKENS" --timeout 60 "${PROMPTS[@]}" \
  > "$RUN/results.jsonl"
rc=$?
set -e
# sluice-submit prints results as they arrive (one JSON line each, kept in results.jsonl); its job ids end
# in the submission index, which puts them back in the order of PROMPTS here
python3 - "$RUN/results.jsonl" "$MODEL" "$TINY" "${PROMPTS[@]}" <<'PY'
import json, os, sys
path, model, tiny, prompts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
results = {}
for line in open(path, encoding="utf-8"):
    if line.strip():
        r = json.loads(line)
        results[int(r["id"].rsplit("-", 1)[1])] = r
print("demo: results in submission order")
for i, prompt in enumerate(prompts):
    r = results.get(i)
    print("  %d. prompt %s" % (i + 1, json.dumps(prompt, ensure_ascii=False)))
    if r is None:
        print("     no result")
        continue
    print("     %s %s, %d tokens in %.1f ms (queue %.1f ms): %s" % (
        r["status"], r["finish_reason"], len(r["tokens"]), r["engine_ms"], r["queue_ms"], r["tokens"]))
    # control characters escaped; U+FFFD (invalid UTF-8) shown as it is
    print("     text %s" % (json.dumps(r["text"], ensure_ascii=False) if r.get("text") is not None else "(none)"))
if os.path.realpath(model) == os.path.realpath(tiny):
    print("demo: the tiny model is a 4-layer test fixture with random weights, so its tokens are noise; it has no\n"
          "      tokenizer.json, so each token id is one byte and the text is those bytes as UTF-8 (invalid\n"
          "      sequences become U+FFFD). For real answers run a DeepSeek-V4 checkpoint on a GPU build:\n"
          "      MODEL=/path/to/DeepSeek-V4-Flash BACKEND=cuda make demo   (README: \"The engine\")")
PY
echo "demo: job state in Redis:"
for id in $(python3 -c 'import json,sys; ids = [json.loads(l)["id"] for l in open(sys.argv[1]) if l.strip()]
print("\n".join(sorted(ids, key=lambda i: int(i.rsplit("-", 1)[1]))))' "$RUN/results.jsonl"); do
  echo "  sluice:job:$id -> $(redis-cli -p "$REDIS_PORT" hget "sluice:job:$id" status)"
done
kill -TERM "$WORKER"
wait "$WORKER" && echo "demo: worker drained and exited 0"
[ "$rc" -eq 0 ] && echo "demo: all jobs succeeded" || { echo "demo: sluice-submit exit $rc"; exit "$rc"; }
