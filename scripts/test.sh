#!/usr/bin/env bash
# Sets up a fresh machine, builds loader and runs the whole test suite.
# This is the README's test command and what CI (.ci/run) runs.
#
#   scripts/test.sh                            # normal build (build/)
#   LOADER_SANITIZE=address scripts/test.sh    # ASan + UBSan build (build-asan/)
#   LOADER_SANITIZE=thread scripts/test.sh     # TSan build (build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -n "${LOADER_SANITIZE:-}" ]; then
  case "$LOADER_SANITIZE" in
    address) export BUILD_DIR=${BUILD_DIR:-build-asan} ;;
    thread) export BUILD_DIR=${BUILD_DIR:-build-tsan} ;;
    *) echo "LOADER_SANITIZE must be address or thread" >&2; exit 2 ;;
  esac
  # Sanitizer builds leave CUDA out (its runtime and ASan's shadow memory do not mix), and
  # libtorch (not instrumented: its allocations and threads would be false reports).
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DLOADER_SANITIZE=$LOADER_SANITIZE -DLOADER_WITH_CUDA=OFF -DLOADER_WITH_TORCH=OFF -DLOADER_BUILD_DEMOS=OFF -DLOADER_BUILD_BENCH=OFF -DLOADER_BUILD_FUZZ=OFF"
  export BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" --timeout 300
