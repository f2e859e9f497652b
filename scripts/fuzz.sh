#!/usr/bin/env bash
# Builds the libFuzzer target for the .pt reader with clang++ and runs it on a seed
# corpus (the golden .pt files of both formats, their data.pkl records and the object
# pickles of the legacy ones) for a fixed number of runs.
#
#   scripts/fuzz.sh [RUNS]        # default 200000
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_CXX (default clang++),
# FUZZ_SKIP_BUILD=1 (use an existing build), FUZZ_MAX_TIME (seconds, default 600),
# LOADER_GOLDEN_DIR (default tests/golden).  Prints "executed N inputs"; exits
# non-zero when the fuzzer finds a crash (the reproducer is left in the build dir).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-${FUZZ_RUNS:-200000}}
build=${FUZZ_BUILD_DIR:-build-fuzz}
golden=${LOADER_GOLDEN_DIR:-$(pwd)/tests/golden}
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  cmake -S fuzz/project -B "$build" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
[ -x "$build/pt_load_fuzzer" ] || { echo "fuzz.sh: $build/pt_load_fuzzer is not built" >&2; exit 2; }
build=$(cd "$build" && pwd)
fuzzer="$build/pt_load_fuzzer"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds"
cp "$golden"/pt/*.pt "$work/seeds/"
for f in "$golden"/pt_legacy/*.pt; do cp "$f" "$work/seeds/legacy_$(basename "$f")"; done
if command -v python3 >/dev/null; then  # the bare pickles reach the unpickler directly
  python3 - "$work/seeds" <<'PY'
import glob, io, os, pickle, pickletools, sys, zipfile
for f in glob.glob(os.path.join(sys.argv[1], "*.pt")):
    if zipfile.is_zipfile(f):
        with zipfile.ZipFile(f) as z:
            name = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            open(f[:-3] + ".pkl", "wb").write(z.read(name))
        continue
    try:  # legacy: magic number, protocol version, sys_info, then the object pickle
        raw = open(f, "rb").read()
        s = io.BytesIO(raw)
        for _ in range(3):
            pickle.load(s)
        start = s.tell()
        end = start + max(pos for _op, _arg, pos in pickletools.genops(raw[start:])) + 1
        open(f[:-3] + ".pkl", "wb").write(raw[start:end])
    except Exception:  # not a legacy stream (the tar-format file)
        pass
PY
fi
echo "fuzz.sh: $(ls "$work/seeds" | wc -l) seeds, $runs runs"
log="$work/log"
set +e
"$fuzzer" -runs="$runs" -max_total_time="${FUZZ_MAX_TIME:-600}" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$build/" "$work/corpus" "$work/seeds" >"$log" 2>&1
rc=$?
set -e
tail -n 25 "$log"
done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1 || true)
if [ $rc -ne 0 ] || [ -z "$done_line" ]; then
  echo "fuzz.sh: the fuzzer failed (exit $rc); see the output above" >&2
  exit 1
fi
n=$(echo "$done_line" | sed -E 's/^Done ([0-9]+) runs.*/\1/')
echo "pt_load_fuzzer: executed $n inputs ($done_line)"
