#!/usr/bin/env bash
# `make demo`: install deps if missing, build, start redis-server and the mock Kafka cluster on free
# loopback ports, run one sluice-worker on the tiny checkpoint (or MODEL=path), submit a few prompts
# with sluice-submit, print the results, stop everything this script started (by pid).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
MODEL=${MODEL:-$ROOT/tests/data/tiny-v4-public}
MAX_TOKENS=${MAX_TOKENS:-12}

bash ops/install-deps.sh
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
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
  --set model.path="$MODEL" --set worker.id=demo-worker --set kafka.session.timeout.ms=6000 \
  > "$RUN/worker.out" 2> "$RUN/worker.err" &
WORKER=$!
PIDS+=($WORKER)
sleep 1
kill -0 "$WORKER" 2>/dev/null || { echo "demo: the worker did not start:"; cat "$RUN/worker.err"; exit 1; }

echo "demo: submitting 4 prompts (max_tokens=$MAX_TOKENS); the first result waits for the group assignment (~3 s)"
set +e
"$BUILD/consumer/sluice-submit" --brokers "$BROKERS" --max-tokens "$MAX_TOKENS" --timeout 60 \
  "The quick brown fox" "Kafka in, tokens out" "Hello, sluice" "2 + 2 =" | tee "$RUN/results.jsonl"
rc=${PIPESTATUS[0]}
set -e
echo "demo: job state in Redis:"
for id in $(python3 -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' "$RUN/results.jsonl"); do
  echo "  sluice:job:$id -> $(redis-cli -p "$REDIS_PORT" hget "sluice:job:$id" status)"
done
kill -TERM "$WORKER"
wait "$WORKER" && echo "demo: worker drained and exited 0"
[ "$rc" -eq 0 ] && echo "demo: all jobs succeeded" || { echo "demo: sluice-submit exit $rc"; exit "$rc"; }
