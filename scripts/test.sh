#!/usr/bin/env bash
# Sets up a fresh machine, builds loader and runs the whole test suite.
# This is the README's test command and what CI (.ci/run) runs.
#
#   scripts/test.sh                            # normal build (build/)
#   LOADER_SANITIZE=address scripts/test.sh    # ASan + UBSan build (build-asan/)
#   LOADER_SANITIZE=thread scripts/test.sh     # TSan build (build-tsan/); not in CI
#
# ThreadSanitizer needs a CAF built with -fsanitize=thread (Debian's is not: every CAF
# mailbox hand-off would be a false race).  The thread build first runs
# scripts/build_caf_tsan.sh, which builds one from Debian's source archive into
# ${CAF_TSAN_PREFIX:-$HOME/.cache/loader/caf-0.17.6-tsan} (once, about 25 minutes on a
# busy 2-core machine; a no-op afterwards), then builds loader against it (CAF_ROOT, and
# the RUNPATH of the binaries) and puts it first on LD_LIBRARY_PATH, so the tests and
# the worker processes they re-execute load the instrumented CAF.  A worker's TSan report
# changes no exit status (workers _exit) and some tests capture or discard a child's
# stderr, so every process writes its reports to $BUILD_DIR/tsan-reports/tsan.PID
# (TSAN_OPTIONS log_path) and the run fails when any holds a "WARNING: ThreadSanitizer".
# See docs/tsan.md.
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
  if [ "$LOADER_SANITIZE" = thread ]; then
    caf_prefix=$(scripts/build_caf_tsan.sh)
    export CMAKE_ARGS="$CMAKE_ARGS -DCAF_ROOT=$caf_prefix"
    export LD_LIBRARY_PATH="$caf_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Every process writes its reports to its own file (log_path): also the processes whose
    # stderr a test captures or discards (workers, `loader bench`, the demo trainer).
    tsan_reports="$PWD/$BUILD_DIR/tsan-reports"
    rm -rf "$tsan_reports"
    mkdir -p "$tsan_reports"
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp:log_path=$tsan_reports/tsan}
  fi
fi
# The benchmark programs of bench/ are no test's: they are left out here (a plain
# `scripts/build.sh` or `cmake --build build` builds them), and debug information is line
# tables only (-g1); the test sources themselves are built -Og -g1 (LOADER_FAST_TEST_BUILD).
# docs/build.md has the figures.
export CMAKE_ARGS="-DLOADER_BUILD_BENCH=OFF -DLOADER_LINE_TABLES_ONLY=ON ${CMAKE_ARGS:-}"
scripts/build.sh
rc=0
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" --timeout 300 || rc=$?
if [ "${LOADER_SANITIZE:-}" = thread ]; then
  # Reports of any process, in the report files and in the test log (if TSAN_OPTIONS was
  # set without log_path).  WorkerDeath.SegfaultAndExitStatusAreNamed leaves one
  # "ThreadSanitizer: SEGV" file on purpose; that is not a race report.
  files=$(grep -l '^WARNING: ThreadSanitizer' "$BUILD_DIR/tsan-reports"/* "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null || true)
  races=0
  for f in $files; do races=$(( races + $(grep -c '^WARNING: ThreadSanitizer' "$f") )); done
  echo "test.sh: ThreadSanitizer warnings: $races (reports of each process: $BUILD_DIR/tsan-reports/)"
  if [ "$races" != 0 ]; then
    for f in $files; do echo "== $f"; grep -A12 '^WARNING: ThreadSanitizer' "$f" | head -n 40; done
    [ "$rc" -ne 0 ] || rc=1
  fi
fi
exit "$rc"
