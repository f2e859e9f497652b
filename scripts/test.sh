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
# does not change any exit status (workers _exit), so the run also fails when the test
# log holds any "WARNING: ThreadSanitizer".  See docs/tsan.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -n "${LOADER_SANITIZE:-}" ]; then
  case "$LOADER_SANITIZE" in
    address) export BUILD_DIR=${BUILD_DIR:-build-asan} ;;
    thread) export BUILD_DIR=${BUILD_DIR:-build-tsan} ;;
    *) echo "LOADER_SANITIZE must be address or thread" >&2; exit 2 ;;
  esac
  # Sanitizer builds leave CUDA out (its runtime and ASan's shadow memory do not mix).
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DLOADER_SANITIZE=$LOADER_SANITIZE -DLOADER_WITH_CUDA=OFF -DLOADER_BUILD_DEMOS=OFF -DLOADER_BUILD_BENCH=OFF -DLOADER_BUILD_FUZZ=OFF"
  export BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  if [ "$LOADER_SANITIZE" = thread ]; then
    caf_prefix=$(scripts/build_caf_tsan.sh)
    export CMAKE_ARGS="$CMAKE_ARGS -DCAF_ROOT=$caf_prefix"
    export LD_LIBRARY_PATH="$caf_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}
  fi
fi
scripts/build.sh
rc=0
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" --timeout 300 || rc=$?
if [ "${LOADER_SANITIZE:-}" = thread ]; then
  log="${BUILD_DIR}/Testing/Temporary/LastTest.log"
  races=$(grep -c '^WARNING: ThreadSanitizer' "$log" || true)
  echo "test.sh: ThreadSanitizer reports in $log: $races"
  if [ "$races" != 0 ]; then
    grep -n -A3 '^WARNING: ThreadSanitizer' "$log" | head -n 40
    [ "$rc" -ne 0 ] || rc=1
  fi
fi
exit "$rc"
