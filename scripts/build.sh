#!/usr/bin/env bash
# Configures and builds loader into ${BUILD_DIR:-build} (extra CMake flags: $CMAKE_ARGS).
#   scripts/build.sh                       # everything the configuration builds
#   scripts/build.sh fashion_mnist_train   # only these targets (and what they need)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
