#!/usr/bin/env bash
# Build the librdkafka the mock broker runs on in the pipeline benchmark with one change
# (bench/rdkafka-mock-tail-scan.patch): the mock broker finds the message set for a Fetch offset by
# searching from the newest end of the partition log instead of from the oldest. Stock 2.0.2 scans
# from the oldest ("FIXME: Maintain an index" in rdkafka_mock.c), so its CPU per fetched message
# grows with the log and it becomes the bottleneck past ~50k messages (bench/README.md, pipeline).
# Only sluice-mock-kafka is run on it (LD_LIBRARY_PATH); the worker and the load generator keep the
# system librdkafka. Same version as the system library, so the ABI is the same.
#   usage: bench/broker_lib.sh [OUT_DIR]        prints OUT_DIR (holding librdkafka.so.1)
#   source: $LIBRDKAFKA_SRC (an unpacked librdkafka tree of that version), else the GitHub tarball.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT_DIR=${1:-$REPO/build/rdkafka-mock-tailscan}
VER=$(dpkg-query -W -f '${Version}' librdkafka1 2>/dev/null | sed 's/-[^-]*$//')
[ -n "$VER" ] || { echo "broker_lib.sh: librdkafka1 is not installed (run ops/install-deps.sh)" >&2; exit 1; }
if [ -f "$OUT_DIR/librdkafka.so.1" ]; then echo "$OUT_DIR"; exit 0; fi
WORK=$(mktemp -d /tmp/sluice-rdkafka.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if [ -n "${LIBRDKAFKA_SRC:-}" ]; then
  cp -a "$LIBRDKAFKA_SRC/." "$WORK/"
else
  curl -fsSL "https://github.com/confluentinc/librdkafka/archive/refs/tags/v$VER.tar.gz" | tar -xz -C "$WORK" --strip-components=1
fi
grep -q "\"$VER\"\|0x0*$(printf '%02x%02x%02x' $(echo "$VER" | tr . ' '))" "$WORK/src/rdkafka.h" ||
  { echo "broker_lib.sh: the source is not librdkafka $VER (the system library's version)" >&2; exit 1; }
(cd "$WORK" && patch -p1 < "$REPO/bench/rdkafka-mock-tail-scan.patch" >&2 &&
  ./configure --no-download --disable-ssl --disable-gssapi --disable-curl --disable-zstd --disable-lz4-ext >&2 &&
  make -C src -j"$(nproc)" librdkafka.so.1 >&2)
mkdir -p "$OUT_DIR"
cp "$WORK/src/librdkafka.so.1" "$OUT_DIR/"
echo "$OUT_DIR"
