#!/usr/bin/env bash
# A/B of two `loader` binaries on one workload, rounds alternated (the machine is shared
# and noisy: compare medians of the same run, never figures of two runs).
#
#   bench/ab.sh NEW_LOADER BASE_LOADER [WORKLOADS] [ROUNDS] [N]
#   bench/ab.sh build/loader ../base/build/loader "W1 W4" 5 2000000
#
# Each round runs `loader bench --workload W --workers 2 --n N --epochs 3` with each
# binary in turn and keeps epochs 2 and 3 (the first pays the workers' start).  Prints
# one line per run (samples/s of the kept epochs, parent CPU in µs per batch), then per
# workload the median samples/s of each side and their ratio (new / base).
set -euo pipefail
new=$1
base=$2
workloads=${3:-W1 W4}
rounds=${4:-5}
n=${5:-2000000}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for wl in $workloads; do
  for ((r = 1; r <= rounds; ++r)); do
    for side in new base; do
      bin=$new
      [ "$side" = base ] && bin=$base
      "$bin" bench --workload "$wl" --workers 2 --n "$n" --epochs 3 2>/dev/null | grep '^{' |
        python3 -c '
import json, sys
wl, side, r = sys.argv[1:4]
xs = [json.loads(l) for l in sys.stdin]
xs = [x for x in xs if x.get("epoch", 0) >= 2 and "samples_per_s" in x]
if not xs:
    sys.exit("no epoch 2 or 3 in the output of " + side)
cpu = sum(x.get("main_cpu_s", 0) for x in xs) / max(1, sum(x["batches"] for x in xs)) * 1e6
print(wl, side, r, " ".join("%.0f" % x["samples_per_s"] for x in xs), "cpu_us_per_batch=%.1f" % cpu)
' "$wl" "$side" "$r" | tee -a "$log"
    done
  done
done
python3 - "$log" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    wl, side, _r, *rest = line.split()
    runs.setdefault((wl, side), []).extend(float(v) for v in rest if "=" not in v)
for wl in sorted({k[0] for k in runs}):
    new, base = statistics.median(runs[(wl, "new")]), statistics.median(runs[(wl, "base")])
    print(f"{wl}: new {new / 1e6:.2f} M, base {base / 1e6:.2f} M samples/s, new/base {new / base:.3f}")
PY
