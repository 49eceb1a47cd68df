#!/usr/bin/env bash
# Idempotent install of the Debian packages sluice builds and tests with (see DESIGN.md); prometheus
# brings promtool, which tests/consumer/test_metrics.py runs over a live /metrics.
set -euo pipefail
PKGS=(build-essential cmake pkg-config librdkafka-dev libavro-dev libhiredis-dev libjansson-dev
      libmicrohttpd-dev libonig-dev libunistring-dev libcmocka-dev redis-server kcat
      python3-confluent-kafka python3-avro prometheus)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
