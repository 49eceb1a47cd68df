#!/usr/bin/env bash
# `make test`: build Release and an ASan/UBSan Debug tree (CPU only), run all ctest tests in each.
# Integration tests start their own redis-server and mock Kafka cluster on free loopback ports.
# The Release tree builds the CUDA backend and kernels where a GPU is found, or with SLUICE_CUDA=ON in the
# environment (.ci/run sets it, so CI runs the kernels' ptxas checks without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA="${SLUICE_CUDA:-AUTO}"
cmake --build build -j "$JOBS"
# the fault suite (label faults) runs on its own: README "Fault suite"
(cd build && ctest --output-on-failure -j "$JOBS" --timeout 900 -LE faults)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DSLUICE_CUDA=OFF
cmake --build build-asan -j "$JOBS"
(cd build-asan && ctest --output-on-failure -j "$JOBS" --timeout 900 -L unit)
