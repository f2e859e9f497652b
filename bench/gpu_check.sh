#!/usr/bin/env bash
# The GPU check (issue 6): host-to-device bandwidth from loader's pinned shared-memory
# slabs vs pageable memory vs PyTorch's pin_memory=True DataLoader +
# .to('cuda', non_blocking=True) on the same data (W2 images), and the loader's
# end-to-end batches/s with one device copy per batch.  See docs/gpu.md.
#
#   bench/gpu_check.sh                       # builds ./build if needed, N = 4096, 2 workers
#   bench/gpu_check.sh --quick               # about a minute
#   bench/gpu_check.sh --workers 4 --n 20000 --mb 256 --repeats 50
#   LOADER_BIN=build-pin/loader PYTHON=python3 bench/gpu_check.sh
#
# Every option goes to both sides (`loader gpu-check` and the PyTorch part).  Raw JSON
# lines go to bench/results/gpu-<time>.jsonl and a Markdown summary (the table for
# docs/gpu.md) to bench/results/gpu-<time>.md.  Exit status: 0 measured, 1 a check
# failed, 77 no CUDA device (the reason is printed: "no CUDA device: ...").
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
LOADER_BIN=${LOADER_BIN:-$BUILD_DIR/loader}
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-bench/results}
mkdir -p "$OUT_DIR"
stamp=$(date +%Y%m%d-%H%M%S)
log="$OUT_DIR/gpu-$stamp.jsonl"
summary="$OUT_DIR/gpu-$stamp.md"

if [ ! -x "$LOADER_BIN" ]; then
  echo "[gpu_check] building $BUILD_DIR (no $LOADER_BIN yet)" >&2
  BUILD_DIR="$BUILD_DIR" scripts/build.sh >&2 || { echo "[gpu_check] build failed" >&2; exit 1; }
fi

# ---- the machine
{
  echo "# GPU check $stamp"
  echo
  echo "- host: $(uname -n), $(nproc) CPUs, $(uname -sr)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "- nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>&1 | head -1)"
  else
    echo "- nvidia-smi: not found"
  fi
  echo "- command: bench/gpu_check.sh $*"
  echo "- loader: $LOADER_BIN"
} >"$summary"
cat "$summary" >&2

# ---- loader
"$LOADER_BIN" gpu-check "$@" | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 77 ]; then
  echo "- result: **not measured**: $(sed -n 's/.*"reason":"\([^"]*\)".*/\1/p' "$log" | head -1)" >>"$summary"
  echo "[gpu_check] no CUDA device: nothing measured; PyTorch part skipped. Log: $log" >&2
  exit 77
fi
if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
  echo "[gpu_check] loader gpu-check failed with status $rc (if it could not start: is libcaf-core installed? scripts/setup.sh)" >&2
  exit "$rc"
fi

# ---- PyTorch, same data and sizes
"$PYTHON" - "$@" <<'PY' | tee -a "$log"
import argparse, json, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--n", type=int)
ap.add_argument("--batch-size", type=int, default=64)
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--epochs", type=int)
ap.add_argument("--mb", type=int)
ap.add_argument("--repeats", type=int)
ap.add_argument("--device", type=int, default=0)
a, _ = ap.parse_known_args()
n = a.n or (1024 if a.quick else 4096)
epochs = a.epochs or (1 if a.quick else 2)
mb = a.mb or (16 if a.quick else 64)
repeats = a.repeats or (5 if a.quick else 20)

def emit(**kw):
    print(json.dumps(dict(side="torch", **kw)), flush=True)

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except Exception as e:  # noqa: BLE001
    emit(check="device", ok=False, reason=f"cannot import torch: {e}")
    sys.exit(0)
if not torch.cuda.is_available():
    emit(check="device", ok=False, reason=f"torch {torch.__version__}: torch.cuda.is_available() is False")
    sys.exit(0)
dev = torch.device("cuda", a.device)
emit(check="device", ok=True, torch=torch.__version__, cuda=torch.version.cuda, name=torch.cuda.get_device_name(dev))

# Raw bandwidth: the same copy from pageable and from pinned memory.
nbytes = mb << 20
dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
for source, pin in (("pageable (torch.empty)", False), ("pinned (torch.empty(pin_memory=True))", True)):
    src = torch.ones(nbytes, dtype=torch.uint8).pin_memory() if pin else torch.ones(nbytes, dtype=torch.uint8)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(dev)
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(repeats):
        dst.copy_(src, non_blocking=True)
    t1.record()
    t1.synchronize()
    s = t0.elapsed_time(t1) / 1e3
    emit(check="h2d_bandwidth", source=source, bytes=nbytes, repeats=repeats, seconds=s, GB_per_s=nbytes * repeats / s / 1e9)
    print(f"[gpu_check] torch H2D from {source}: {nbytes * repeats / s / 1e9:.2f} GB/s", file=sys.stderr)

IMG = 3 * 224 * 224

class W2Python(Dataset):  # bench/peer_torch.py's W2 "python" variant
    def __init__(self, n):
        self.n = n
        self.base = (torch.arange(IMG) & 0xFF).to(torch.uint8).reshape(3, 224, 224)
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return self.base + ((i * 31) & 0xFF), i % 10

want = 45 * (n // 10) + (n % 10) * (n % 10 - 1) // 2
status = 0
for pin in (False, True):
    g = torch.Generator()
    g.manual_seed(0)
    loader = DataLoader(W2Python(n), batch_size=a.batch_size, shuffle=True, generator=g, num_workers=a.workers,
                        pin_memory=pin, persistent_workers=a.workers > 0)
    for copy in (False, True):
        for e in range(1, epochs + 1):
            t0 = time.perf_counter()
            batches = total = nb = 0
            pinned = None
            for images, labels in loader:
                if pinned is None:
                    pinned = images.is_pinned()
                total += int(labels.sum())
                nb += images.numel() * images.element_size() + labels.numel() * labels.element_size()
                if copy:
                    images = images.to(dev, non_blocking=True)
                    labels = labels.to(dev, non_blocking=True)
                batches += 1
            torch.cuda.synchronize(dev)
            s = time.perf_counter() - t0
            ok = total == want
            status |= 0 if ok else 1
            emit(check="loader_end_to_end", workload="W2", n=n, batch_size=a.batch_size, workers=a.workers,
                 pin_memory=pin, device_copy=copy, epoch=e, batches=batches, epoch_s=s, batches_per_s=batches / s,
                 GB_per_s=nb / s / 1e9, pinned=bool(pinned), ok=ok)
            print(f"[gpu_check] torch W2 w{a.workers} {'pin_memory' if pin else 'pageable'}"
                  f"{' + .to(cuda)' if copy else ' (no copy)'} epoch {e}: {batches / s:.1f} batches/s, "
                  f"{nb / s / 1e9:.2f} GB/s", file=sys.stderr)
sys.exit(status)
PY
trc=${PIPESTATUS[0]}

# ---- the summary table (last epoch of each configuration)
"$PYTHON" - "$log" >>"$summary" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
dev = [r for r in rows if r.get("check") == "device"]
for r in dev:
    side = r.get("side", "loader")
    print(f"- {side} device: " + ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("check", "side")))
print("\n| side | host memory | H2D GB/s |\n|---|---|---|")
for r in rows:
    if r.get("check") == "h2d_bandwidth" and "GB_per_s" in r:
        print(f"| {r.get('side', 'loader')} | {r['source']} | {r['GB_per_s']:.2f} |")
last = {}
for r in rows:
    if r.get("check") == "loader_end_to_end":
        last[(r.get("side", "loader"), r["pin_memory"], r["device_copy"])] = r
print("\n| side | pin_memory | device copy | batches/s | GB/s | pinned | pin_backend | ok |\n|---|---|---|---|---|---|---|---|")
for (side, pin, copy), r in sorted(last.items()):
    print(f"| {side} | {pin} | {copy} | {r['batches_per_s']:.1f} | {r['GB_per_s']:.2f} | {r['pinned']} | "
          f"{r.get('pin_backend', '-')} | {r['ok']} |")
PY
echo "[gpu_check] log: $log, summary: $summary" >&2
cat "$summary" >&2
[ "$rc" -eq 0 ] && [ "$trc" -eq 0 ] && exit 0
exit 1
