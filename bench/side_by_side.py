#!/usr/bin/python3
"""loader vs PyTorch and libtorch on the standard workloads, side by side, in one run.

Runs `loader bench`, bench/peer_torch.py (PyTorch's DataLoader, the `tensor` and
`python` variants) and bench/peer_libtorch (libtorch's `torch::data` with worker
threads, the `tensor`, `gen` and `tensor_batched` variants, W1-W3) alternately on the
same workloads, sizes and worker counts, measures this machine's copy bandwidth
(`loader bench --memcpy`), and writes the report docs/benchmarks.md with its plots
docs/benchmarks_*.png, including the targets of issue 12 as a PASS/MISS checklist.

    /usr/bin/python3 bench/side_by_side.py                 # full run (~8-9 min on an idle 2-core machine)
    /usr/bin/python3 bench/side_by_side.py --rounds 3      # 3 interleaved rounds (WORKLOADS.md; ~25 min)
    /usr/bin/python3 bench/side_by_side.py --quick         # smoke run, report in bench/results/quick.md
    /usr/bin/python3 bench/side_by_side.py --only W5 --workers 0,2 --rounds 2 --epochs 2
                        # W5 (JPEG files): loader, PyTorch + torchvision and the decode limit
                        # (bench/jpeg_decode_probe) in one run; its section of docs/benchmarks.md

(Estimates: loader + PyTorch take ~6 min per round and the loader-only scaling part
~45 s once, from the 2026-11 full run; the libtorch peer adds ~1.5-2 min per round,
mostly materialising W2's 3 GB per `tensor`/`tensor_batched` run, plus ~1.5 min once to
build it. The first --quick run also pays that build.)

The libtorch peer is a standalone CMake project (needs Debian `libtorch-dev`); the
script builds it into build-bench/peer_libtorch when the binary is missing or older
than its source, and leaves the peer out, saying so in the report, when libtorch
cannot be found (`--no-libtorch` leaves it out on purpose).

Every configuration runs in its own process; this script samples that process tree
from /proc every 20 ms (the same way for every side) for its memory, and the
system-wide CPU time spent outside it (other work on the machine), and keeps every
raw JSON line in bench/results/.

Causes of missed targets: the report's checklist takes them, per target id, from
bench/target_causes.json ({"w1_vs_libtorch": "text", ...}) when that file exists, so
they survive `--from-raw` re-renders; the ids are listed in the raw log's report line.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(ROOT, "bench", "peer_torch.py")
LIBTORCH_SRC = os.path.join(ROOT, "bench", "peer_libtorch")
LIBTORCH_BUILD = os.path.join(ROOT, "build-bench", "peer_libtorch")
PAGE = os.sysconf("SC_PAGE_SIZE")
HZ = os.sysconf("SC_CLK_TCK")

# WORKLOADS.md sizes: the timed suite's N (peer_torch.py's benchN) and quick N.
WORKLOADS = {
    "W1": dict(N=250_000, quickN=50_000, B=256, bytes=72),
    "W2": dict(N=20_000, quickN=2_000, B=64, bytes=150_536),
    "W3": dict(N=5_000, quickN=500, B=64, bytes=602_120),
    "W4": dict(N=250_000, quickN=50_000, B=256, bytes=8),
}
# (side, variant) pairs per workload: loader's in-memory ("tensor") and generated
# ("gen") datasets against PyTorch's `tensor` and `python` variants.
LOADER_VARIANTS = {"W1": ["tensor", "gen"], "W2": ["tensor", "gen"], "W3": ["tensor", "gen"], "W4": ["gen"]}
TORCH_VARIANTS = {"W1": ["tensor", "python"], "W2": ["tensor", "python"], "W3": ["tensor", "python"],
                  "W4": ["python"]}
# libtorch's torch::data (worker threads) on W1-W3: `tensor` (get(i) + Stack<>), `gen`
# (sample computed from i + Stack<>) and `tensor_batched` (one index_select per batch).
LIBTORCH_VARIANTS = {"W1": ["tensor", "gen", "tensor_batched"], "W2": ["tensor", "gen", "tensor_batched"],
                     "W3": ["tensor", "gen"]}
# like-for-like pairs for the ratio columns: loader variant -> (torch variant, libtorch variants)
PAIRS = {"tensor": ("tensor", ("tensor", "tensor_batched")), "gen": ("python", ("gen",))}
PF_WORKLOAD, PF_VARIANT = "W3", "tensor"  # memory against prefetch_factor
PERSISTENT = {"W1": ("tensor", "tensor"), "W2": ("tensor", "tensor"), "W3": ("tensor", "tensor"),
              "W4": ("gen", "python")}  # (loader variant, torch variant)


def log(msg):
    print(f"[side_by_side] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# /proc sampling: memory of a process tree, CPU time of the whole machine
# ----------------------------------------------------------------------------
def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return int(s[s.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


_PARENT = {}


def process_tree(root):
    """root and its descendants (scans /proc: this kernel has no task/*/children).
    Parent ids are cached per pid, so a scan reads only the stat files of new
    processes (it runs every 100 ms beside the measured programs)."""
    global _PARENT
    seen = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            seen[pid] = _PARENT[pid] if pid in _PARENT else _ppid(pid)
    _PARENT = seen
    kids = {}
    for pid, ppid in seen.items():
        kids.setdefault(ppid, []).append(pid)
    out = [root]
    i = 0
    while i < len(out):
        out.extend(kids.get(out[i], []))
        i += 1
    return out


def meminfo_anon_shmem():
    v = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, rest = line.split(":", 1)
            if k in ("AnonPages", "Shmem"):
                v[k] = int(rest.split()[0]) * 1024
    return v["AnonPages"] + v["Shmem"]


def cpu_busy_seconds():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / HZ


class TreeSampler(threading.Thread):
    """Peak sum of RSS over a process tree (tree refreshed every 5th sample) and peak
    rise of system AnonPages+Shmem, as WORKLOADS.md defines them."""

    def __init__(self, pid, period=0.02):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.stop_ev = threading.Event()
        self.base = meminfo_anon_shmem()
        self.peak_rss = 0
        self.peak_sys = 0
        self.max_procs = 0

    def run(self):
        tree, k = [self.pid], 0
        while not self.stop_ev.is_set():
            if k % 5 == 0:
                tree = process_tree(self.pid)
            k += 1
            rss = 0
            for p in tree:
                try:
                    with open(f"/proc/{p}/statm") as f:
                        rss += int(f.read().split()[1]) * PAGE
                except OSError:
                    pass
            self.peak_rss = max(self.peak_rss, rss)
            self.max_procs = max(self.max_procs, len(tree))
            self.peak_sys = max(self.peak_sys, meminfo_anon_shmem() - self.base)
            self.stop_ev.wait(self.period)


def run_measured(cmd, timeout):
    """Runs cmd; returns (rc, stdout lines, stderr tail, extras) where extras holds the
    tree memory peaks, the process's own CPU time and the CPU time used by everything
    else on the machine meanwhile."""
    busy0 = cpu_busy_seconds()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    s = TreeSampler(p.pid)
    s.start()
    out_chunks, err_chunks = [], []
    th_out = threading.Thread(target=lambda: out_chunks.append(p.stdout.read()), daemon=True)
    th_err = threading.Thread(target=lambda: err_chunks.append(p.stderr.read()), daemon=True)
    th_out.start()
    th_err.start()
    deadline = time.time() + timeout
    rusage = None
    rc = None
    while rc is None:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            rc = os.waitstatus_to_exitcode(status)
            rusage = ru
            break
        if time.time() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            rc, rusage = -9, ru
            break
        time.sleep(0.01)
    p.returncode = rc
    th_out.join()
    th_err.join()
    wall = time.perf_counter() - t0
    s.stop_ev.set()
    s.join()
    busy = cpu_busy_seconds() - busy0
    own = rusage.ru_utime + rusage.ru_stime if rusage else 0.0
    ncpu = os.cpu_count() or 1
    extras = dict(
        ext_peak_tree_rss_mb=round(s.peak_rss / 1e6, 1),
        ext_peak_sys_delta_mb=round(s.peak_sys / 1e6, 1),
        ext_max_procs=s.max_procs,
        wall_s=round(wall, 2),
        own_cpu_s=round(own, 2),
        other_cpu_share=round(max(0.0, busy - own) / (wall * ncpu), 3),
    )
    out = (out_chunks[0] if out_chunks else "").splitlines()
    err = (err_chunks[0] if err_chunks else "")
    return rc, out, err[-3000:], extras


# ----------------------------------------------------------------------------
# The two sides
# ----------------------------------------------------------------------------
def run_loader(args, wl, variant, workers, n, epochs, persistent=False, prefetch=None, extra=()):
    cmd = [args.loader, "bench", "--workload", wl, "--variant", variant, "--workers", str(workers),
           "--n", str(n), "--epochs", str(epochs)]
    if persistent:
        cmd.append("--persistent")
    if prefetch is not None:
        cmd += ["--prefetch-factor", str(prefetch)]
    cmd += list(extra)
    rc, out, err, ext = run_measured(cmd, args.timeout)
    epochs_json = [json.loads(x) for x in out if x.startswith("{")]
    rec = dict(side="loader", workload=wl, variant=variant, workers=workers, N=n, persistent=persistent,
               prefetch_factor=prefetch, rc=rc, epochs=epochs_json, **ext)
    if rc != 0 or not epochs_json:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"loader {wl}/{variant}/w{workers}: FAILED ({rec['error']})")
        return rec
    eps = [e["epoch_s"] for e in epochs_json]
    fb = [e["first_batch_s"] for e in epochs_json]
    rec.update(
        samples_per_s=n / statistics.median(eps),
        MB_per_s=statistics.median(e["MB_per_s"] for e in epochs_json),
        first_batch_s=statistics.median(fb) if not persistent else fb[0],
        warm_first_batch_s=statistics.median(fb[1:]) if persistent and len(fb) > 1 else None,
        warm_samples_per_s=n / statistics.median(eps[1:]) if persistent and len(eps) > 1 else None,
        self_peak_rss_mb=max(e["peak_rss_mb"] for e in epochs_json),
        self_peak_mem_mb=max(e["peak_mem_mb"] for e in epochs_json),
        self_peak_anon_mb=max(e["peak_anon_mb"] for e in epochs_json),
        self_peak_file_mb=max(e["peak_file_mb"] for e in epochs_json),
        self_peak_shm_mb=max(e["peak_shm_mb"] for e in epochs_json),
        dataset_mb=epochs_json[0]["dataset_mb"],
        main_cpu_s=statistics.median(e.get("main_cpu_s", 0) for e in epochs_json),
        workers_cpu_s=statistics.median(e.get("workers_cpu_s", 0) for e in epochs_json),
        main_ctx_switches=statistics.median(e.get("main_ctx_switches", 0) for e in epochs_json),
        **loader_per_batch(epochs_json, persistent),
        batches=epochs_json[0]["batches"],
        epoch_s=statistics.median(eps),
        ok=all(e["ok"] for e in epochs_json),
    )
    log(f"loader {wl}/{variant}/w{workers}{'/persistent' if persistent else ''}"
        f"{'' if prefetch is None else '/pf' + str(prefetch)}: {rec['samples_per_s']:>12.0f} samples/s, "
        f"first {rec['first_batch_s'] * 1e3:7.2f} ms, tree RSS {ext['ext_peak_tree_rss_mb']:.0f} MB, "
        f"other CPU {ext['other_cpu_share']:.0%}")
    return rec


def loader_per_batch(epochs_json, persistent):
    """The parent's cost per delivered batch: median over the epochs (persistent: over
    the warm epochs 2.., the steady state); computed from the totals for results of a
    `loader bench` older than these fields."""
    def one(e, key, total_key, scale):
        if key in e:
            return e[key]
        return e.get(total_key, 0) * scale / max(1, e.get("batches", 1))
    eps = epochs_json[1:] if persistent and len(epochs_json) > 1 else epochs_json
    return dict(main_cpu_us_per_batch=statistics.median(one(e, "main_cpu_us_per_batch", "main_cpu_s", 1e6)
                                                        for e in eps),
                ctx_switches_per_batch=statistics.median(one(e, "ctx_switches_per_batch", "main_ctx_switches", 1)
                                                         for e in eps))


def run_torch(args, wl, variant, workers, n, epochs, persistent=False):
    # peer_torch.py's "persistent" matrix also runs the main matrix for the variants
    # given: naming no valid variant leaves only its persistent configuration
    # (PERSISTENT_VARIANT there: W1-W3 tensor, W4 python, as PERSISTENT here).
    cmd = [sys.executable, PEER, "--only", wl, "--variants", "none" if persistent else variant,
           "--workers", str(workers), "--n", str(n), "--epochs", str(epochs),
           "--matrix", "persistent" if persistent else "main"]
    rc, out, err, ext = run_measured(cmd, args.timeout)
    lines = [json.loads(x) for x in out if x.startswith("{")]
    lines = [x for x in lines if x.get("persistent_workers", False) == persistent and x["num_workers"] == workers]
    rec = dict(side="torch", workload=wl, variant=variant, workers=workers, N=n, persistent=persistent, rc=rc,
               **ext)
    if rc != 0 or not lines:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"torch {wl}/{variant}/w{workers}: FAILED ({rec['error']})")
        return rec
    t = lines[-1]
    rec.update(
        samples_per_s=t["samples_per_s"],
        MB_per_s=t["MB_per_s"],
        first_batch_s=t["first_batch_s"],
        warm_first_batch_s=t.get("warm_first_batch_s") if persistent else None,
        warm_samples_per_s=t.get("warm_samples_per_s") if persistent else None,
        peer_peak_tree_rss_mb=t.get("peak_tree_rss_sum_MB"),
        peer_peak_sys_delta_mb=t.get("peak_sys_anon_shmem_delta_MB"),
        epoch_s=t["epoch_s"],
        torch=t,
        ok=True,
    )
    log(f"torch  {wl}/{variant}/w{workers}{'/persistent' if persistent else ''}: "
        f"{rec['samples_per_s']:>12.0f} samples/s, first {rec['first_batch_s'] * 1e3:7.2f} ms, "
        f"tree RSS {ext['ext_peak_tree_rss_mb']:.0f} MB, other CPU {ext['other_cpu_share']:.0%}")
    return rec


def ensure_libtorch(args):
    """The peer_libtorch binary, built (out of tree) when missing or older than its
    source; None and a note saying why when the peer is left out."""
    if args.no_libtorch:
        return None, "left out (--no-libtorch)"
    if args.libtorch:
        if os.access(args.libtorch, os.X_OK):
            return args.libtorch, f"`{args.libtorch}`"
        return None, f"left out: --libtorch {args.libtorch} is not an executable"
    exe = os.path.join(LIBTORCH_BUILD, "peer_libtorch")
    srcs = [os.path.join(LIBTORCH_SRC, f) for f in ("peer_libtorch.cpp", "CMakeLists.txt")]
    if os.access(exe, os.X_OK) and os.path.getmtime(exe) >= max(os.path.getmtime(f) for f in srcs):
        return exe, f"`{os.path.relpath(exe, ROOT)}` (already built)"
    log(f"building the libtorch peer into {os.path.relpath(LIBTORCH_BUILD, ROOT)} (once; about 1-2 min)")
    t0 = time.perf_counter()
    steps = [["cmake", "-S", LIBTORCH_SRC, "-B", LIBTORCH_BUILD, "-DCMAKE_BUILD_TYPE=Release"],
             ["cmake", "--build", LIBTORCH_BUILD, "-j", str(os.cpu_count() or 1)]]
    for step in steps:
        try:
            p = subprocess.run(step, capture_output=True, text=True, cwd=ROOT)
        except OSError as e:
            return None, f"left out: cannot run cmake ({e})"
        if p.returncode != 0:
            out = (p.stdout + p.stderr).strip().splitlines()
            if step[1] == "-S" and any("Torch" in x for x in out):
                why = "libtorch not found (Debian: `apt-get install -y libtorch-dev`)"
            else:
                why = f"`{' '.join(step[:2])}` failed: " + next(
                    (x.strip() for x in out if "error" in x.lower()), out[-1] if out else f"exit {p.returncode}")
            log(f"libtorch peer left out: {why}")
            return None, "left out: " + why
    log(f"built the libtorch peer in {time.perf_counter() - t0:.0f} s")
    return exe, f"`{os.path.relpath(exe, ROOT)}` (built by this run)"


def run_libtorch(args, wl, variant, workers, n, epochs):
    """libtorch's torch::data with `workers` threads. Its threads start in
    make_data_loader and serve every epoch of the loader, so epoch 1 includes their
    start and epochs 2.. are warm (the figure is the median epoch, as for the others)."""
    cmd = [args.libtorch_exe, "--only", wl, "--variants", variant, "--workers", str(workers), "--n", str(n),
           "--epochs", str(epochs)]
    rc, out, err, ext = run_measured(cmd, args.timeout)
    # the peer prints a bare nan for figures a one-epoch run lacks
    lines = [json.loads(re.sub(r":\s*-?nan\b", ": null", x)) for x in out if x.startswith("{")]
    rec = dict(side="libtorch", workload=wl, variant=variant, workers=workers, N=n, persistent=False, rc=rc,
               **ext)
    if rc != 0 or not lines:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"libtorch {wl}/{variant}/w{workers}: FAILED ({rec['error']})")
        return rec
    t = lines[-1]
    eps = t["epoch_s"] if isinstance(t["epoch_s"], list) else [t["epoch_s"]]

    def num(x):  # the peer prints nan for one-epoch runs
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
    rec.update(
        samples_per_s=t["samples_per_s"],
        MB_per_s=t["MB_per_s"],
        first_batch_s=t["first_batch_s"],  # epoch 1, thread start included
        warm_first_batch_s=num(t.get("warm_first_batch_s")),
        warm_samples_per_s=num(t.get("warm_samples_per_s")),
        peer_peak_rss_mb=t.get("peak_rss_MB"),
        epoch_s=statistics.median(eps),
        libtorch=t,
        ok=True,
    )
    log(f"libtorch {wl}/{variant}/w{workers}: {rec['samples_per_s']:>12.0f} samples/s, "
        f"first {rec['first_batch_s'] * 1e3:7.2f} ms, tree RSS {ext['ext_peak_tree_rss_mb']:.0f} MB, "
        f"other CPU {ext['other_cpu_share']:.0%}")
    return rec


def run_memcpy(args):
    rc, out, err, _ = run_measured([args.loader, "bench", "--memcpy", "--memcpy-mb", str(args.memcpy_mb)],
                                   args.timeout)
    res = {}
    for x in out:
        if x.startswith("{"):
            d = json.loads(x)
            res[(d["memcpy"], d["threads"])] = d["MB_per_s"]
    if rc != 0 or not res:
        raise SystemExit(f"loader bench --memcpy failed: {err}")
    for (k, t), v in sorted(res.items()):
        log(f"memcpy {k} x{t}: {v / 1e3:.2f} GB/s")
    return res


# ----------------------------------------------------------------------------
# Machine description
# ----------------------------------------------------------------------------
def machine():
    info = {"kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "L2 cache", "L3 cache", "Hypervisor vendor"):
                info[k.strip()] = v.strip()
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        info["MemTotal_GB"] = round(int(f.readline().split()[1]) / 1e6, 1)
    try:
        info["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT).stdout
        info["git_dirty"] = bool(dirty.strip())
    except OSError:
        pass
    try:
        import torch
        info["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        info["torch"] = "?"
    info["python"] = platform.python_version()
    return info


def busy_processes(threshold=0.2, window=1.0):
    """Processes outside this script using more than `threshold` of a core over `window` s."""
    def snap():
        d = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    s = f.read()
                comm = s[s.index("(") + 1:s.rindex(")")]
                parts = s[s.rindex(")") + 2:].split()
                d[int(name)] = (comm, (int(parts[11]) + int(parts[12])) / HZ)
            except (OSError, ValueError, IndexError):
                pass
        return d
    a = snap()
    time.sleep(window)
    b = snap()
    me = os.getpid()
    out = []
    for pid, (comm, t) in b.items():
        if pid == me or pid not in a:
            continue
        share = (t - a[pid][1]) / window
        if share >= threshold:
            out.append(f"{comm}({pid}) {share:.0%}")
    return out


# ----------------------------------------------------------------------------
# Aggregation and report
# ----------------------------------------------------------------------------
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if xs else (None, None)


def fmt_rate(x):
    if x is None:
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_ms(x):
    return "—" if x is None else (f"{x * 1e3:.2f}" if x < 0.1 else f"{x * 1e3:.0f}")


def fmt_x(x):
    return "—" if x is None else (f"{x:.0f}×" if x >= 10 else f"{x:.2f}×")


def fmt_mb(x):
    return "—" if x is None else f"{x:.0f}"


def memcpy_limit(mc, workers):
    """Streaming memcpy limit (MB/s) for this many workers: the two-thread figure for
    2 workers, one thread otherwise; the better of one large memcpy ("stream") and
    the same bytes as 150,528-byte memcpys ("chunks"), both between buffers far
    larger than the caches."""
    t = 2 if workers >= 2 else 1
    vals = [mc.get((k, t)) for k in ("stream", "chunks") if mc.get((k, t))]
    return max(vals) if vals else None


class Results:
    def __init__(self, recs):
        self.recs = recs

    def get(self, side, wl, variant, workers, persistent=False, prefetch=None):
        return [r for r in self.recs if r["side"] == side and r["workload"] == wl and r["variant"] == variant
                and r["workers"] == workers and r.get("persistent", False) == persistent
                and r.get("prefetch_factor") == prefetch and "error" not in r]

    def failed(self, side, wl, variant, workers, persistent=False):
        return [r for r in self.recs if r["side"] == side and r["workload"] == wl and r["variant"] == variant
                and r["workers"] == workers and r.get("persistent", False) == persistent and "error" in r]

    def stat(self, side, wl, variant, workers, key, persistent=False, prefetch=None):
        return med(r.get(key) for r in self.get(side, wl, variant, workers, persistent, prefetch))

    def rng(self, side, wl, variant, workers, key, persistent=False):
        return spread(r.get(key) for r in self.get(side, wl, variant, workers, persistent))


def plot(res, workers_list, path, scaling, scaling_path, pf_rows, pf_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.8))
    series = [("loader", "tensor", "#1f77b4", "loader tensor (mmap)"), ("loader", "gen", "#6baed6", "loader gen"),
              ("torch", "tensor", "#d62728", "torch tensor"), ("torch", "python", "#fc9272", "torch python"),
              ("libtorch", "tensor", "#2ca02c", "libtorch tensor"),
              ("libtorch", "tensor_batched", "#98df8a", "libtorch tensor_batched"),
              ("libtorch", "gen", "#bcbd22", "libtorch gen")]
    if not any(r["side"] == "libtorch" for r in res.recs):
        series = series[:4]
    for ax, wl in zip(axes, ["W1", "W2", "W3", "W4"]):
        width = 0.8 / len(series)
        for k, (side, var, color, label) in enumerate(series):
            vals = [res.stat(side, wl, var, w, "samples_per_s") for w in workers_list]
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(workers_list))]
            ax.bar(xs, [v if v else float("nan") for v in vals], width, color=color, label=label)
        ax.set_yscale("log")
        ax.set_xticks(range(len(workers_list)))
        ax.set_xticklabels([f"{w} workers" for w in workers_list])
        ax.set_title(f"{wl} (N={WORKLOADS[wl]['N']:,})" if not res.quick else wl)
        ax.set_ylabel("samples/s (log)")
        ax.grid(axis="y", which="both", alpha=0.3)
        got = [res.stat(side, wl, var, w, "samples_per_s") for side, var, _, _ in series for w in workers_list]
        got = [g for g in got if g]
        if got:
            ax.set_ylim(min(got) / 3, max(got) * 2)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), fontsize=9)
    fig.suptitle("samples/s per workload and worker count (median epoch; higher is better)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)

    if scaling:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
        for wl, pts in scaling.items():
            xs = sorted(pts)
            base = pts[xs[0]] or 1
            axes[0].plot(xs, [pts[x] / base if pts[x] else None for x in xs], marker="o", label=wl)
        axes[0].set_yscale("log")
        axes[0].set_xticks(sorted({x for pts in scaling.values() for x in pts}))
        axes[0].axhline(1.0, color="grey", lw=0.8)
        axes[0].set_xlabel("num_workers")
        axes[0].set_ylabel("samples/s relative to 0 workers")
        axes[0].set_title("loader: throughput vs workers (2-core machine)")
        axes[0].grid(alpha=0.3)
        axes[0].legend()
        if pf_rows:
            xs = [r[0] for r in pf_rows]
            axes[1].plot(xs, [r[1] for r in pf_rows], marker="o", label="tree mem (each page once)")
            axes[1].plot(xs, [r[2] for r in pf_rows], marker="s", label="tree RSS sum")
            axes[1].set_xscale("log", base=2)
            axes[1].set_xticks(xs)
            axes[1].set_xticklabels([str(x) for x in xs])
            axes[1].set_xlabel("prefetch_factor")
            axes[1].set_ylabel("peak MB")
            axes[1].set_title(pf_title(res))
            axes[1].grid(alpha=0.3)
            axes[1].legend()
        fig.tight_layout()
        fig.savefig(scaling_path, dpi=110)
        plt.close(fig)


def issue_targets(res, mc):
    """Issue 12's targets, each {id, name, measured, result}, from the run's figures
    (2 workers; the loader with fresh workers each epoch unless a target says otherwise)."""
    out = []

    def add(tid, name, measured, ok):
        # ok: True / False, or None when a figure it needs is missing
        out.append(dict(id=tid, name=name, measured=measured,
                        result="NOT MEASURED" if ok is None else ("PASS" if ok else "MISS")))

    def sps(side, wl, var, w=2, persistent=False, key="samples_per_s"):
        return res.stat(side, wl, var, w, key, persistent)

    # ahead of libtorch's threads in every like-for-like pair
    for wl in ("W1", "W2"):
        lt, lg = sps("loader", wl, "tensor"), sps("loader", wl, "gen")
        pairs = [("tensor", lt, "tensor"), ("tensor", lt, "tensor_batched"), ("gen", lg, "gen")]
        parts, oks = [], []
        for lv, lval, bv in pairs:
            bval = sps("libtorch", wl, bv)
            r = lval / bval if lval and bval else None
            parts.append(f"`{lv}` {fmt_rate(lval)} vs libtorch `{bv}` {fmt_rate(bval)} = {fmt_x(r)}")
            oks.append(None if r is None else r > 1)
        add(f"{wl.lower()}_vs_libtorch",
            f"{wl} ahead of libtorch's threads (default options, 2 workers; every like-for-like pair)",
            "; ".join(parts) + " (samples/s)", None if None in oks else all(oks))
    # W1 with workers at least the 0-worker figure
    l2, l0 = sps("loader", "W1", "tensor"), sps("loader", "W1", "tensor", 0)
    r = l2 / l0 if l2 and l0 else None
    add("w1_vs_0_workers", "W1 (2 workers) ≥ loader with 0 workers",
        f"{fmt_rate(l2)} vs {fmt_rate(l0)} samples/s = {fmt_x(r)}", None if r is None else r >= 1)
    # W1 and W4 against PyTorch
    tt = sps("torch", "W1", "tensor")
    r = l2 / tt if l2 and tt else None
    add("w1_vs_torch", "W1 (2 workers) ≥ 100× PyTorch `tensor`",
        f"{fmt_rate(l2)} vs {fmt_rate(tt)} samples/s = {fmt_x(r)}", None if r is None else r >= 100)
    lg4, tp4 = sps("loader", "W4", "gen"), sps("torch", "W4", "python")
    r = lg4 / tp4 if lg4 and tp4 else None
    add("w4_vs_torch", "W4 (2 workers) ≥ 40× PyTorch `python`",
        f"{fmt_rate(lg4)} vs {fmt_rate(tp4)} samples/s = {fmt_x(r)}", None if r is None else r >= 40)
    # W2 against the copy limit
    mbs, lim = sps("loader", "W2", "tensor", key="MB_per_s"), memcpy_limit(mc, 2)
    r = mbs / lim if mbs and lim else None
    add("w2_memcpy", "W2 `tensor`, fresh workers each epoch, ≥ 80% of the two-thread memcpy limit",
        f"{r:.0%} ({mbs:.0f} of {lim:.0f} MB/s)" if r is not None else "—", None if r is None else r >= 0.8)
    # first batch with fresh workers
    for wl in ("W1", "W2", "W4"):
        fb = sps("loader", wl, PERSISTENT[wl][0], key="first_batch_s")
        add(f"{wl.lower()}_first_batch", f"{wl} first batch ≤ 10 ms, fresh workers (`{PERSISTENT[wl][0]}`)",
            f"{fmt_ms(fb)} ms" if fb is not None else "—", None if fb is None else fb <= 0.010)
    # epoch restart with persistent workers
    for wl in WORKLOADS:
        rs = sps("loader", wl, PERSISTENT[wl][0], persistent=True, key="warm_first_batch_s")
        add(f"{wl.lower()}_restart", f"{wl} epoch restart ≤ 1 ms, persistent workers (`{PERSISTENT[wl][0]}`, "
            "first batch of epochs ≥ 2)", f"{fmt_ms(rs)} ms" if rs is not None else "—",
            None if rs is None else rs <= 0.001)
    # parent CPU and context switches per batch: reported
    parts, have = [], True
    for wl in WORKLOADS:
        v = PERSISTENT[wl][0]
        us = sps("loader", wl, v, key="main_cpu_us_per_batch")
        cs = sps("loader", wl, v, key="ctx_switches_per_batch")
        wus = sps("loader", wl, v, persistent=True, key="main_cpu_us_per_batch")
        wcs = sps("loader", wl, v, persistent=True, key="ctx_switches_per_batch")
        if us is None or cs is None:
            have = False
            continue
        txt = f"{wl} {us:.0f} µs, {cs:.1f} switches"
        if wus is not None and wcs is not None:
            txt += f" (persistent {wus:.0f} µs, {wcs:.1f})"
        parts.append(txt)
    add("per_batch_cost", "parent CPU per batch and context switches per batch reported (2 workers)",
        "; ".join(parts) + " per batch" if parts else "—", True if have and parts else None)
    return out


def earlier_targets(res):
    """Targets of earlier issues, kept in view (same form, result PASS/MISS/NOT MEASURED)."""
    out = []
    lt, tt = res.stat("loader", "W3", "tensor", 2, "samples_per_s"), res.stat("torch", "W3", "tensor", 2,
                                                                                "samples_per_s")
    r = lt / tt if lt and tt else None
    out.append(dict(name="W3 (2 workers) ≥ 3× PyTorch `tensor`", measured=fmt_x(r),
                    result="NOT MEASURED" if r is None else ("PASS" if r >= 3 else "MISS")))
    overs = []
    for wl in WORKLOADS:
        a = res.stat("loader", wl, PERSISTENT[wl][0], 2, "self_peak_anon_mb")
        f = res.stat("loader", wl, PERSISTENT[wl][0], 2, "self_peak_file_mb")
        overs.append(a + f if a is not None and f is not None else None)
    omax = max(overs) if all(x is not None for x in overs) else None
    out.append(dict(name="peak memory ≤ dataset + slab pool + 50 MB (2 workers)",
                    measured="overhead " + " / ".join(f"{wl} {fmt_mb(x)}" for wl, x in zip(WORKLOADS, overs))
                    + " MB",
                    result="NOT MEASURED" if omax is None else ("PASS" if omax <= 50 else "MISS")))
    return out


def pf_title(res):
    return f"loader: memory vs prefetch_factor ({res.pf_workload} {res.pf_variant}, 2 workers)"


def write_report(args, res, mc, info, busy_start, busy_end, t_total, scaling, pf_rows, out_md, plot_files):
    W = args.workers_list
    lines = []
    A = lines.append
    has_lib = any(r["side"] == "libtorch" for r in res.recs)
    A("# Benchmarks: loader vs PyTorch DataLoader and libtorch `torch::data`")
    A("")
    A(f"Measured by `/usr/bin/python3 bench/side_by_side.py {' '.join(args.argv)}` in one run "
      f"(ended {args.date}, {t_total / 60:.1f} min, {args.rounds} round{'s' if args.rounds > 1 else ''}); "
      f"raw results: `{os.path.relpath(args.raw, ROOT)}`"
      + (f"; this page was written from them by `--from-raw` (same data, analysis added)." if args.from_raw
         else ".") + " Plots: " + ", ".join(f"`{os.path.basename(p)}`" for p in plot_files) + ".")
    A("")
    A("**Machine**: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".")
    A("")
    A(f"**libtorch peer**: {args.libtorch_note or 'not part of this run (results of an older script)'}."
      + ("" if has_lib else " Its columns below are empty (—) and the targets against it are "
         "NOT MEASURED."))
    A("")
    A("**To reproduce** (Debian 12, from a clone of the repository, nothing else needed):")
    A("")
    A("```sh")
    A("apt-get install -y build-essential cmake libcaf-dev libboost-dev zlib1g-dev nlohmann-json3-dev \\")
    A("    libdlpack-dev python3-torch python3-matplotlib libtorch-dev   # libtorch-dev: the libtorch peer")
    A("cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOADER_BUILD_TESTS=OFF \\")
    A("    -DLOADER_BUILD_DEMOS=OFF -DLOADER_BUILD_FUZZ=OFF")
    A("cmake --build build-bench -j\"$(nproc)\" --target loader_tool     # -> build-bench/loader")
    A(f"/usr/bin/python3 bench/side_by_side.py {' '.join(args.argv)}".rstrip()
      + "   # builds build-bench/peer_libtorch itself")
    A("```")
    A("")
    A("The script builds the libtorch peer (`bench/peer_libtorch`, a standalone CMake project) with "
      "`cmake -S bench/peer_libtorch -B build-bench/peer_libtorch -DCMAKE_BUILD_TYPE=Release && "
      "cmake --build build-bench/peer_libtorch` when the binary is missing or older than its source, and "
      "leaves that peer out, saying so here, when libtorch is not installed. `--quick` is a 2-minute smoke "
      "run whose report goes to `bench/results/quick.md`; `--rounds 3` interleaves three rounds; run it on "
      "an otherwise idle machine (the header below says how busy it was).")
    A("")
    other_share = med(r.get("other_cpu_share") for r in res.recs)
    other_max = max((r.get("other_cpu_share") or 0 for r in res.recs), default=0)
    A(f"**Other work on the machine**: busy processes at the start: {', '.join(busy_start) or 'none'}; "
      f"at the end: {', '.join(busy_end) or 'none'}. CPU time used outside the measured process tree "
      f"while configurations ran: median {other_share:.0%} of the machine, max {other_max:.0%} "
      f"(column `other_cpu_share` of the raw file); median by workload: "
      + ", ".join(f"{wl} {med(r.get('other_cpu_share') for r in res.recs if r['workload'] == wl):.0%}"
                  for wl in WORKLOADS if any(r['workload'] == wl for r in res.recs))
      + ". "
      + ("Figures taken while other work ran are noisier and pessimistic for both sides."
         if other_max > 0.05 else "The machine was otherwise idle."))
    A("")
    A("## How it was measured")
    A("")
    A("* Workloads exactly as `bench/WORKLOADS.md` defines them, at the timed suite's sizes "
      "(" + ", ".join(f"{w} N={WORKLOADS[w]['quickN' if args.quick else 'N']:,}" for w in WORKLOADS) + "), "
      f"shuffled map-style datasets, `drop_last=False`, {args.epochs} epochs per configuration; a figure is the "
      "median epoch of a run, and with several rounds the median over rounds (min–max in the raw file).")
    A("* **loader**: `loader bench --workload W --variant V --workers K --n N` (tools/bench_cmd.cpp). "
      "`tensor`: samples in a memory-mapped memory file (memfd) that the main process fills once "
      "(untimed) and every worker maps (one copy, shared). `gen`: every sample computed from its index. "
      "Map-style datasets implement `sample_spec()`/`get_into()`, so each sample is written once, into its "
      "row of the batch in the worker's shared-memory slab. Shuffle: `loader::Generator` seeded 0.")
    A("* **PyTorch** 1.13 (CPU): `bench/peer_torch.py --only W --variants V --workers K --n N` "
      "(`tensor`: TensorDataset over materialised tensors; `python`: a Python `__getitem__` with torch ops; "
      "fork start method).")
    A("* **libtorch** 1.13 (`torch::data`, C++, worker *threads*): `build-bench/peer_libtorch/peer_libtorch "
      "--only W --variants V --workers K --n N` (bench/peer_libtorch). `tensor`: `get(i)` returns rows of "
      "materialised tensors, batched by `Stack<>`; `tensor_batched`: a `BatchDataset` whose `get_batch` is "
      "one `index_select` per tensor; `gen`: each sample computed from its index by a C++ loop into a new "
      "tensor, `Stack<>` (W3 `tensor`: flip/normalise with torch ops; no `tensor_batched`). W1–W3 only (W4 "
      "is iterable-style). `RandomSampler` after `torch::manual_seed(0)`. libtorch's threads start in "
      "`make_data_loader` and serve every epoch of the loader, so its epoch 1 includes their start and its "
      "later epochs are warm; its figure is the median epoch like the others'.")
    A("* The sides alternate configuration by configuration (workload → workers → round → variant: loader, "
      "PyTorch, libtorch), so slow drifts of the machine hit all of them.")
    A("* `first batch`: from creating the epoch iterator to the first batch in hand (includes worker "
      "start-up without persistent workers). `epoch restart`: the same with `persistent_workers=True`, "
      "median over epochs 2–4 (workers already running).")
    A("* Memory: peak over the run of the sum of RSS over the process tree, sampled by this script every "
      "20 ms from `/proc/PID/statm` for every side (the tree is found by scanning `/proc/*/stat`; "
      "peer_torch.py's own sampler reads `/proc/PID/task/PID/children`, which this kernel does not have, "
      "so its own figure covers the main process only). RSS sums over-count pages several processes "
      "map: PyTorch's forked workers count the parent's materialised dataset again, loader's workers "
      "count the mapped dataset pages they touched. `loader mem` counts each page once: private memory "
      "of all processes + mapped files + each shared segment (dataset file, slab pool) once.")
    A("* Copy limit: `loader bench --memcpy` (glibc `memcpy` between two 256 MiB buffers per thread, "
      "best of 5 repetitions; as one call, and as 150,528-byte calls, which glibc serves with ordinary "
      "instead of non-temporal stores and which is faster here). `share of memcpy limit` = payload MB/s "
      "÷ the one-thread limit (0, 1 workers) or the two-thread limit (2 workers).")
    A("")
    A("### This machine's limits")
    A("")
    A("| copy | 1 thread | 2 threads |")
    A("|---|---:|---:|")
    names = {"stream": "memcpy, one call per 256 MiB buffer", "chunks": "memcpy, 150,528-byte calls over 256 MiB buffers",
             "rows": "memcpy of 150,528-byte rows into a 19 MB ring (cache-resident destination)",
             "write": "memset (write only)"}
    for k in ("stream", "chunks", "rows", "write"):
        if (k, 1) in mc:
            A(f"| {names[k]} | {mc.get((k, 1), 0) / 1e3:.2f} GB/s | {mc.get((k, 2), 0) / 1e3:.2f} GB/s |")
    A(f"| **streaming memcpy limit** (better of the first two) | {memcpy_limit(mc, 1) / 1e3:.2f} GB/s | "
      f"{memcpy_limit(mc, 2) / 1e3:.2f} GB/s |")
    A("")

    # ---- throughput tables
    def fail_note(side, wl, var, w):
        if not res.get(side, wl, var, w) and res.failed(side, wl, var, w):
            return f" ({side} failed: " + res.failed(side, wl, var, w)[0]["error"][:80] + ")"
        return ""

    def ratio(a, b):
        return fmt_x(a / b) if a and b else "—"

    A("## Throughput")
    A("")
    A("samples/s (median epoch); every loader and PyTorch epoch starts fresh workers "
      "(`persistent_workers=False`), libtorch's threads live as long as its loader (see above). "
      "Ratios are like for like, loader ÷ peer: in-memory data (loader `tensor` against PyTorch `tensor`, "
      "libtorch `tensor` and `tensor_batched`) and samples computed from their index (loader `gen` against "
      "PyTorch `python` and libtorch `gen`). `share of memcpy limit` = loader payload MB/s ÷ the streaming "
      "memcpy limit (one thread for 0–1 workers, two threads for 2 workers).")
    A("")
    A("### In-memory dataset (`tensor`)")
    A("")
    A("| workload | workers | loader | PyTorch | libtorch | libtorch batched | ÷ PyTorch | ÷ libtorch | "
      "÷ libtorch batched | loader MB/s | share of memcpy limit |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in [x for x in WORKLOADS if "tensor" in LOADER_VARIANTS[x]]:
        for w in W:
            lt = res.stat("loader", wl, "tensor", w, "samples_per_s")
            tt = res.stat("torch", wl, "tensor", w, "samples_per_s")
            bt = res.stat("libtorch", wl, "tensor", w, "samples_per_s")
            bb = res.stat("libtorch", wl, "tensor_batched", w, "samples_per_s")
            nb = "tensor_batched" in LIBTORCH_VARIANTS.get(wl, [])
            mbs = res.stat("loader", wl, "tensor", w, "MB_per_s")
            lim = memcpy_limit(mc, w)
            A(f"| {wl} | {w} | {fmt_rate(lt)}{fail_note('loader', wl, 'tensor', w)} | {fmt_rate(tt)} | "
              f"{fmt_rate(bt)} | {fmt_rate(bb) if nb else 'n/a'} | {ratio(lt, tt)} | {ratio(lt, bt)} | "
              f"{ratio(lt, bb) if nb else 'n/a'} | {f'{mbs:.0f}' if mbs else '—'} | "
              f"{f'{mbs / lim:.0%}' if mbs and lim else '—'} |")
    A("")
    A("### Samples computed from their index (loader `gen`, PyTorch `python`, libtorch `gen`)")
    A("")
    A("| workload | workers | loader | PyTorch | libtorch | ÷ PyTorch | ÷ libtorch | loader MB/s | "
      "share of memcpy limit |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        for w in W:
            lg = res.stat("loader", wl, "gen", w, "samples_per_s")
            tp = res.stat("torch", wl, "python", w, "samples_per_s")
            has = "gen" in LIBTORCH_VARIANTS.get(wl, [])
            bg = res.stat("libtorch", wl, "gen", w, "samples_per_s") if has else None
            mbs = res.stat("loader", wl, "gen", w, "MB_per_s")
            lim = memcpy_limit(mc, w)
            A(f"| {wl} | {w} | {fmt_rate(lg)}{fail_note('loader', wl, 'gen', w)} | {fmt_rate(tp)} | "
              f"{fmt_rate(bg) if has else 'n/a'} | {ratio(lg, tp)} | {ratio(lg, bg) if has else 'n/a'} | "
              f"{f'{mbs:.0f}' if mbs else '—'} | {f'{mbs / lim:.0%}' if mbs and lim else '—'} |")
    A("")
    A("Steady state: the same with `persistent_workers=True`, samples/s of the warm epochs 2–4 "
      "(no worker start-up, slabs already made); variants as in the latency table below. libtorch: "
      "its `tensor` variant's epochs 2.. (its threads always persist).")
    A("")
    A("| workload | workers | loader warm | torch warm | libtorch warm | ÷ torch | ÷ libtorch | loader warm MB/s | "
      "share of memcpy limit |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        has = "tensor" in LIBTORCH_VARIANTS.get(wl, [])
        for w in [x for x in W if x > 0]:
            lw = res.stat("loader", wl, lv, w, "warm_samples_per_s", True)
            tw = res.stat("torch", wl, tv, w, "warm_samples_per_s", True)
            bw = res.stat("libtorch", wl, "tensor", w, "warm_samples_per_s") if has else None
            mbs = lw * WORKLOADS[wl]["bytes"] / 1e6 if lw else None
            lim = memcpy_limit(mc, w)
            A(f"| {wl} | {w} | {fmt_rate(lw)} | {fmt_rate(tw)} | {fmt_rate(bw) if has else 'n/a'} | "
              f"{ratio(lw, tw)} | {ratio(lw, bw) if has else 'n/a'} | "
              f"{f'{mbs:.0f}' if mbs else '—'} | {f'{mbs / lim:.0%}' if mbs and lim else '—'} |")
    A("")
    for pf in plot_files[:1]:
        A(f"![samples/s per workload and worker count]({os.path.basename(pf)})")
        A("")

    # ---- latency table
    A("## Latency: first batch and epoch restart")
    A("")
    A("ms. `first batch` as above (median over epochs; every epoch starts fresh workers). `epoch restart`: "
      "the time from `iter()` to the first batch of epochs 2–4 with `persistent_workers=True` (median of "
      "the per-epoch `first_batch_s` that `loader bench --persistent` prints for epochs ≥ 2; variant: " +
      ", ".join(f"{wl} loader {PERSISTENT[wl][0]} / torch {PERSISTENT[wl][1]}" for wl in WORKLOADS) + "). "
      "libtorch (`tensor`): `first batch` is epoch 1's, from `make_data_loader` (its threads' start) to the "
      "first batch; `epoch restart` the median of its epochs 2.. (`begin()` to the first batch).")
    A("")
    A("| workload | workers | loader first batch | torch first batch | libtorch first batch | "
      "loader epoch restart | torch epoch restart | libtorch epoch restart |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        has = "tensor" in LIBTORCH_VARIANTS.get(wl, [])
        for w in W:
            A(f"| {wl} | {w} | {fmt_ms(res.stat('loader', wl, lv, w, 'first_batch_s'))} | "
              f"{fmt_ms(res.stat('torch', wl, tv, w, 'first_batch_s'))} | "
              f"{fmt_ms(res.stat('libtorch', wl, 'tensor', w, 'first_batch_s')) if has else 'n/a'} | "
              f"{fmt_ms(res.stat('loader', wl, lv, w, 'warm_first_batch_s', True)) if w > 0 else 'n/a'} | "
              f"{fmt_ms(res.stat('torch', wl, tv, w, 'warm_first_batch_s', True)) if w > 0 else 'n/a'} | "
              f"{fmt_ms(res.stat('libtorch', wl, 'tensor', w, 'warm_first_batch_s')) if has and w > 0 else 'n/a'} |")
    A("")

    # ---- memory table
    A("## Peak memory")
    A("")
    A("MB. `tree RSS`: sum of RSS over the process tree (same sampler for every side; over-counts "
      "shared pages). `loader mem`: each page once (see above); `dataset` is the memory file's size, "
      "`slabs` the shared segments beyond it; `overhead` = `loader mem` − dataset − slabs, i.e. "
      "private memory plus mapped program text of all processes. libtorch: its `tensor` variant (one "
      "process; its dataset materialised in it).")
    A("")
    A("| workload | workers | loader tree RSS | torch tree RSS | libtorch RSS | loader mem | dataset | slabs | "
      "overhead | sys Δ loader | sys Δ torch | sys Δ libtorch |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        has = "tensor" in LIBTORCH_VARIANTS.get(wl, [])
        for w in W:
            rec = res.get("loader", wl, lv, w)
            ds_mb = rec[0]["dataset_mb"] if rec else None
            shm = res.stat("loader", wl, lv, w, "self_peak_shm_mb")
            slabs = (shm - ds_mb) if shm is not None and ds_mb is not None else None
            lm = res.stat("loader", wl, lv, w, "self_peak_mem_mb")
            over = res.stat("loader", wl, lv, w, "self_peak_anon_mb")
            fmb = res.stat("loader", wl, lv, w, "self_peak_file_mb")
            A(f"| {wl} | {w} | {fmt_mb(res.stat('loader', wl, lv, w, 'ext_peak_tree_rss_mb'))} | "
              f"{fmt_mb(res.stat('torch', wl, tv, w, 'ext_peak_tree_rss_mb'))} | "
              f"{fmt_mb(res.stat('libtorch', wl, 'tensor', w, 'ext_peak_tree_rss_mb')) if has else 'n/a'} | "
              f"{fmt_mb(lm)} | {fmt_mb(ds_mb)} | "
              f"{fmt_mb(slabs)} | {fmt_mb(over + fmb if over is not None and fmb is not None else None)} | "
              f"{fmt_mb(res.stat('loader', wl, lv, w, 'ext_peak_sys_delta_mb'))} | "
              f"{fmt_mb(res.stat('torch', wl, tv, w, 'ext_peak_sys_delta_mb'))} | "
              f"{fmt_mb(res.stat('libtorch', wl, 'tensor', w, 'ext_peak_sys_delta_mb')) if has else 'n/a'} |")
    A("")

    # ---- targets
    targets = issue_targets(res, mc)
    causes = {}
    if args.causes and os.path.exists(args.causes):
        with open(args.causes) as f:
            causes = json.load(f)
    A("## Targets (issue 12)")
    A("")
    A("Computed by the script from this run's figures (2 workers; loader with fresh workers each epoch, "
      "`persistent_workers=False`, unless the target says otherwise). PASS: met; MISS: not met, with the "
      "measured figure; NOT MEASURED: a configuration it needs did not run or failed. Causes of misses "
      "come from `bench/target_causes.json` (by target id) and the *Analysis* section.")
    A("")
    A("| | target | measured | result | cause of a miss |")
    A("|---|---|---|:---:|---|")
    for t in targets:
        cause = ""
        if t["result"] == "MISS":
            cause = causes.get(t["id"], "_to be added_")
        elif t["result"] == "NOT MEASURED":
            cause = causes.get(t["id"], "")
        mark = {"PASS": "[x]", "MISS": "[ ]", "NOT MEASURED": "[ ]"}[t["result"]]
        A(f"| {mark} | {t['name']} (`{t['id']}`) | {t['measured']} | **{t['result']}** | {cause} |")
    A("")
    earlier = earlier_targets(res)
    A("Earlier targets, still tracked:")
    A("")
    A("| target | measured | result |")
    A("|---|---|:---:|")
    for t in earlier:
        A(f"| {t['name']} | {t['measured']} | {t['result']} |")
    A("")
    A("### Where loader's time goes")
    A("")
    A("CPU per epoch (median) of the main process (the application thread and the runtime's threads, "
      "without the memory sampler) and of the worker processes, from `getrusage` and `/proc/PID/stat`; "
      "these depend little on how busy the machine was. `main CPU µs/batch` and `ctx switches/batch` are "
      "the parent's cost of the batch path (`loader bench` prints them as `main_cpu_us_per_batch` and "
      "`ctx_switches_per_batch`; a context switch here is a voluntary one, a thread waiting for a batch). "
      "Rows `persistent`: `persistent_workers=True`, per-batch figures over the warm epochs 2 and later.")
    A("")
    A("| workload | variant | workers | workers started | epoch s | main CPU s | workers CPU s | "
      "main CPU µs/batch | ctx switches/batch |")
    A("|---|---|---:|---|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        rows = [(lv, w, False) for lv in LOADER_VARIANTS[wl] for w in W if w > 0]
        rows += [(PERSISTENT[wl][0], w, True) for w in W if w > 0]
        for lv, w, pers in rows:
            rs = res.get("loader", wl, lv, w, pers)
            if not rs:
                continue
            ep = med(r.get("epoch_s") for r in rs)
            mc_ = med(r.get("main_cpu_s") for r in rs)
            wc = med(r.get("workers_cpu_s") for r in rs)
            us = med(r.get("main_cpu_us_per_batch") for r in rs)
            cs = med(r.get("ctx_switches_per_batch") for r in rs)
            A(f"| {wl} | {lv} | {w} | {'persistent' if pers else 'each epoch'} | {ep:.3f} | {mc_:.3f} | "
              f"{wc:.3f} | {us:.0f} | {cs:.1f} |" if None not in (ep, mc_, wc, us, cs) else
              f"| {wl} | {lv} | {w} | {'persistent' if pers else 'each epoch'} | — | — | — | — | — |")
    A("")

    # ---- scaling
    A("## Scaling")
    A("")
    if scaling:
        ws = sorted({w for pts in scaling.values() for w in pts})
        A("loader samples/s against `num_workers` (variant: " +
          ", ".join(f"{wl} {PERSISTENT[wl][0]}" for wl in scaling) + "; this machine has "
          f"{os.cpu_count()} cores, so beyond 2 workers the processes share them).")
        A("")
        A("| workload | " + " | ".join(f"{w} workers" for w in ws) + " |")
        A("|---|" + "---:|" * len(ws))
        for wl, pts in scaling.items():
            A(f"| {wl} | " + " | ".join(fmt_rate(pts.get(w)) for w in ws) + " |")
        A("")
    if pf_rows:
        A(f"Memory against `prefetch_factor` ({res.pf_workload} `{res.pf_variant}`, 2 workers, "
          f"{fmt_mb(pf_rows[0][3])} MB dataset): each task in flight holds one batch "
          f"({WORKLOADS[res.pf_workload]['B'] * WORKLOADS[res.pf_workload]['bytes'] / 1e6:.1f} MB) of slab.")
        A("")
        A("| prefetch_factor | loader mem MB | tree RSS MB | shared segments MB | samples/s |")
        A("|---:|---:|---:|---:|---:|")
        for pf, memv, rss, ds, shm, sps in pf_rows:
            A(f"| {pf} | {fmt_mb(memv)} | {fmt_mb(rss)} | {fmt_mb(shm)} | {fmt_rate(sps)} |")
        A("")
    for pf in plot_files[1:]:
        A(f"![scaling]({os.path.basename(pf)})")
        A("")
    A("## Analysis")
    A("")
    A(args.analysis_text or "_(written by hand after the run: see the notes file passed with --analysis)_")
    A("")
    with open(out_md, "w") as f:
        f.write("\n".join(lines))
    return targets


# ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small N, 1 round, 2 epochs")
    ap.add_argument("--loader", default=os.path.join(ROOT, "build-bench", "loader"))
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--only", default="W1,W2,W3,W4")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=None, help="default 3 (quick 2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per configuration")
    ap.add_argument("--memcpy-mb", type=int, default=256)
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="no PyTorch peer (debugging)")
    ap.add_argument("--no-libtorch", action="store_true", help="no libtorch peer")
    ap.add_argument("--libtorch", default=None,
                    help="a peer_libtorch binary to use (default: build bench/peer_libtorch into "
                         "build-bench/peer_libtorch when missing or out of date)")
    ap.add_argument("--causes", default=os.path.join(HERE, "target_causes.json"),
                    help="JSON object target id -> cause, shown beside missed targets, if the file exists")
    ap.add_argument("--out", default=None, help="report path (default docs/benchmarks.md; quick: bench/results/quick.md)")
    ap.add_argument("--from-raw", default=None,
                    help="write the report from a results file of an earlier run (no measuring)")
    ap.add_argument("--analysis", default=os.path.join(HERE, "analysis.md"),
                    help="markdown file pasted into the report's Analysis section, if it exists")
    ap.add_argument("--probe", default=None,
                    help="W5: the jpeg_decode_probe binary (default: bench/jpeg_decode_probe beside --loader)")
    ap.add_argument("--probe-passes", type=int, default=3, help="W5: passes of the probe per thread count")
    args = ap.parse_args()
    args.workers_list = [int(x) for x in args.workers.split(",")]
    if args.epochs is None:
        args.epochs = 2 if args.quick else 3
    only = args.only.split(",")
    if "W5" in only:
        if only != ["W5"]:
            raise SystemExit("side_by_side.py: W5 runs on its own: --only W5")
        return w5_main(args)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.raw = os.path.join(HERE, "results", f"{'quick' if args.quick else 'full'}-{stamp}.jsonl")
    out_md = args.out or (os.path.join(HERE, "results", "quick.md") if args.quick
                          else os.path.join(ROOT, "docs", "benchmarks.md"))
    plot_dir = os.path.dirname(os.path.abspath(out_md))
    prefix = "quick_" if args.quick and not args.out else ""
    plot_files = [os.path.join(plot_dir, f"benchmarks_{prefix}samples_per_s.png"),
                  os.path.join(plot_dir, f"benchmarks_{prefix}scaling.png")]
    args.analysis_text = open(args.analysis).read() if os.path.exists(args.analysis) and not args.quick else ""

    if args.from_raw:
        recs = [json.loads(x) for x in open(args.from_raw) if x.strip()]
        args.raw = args.from_raw
    else:
        if not os.path.exists(args.loader):
            raise SystemExit(f"{args.loader} not found: build it first (BUILD_DIR=build-bench scripts/build.sh)")
        recs = measure(args, only)
    report(args, recs, out_md, plot_files)


def record_sink(path):
    """The raw file (closed by the caller), the records kept, and keep(rec): appends a record
    to both, one JSON line each, flushed at once (a run cut short keeps what it measured)."""
    raw = open(path, "w")
    recs = []

    def keep(rec):
        raw.write(json.dumps(rec) + "\n")
        raw.flush()
        recs.append(rec)

    return raw, recs, keep


def measure(args, only):
    """Runs everything; returns the records (also written, one JSON line each, to args.raw)."""
    t_all = time.perf_counter()
    info = machine()
    busy_start = busy_processes()
    log(f"machine: {info}; busy at start: {busy_start or 'none'}")
    raw, recs, keep = record_sink(args.raw)

    mc = run_memcpy(args)
    keep({"side": "memcpy", "workload": "-", "variant": "-", "workers": 0,
          "results": {f"{k}_{t}": v for (k, t), v in mc.items()}})

    def n_of(wl):
        return WORKLOADS[wl]["quickN" if args.quick else "N"]

    args.libtorch_exe, libtorch_note = ensure_libtorch(args)

    # main matrix + persistent matrix, alternating sides config by config
    for wl in only:
        n = n_of(wl)
        lib_vars = LIBTORCH_VARIANTS.get(wl, []) if args.libtorch_exe else []
        tor_vars = [] if args.no_torch else TORCH_VARIANTS[wl]
        for w in args.workers_list:
            for rnd in range(args.rounds):
                for k in range(max(len(LOADER_VARIANTS[wl]), len(tor_vars), len(lib_vars))):
                    if k < len(LOADER_VARIANTS[wl]):
                        keep(dict(run_loader(args, wl, LOADER_VARIANTS[wl][k], w, n, args.epochs), round=rnd))
                    if k < len(tor_vars):
                        keep(dict(run_torch(args, wl, tor_vars[k], w, n, args.epochs), round=rnd))
                    if k < len(lib_vars):
                        keep(dict(run_libtorch(args, wl, lib_vars[k], w, n, args.epochs), round=rnd))
                if w > 0:
                    lv, tv = PERSISTENT[wl]
                    keep(dict(run_loader(args, wl, lv, w, n, args.epochs + 1, persistent=True), round=rnd))
                    if not args.no_torch:
                        keep(dict(run_torch(args, wl, tv, w, n, args.epochs, persistent=True), round=rnd))

    # scaling (loader only): more workers than cores, and memory against prefetch_factor
    if not args.no_scaling:
        for wl in only:
            for w in (3, 4):
                if w not in args.workers_list:
                    keep(dict(run_loader(args, wl, PERSISTENT[wl][0], w, n_of(wl), args.epochs), round=0,
                              scaling=True))
        if PF_WORKLOAD in only:
            for pf in (1, 2, 4, 8):
                keep(dict(run_loader(args, PF_WORKLOAD, PF_VARIANT, 2, n_of(PF_WORKLOAD), args.epochs,
                                     prefetch=pf), round=0))
    busy_end = busy_processes()
    keep({"side": "run", "workload": "-", "variant": "-", "workers": 0, "machine": info,
          "busy_start": busy_start, "busy_end": busy_end, "total_s": time.perf_counter() - t_all,
          "argv": sys.argv[1:], "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
          "quick": args.quick, "rounds": args.rounds, "epochs": args.epochs,
          "workers_list": args.workers_list, "only": only, "libtorch": libtorch_note,
          "libtorch_ran": bool(args.libtorch_exe)})
    raw.close()
    return recs


def report(args, recs, out_md, plot_files):
    run = next(r for r in recs if r["side"] == "run")
    mc = {}
    for r in recs:
        if r["side"] == "memcpy":
            for key, v in r["results"].items():
                kind, t = key.rsplit("_", 1)
                mc[(kind, int(t))] = v
    # the measured run's settings win over this invocation's (--from-raw)
    args.quick, args.rounds, args.epochs = run["quick"], run["rounds"], run["epochs"]
    args.workers_list, args.argv, args.date = run["workers_list"], run["argv"], run["date"]
    only = run["only"]
    args.libtorch_note = run.get("libtorch")
    for r in recs:  # results of an older script: per-batch figures from the totals
        if r["side"] == "loader" and r.get("epochs") and "error" not in r and "main_cpu_us_per_batch" not in r:
            r.update(loader_per_batch(r["epochs"], r.get("persistent", False)))
    res = Results([r for r in recs if r["side"] in ("loader", "torch", "libtorch")])
    res.quick = args.quick
    res.pf_workload, res.pf_variant = PF_WORKLOAD, PF_VARIANT
    scaling = {}
    for wl in only:
        lv = PERSISTENT[wl][0]
        ws = sorted({r["workers"] for r in res.recs if r["side"] == "loader" and r["workload"] == wl
                     and r["variant"] == lv and not r.get("persistent") and r.get("prefetch_factor") is None})
        if any(w > 2 for w in ws):
            scaling[wl] = {w: res.stat("loader", wl, lv, w, "samples_per_s") for w in ws}
    pf_rows = []
    for pf in (1, 2, 4, 8):
        rs = res.get("loader", PF_WORKLOAD, PF_VARIANT, 2, prefetch=pf)
        if rs:
            r = rs[0]
            pf_rows.append((pf, r["self_peak_mem_mb"], r["ext_peak_tree_rss_mb"], r["dataset_mb"],
                            r["self_peak_shm_mb"], r["samples_per_s"]))
    plot(res, args.workers_list, plot_files[0], scaling, plot_files[1], pf_rows, None)
    targets = write_report(args, res, mc, run["machine"], run["busy_start"], run["busy_end"], run["total_s"],
                           scaling, pf_rows, out_md, plot_files if scaling or pf_rows else plot_files[:1])
    log(f"report: {out_md}; raw: {args.raw}; measured in {run['total_s'] / 60:.1f} min")
    for t in targets:
        log(f"target {t['id']}: {t['result']} ({t['measured']})")


# ----------------------------------------------------------------------------
# W5: JPEG files (WORKLOADS.md), loader against PyTorch + torchvision and the decode limit
# ----------------------------------------------------------------------------
W5_N, W5_QUICK_N, W5_CLASSES, W5_B = 3000, 640, 10, 64
W5_BEGIN, W5_END = "<!-- W5 begin: written by bench/side_by_side.py --only W5 -->", "<!-- W5 end -->"


def w5_cache_folder(n, seed=0):
    """The folder `loader bench --workload W5 --n N` generates and reuses (bench_workloads.cpp)."""
    base = os.environ.get("LOADER_CACHE_DIR") or (
        os.path.join(os.environ["XDG_CACHE_HOME"], "loader") if os.environ.get("XDG_CACHE_HOME") else
        os.path.join(os.environ["HOME"], ".cache", "loader") if os.environ.get("HOME") else "/tmp/loader-cache")
    return os.path.join(base, f"w5-n{n}-c{W5_CLASSES}-s{seed}-q90-g1")


def w5_folder(args, n):
    """The generated folder (made here, once, as `loader bench` would make it) and its figures."""
    root = w5_cache_folder(n)
    if not os.path.isdir(root):
        tmp = f"{root}.tmp-{os.getpid()}"
        os.makedirs(os.path.dirname(root), exist_ok=True)
        log(f"W5: generating {n} images into {root} (once)")
        p = subprocess.run([args.loader, "images", "make", "--out", tmp, "--n", str(n), "--classes",
                            str(W5_CLASSES), "--seed", "0"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"loader images make failed: {p.stderr.strip()}")
        try:
            os.rename(tmp, root)
        except OSError:
            if not os.path.isdir(root):
                raise
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".JPEG")]
    return dict(root=root, files=len(files), bytes=sum(os.path.getsize(f) for f in files))


def w5_probe_path(args):
    return args.probe or os.path.join(os.path.dirname(os.path.abspath(args.loader)), "bench", "jpeg_decode_probe")


def run_loader_w5(args, workers, n, epochs, decode_scaling=False):
    cmd = [args.loader, "bench", "--workload", "W5", "--workers", str(workers), "--n", str(n), "--epochs",
           str(epochs)] + (["--decode-scaling"] if decode_scaling else [])
    rc, out, err, ext = run_measured(cmd, args.timeout)
    eps = [json.loads(x) for x in out if x.startswith("{")]
    rec = dict(side="loader", workload="W5", variant="train" + ("+scaling" if decode_scaling else ""), workers=workers,
               N=n, rc=rc, epochs=eps, **ext)
    if rc != 0 or not eps:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"loader W5/w{workers}{'/scaling' if decode_scaling else ''}: FAILED ({rec['error']})")
        return rec
    m = lambda k: statistics.median(e.get(k, 0) for e in eps)  # noqa: E731
    rec.update(samples_per_s=n / m("epoch_s"), jpeg_MB_per_s=m("jpeg_MB_per_s"), first_batch_s=m("first_batch_s"),
               main_cpu_us_per_batch=m("main_cpu_us_per_batch"), ctx_switches_per_batch=m("ctx_switches_per_batch"),
               workers_busy_s=m("stage_workers_busy_s"), workers_cpu_s=m("workers_cpu_s"), main_cpu_s=m("main_cpu_s"),
               epoch_s=m("epoch_s"), root=eps[0].get("root"), ok=all(e["ok"] for e in eps))
    log(f"loader W5/w{workers}{'/scaling' if decode_scaling else ''}: {rec['samples_per_s']:8.0f} img/s, "
        f"{rec['jpeg_MB_per_s']:6.1f} MB/s JPEG, first {rec['first_batch_s'] * 1e3:7.1f} ms, "
        f"parent {rec['main_cpu_us_per_batch']:.0f} us/batch, other CPU {ext['other_cpu_share']:.0%}")
    return rec


def run_torch_w5(args, workers, n, epochs, root):
    cmd = [sys.executable, PEER, "--only", "W5", "--root", root, "--workers", str(workers), "--epochs", str(epochs),
           "--matrix", "main"]
    rc, out, err, ext = run_measured(cmd, args.timeout)
    lines = [json.loads(x) for x in out if x.startswith("{")]
    rec = dict(side="torch", workload="W5", variant="torchvision", workers=workers, N=n, rc=rc, **ext)
    if rc != 0 or not lines:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"torch W5/w{workers}: FAILED ({rec['error']})")
        return rec
    t = lines[-1]
    rec.update(samples_per_s=t["samples_per_s"], jpeg_MB_per_s=t["jpeg_MB_per_s"], first_batch_s=t["first_batch_s"],
               epoch_s=statistics.median(t["epoch_s"]), torch=t, ok=t["N"] == n)
    log(f"torch  W5/w{workers}: {rec['samples_per_s']:8.0f} img/s, {rec['jpeg_MB_per_s']:6.1f} MB/s JPEG, "
        f"first {rec['first_batch_s'] * 1e3:7.1f} ms, other CPU {ext['other_cpu_share']:.0%}")
    return rec


def run_probe_w5(args, root, threads):
    cmd = [w5_probe_path(args), "--root", root, "--threads", ",".join(str(t) for t in threads), "--passes",
           str(args.probe_passes), "--pipeline", "train"]
    rc, out, err, ext = run_measured(cmd, args.timeout)
    lines = [json.loads(x) for x in out if x.startswith("{")]
    rec = dict(side="probe", workload="W5", variant="tjDecompress2", workers=0, rc=rc, **ext)
    if rc != 0 or not lines:
        rec["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        log(f"probe: FAILED ({rec['error']})")
        return rec
    rec["decode"] = {str(x["threads"]): x for x in lines if x["probe"] == "tjDecompress2"}
    rec["pipeline"] = next((x for x in lines if x["probe"] == "pipeline"), None)
    for t, x in sorted(rec["decode"].items()):
        log(f"probe  tjDecompress2 x{t}: {x['images_per_s']:8.0f} img/s, {x['MB_per_s']:6.1f} MB/s JPEG")
    if rec["pipeline"]:
        pl = rec["pipeline"]
        log(f"probe  pipeline: read {pl['read_ms']:.3f} + full decode {pl['decode_ms']:.3f} (region decode "
            f"{pl['region_decode_ms']:.3f}, {pl['region_share']:.0%} region-decoded) + transform "
            f"{pl['transform_ms']:.3f} ms/img; load {pl['load_ms']:.3f} ms, decode_scaling {pl['scaled_load_ms']:.3f} ms")
    return rec


def w5_measure(args):
    t_all = time.perf_counter()
    info = machine()
    busy_start = busy_processes()
    n = W5_QUICK_N if args.quick else W5_N
    folder = w5_folder(args, n)
    log(f"W5: {folder['files']} files, {folder['bytes'] / 1e6:.1f} MB in {folder['root']}; busy at start: "
        f"{busy_start or 'none'}")
    if not os.access(w5_probe_path(args), os.X_OK):
        raise SystemExit(f"{w5_probe_path(args)} not found: build it (cmake --build BUILD --target jpeg_decode_probe) "
                         "or pass --probe")
    raw, recs, keep = record_sink(args.raw)

    threads = sorted({max(1, w) for w in args.workers_list})
    for rnd in range(args.rounds):
        for w in args.workers_list:
            keep(dict(run_loader_w5(args, w, n, args.epochs), round=rnd))
            if not args.no_torch:
                keep(dict(run_torch_w5(args, w, n, args.epochs, folder["root"]), round=rnd))
            keep(dict(run_loader_w5(args, w, n, args.epochs, decode_scaling=True), round=rnd))
        keep(dict(run_probe_w5(args, folder["root"], threads), round=rnd))
    keep({"side": "w5-run", "workload": "W5", "variant": "-", "workers": 0, "machine": info, "folder": folder,
          "busy_start": busy_start, "busy_end": busy_processes(), "total_s": time.perf_counter() - t_all,
          "argv": sys.argv[1:], "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "quick": args.quick,
          "rounds": args.rounds, "epochs": args.epochs, "workers_list": args.workers_list, "N": n})
    raw.close()
    return recs


def fmt_img(x):
    """Images per second, whole numbers (W5's rates are thousands, not millions)."""
    return "—" if x is None else f"{x:,.0f}"


def w5_targets(get, limit, workers=2):
    """The W5 goals (issue 50): (id, name, measured, result)."""
    out = []

    def add(tid, name, measured, ok):
        out.append(dict(id=tid, name=name, measured=measured,
                        result="NOT MEASURED" if ok is None else ("PASS" if ok else "MISS")))
    lo, tv, ls = get("loader", "train", workers), get("torch", "torchvision", workers), \
        get("loader", "train+scaling", workers)
    r = lo / tv if lo and tv else None
    rs = ls / tv if ls and tv else None
    add("w5_vs_torchvision", f"W5 ({workers} workers) ≥ 3.2× PyTorch + torchvision with the same workers "
        "(decode_scaling off, region decoding on: torchvision's pixels)", f"{fmt_img(lo)} vs {fmt_img(tv)} img/s = "
        f"{fmt_x(r)}; with decode_scaling {fmt_img(ls)} img/s = {fmt_x(rs)}", None if r is None else r >= 3.2)
    lim = limit(workers)
    r = lo / lim if lo and lim else None
    add("w5_decode_limit", f"W5 ({workers} workers) ≥ 95% of the libjpeg-turbo full-decode limit on "
        f"{max(1, workers)} threads, same run", f"{r:.0%} ({fmt_img(lo)} of {fmt_img(lim)} img/s)"
        if r is not None else "—", None if r is None else r >= 0.95)
    lo0, lim1 = get("loader", "train", 0), limit(0)
    r0 = lo0 / lim1 if lo0 and lim1 else None
    add("w5_decode_limit_w0", "W5 (0 workers) ≥ 90% of the one-thread full-decode limit, same run",
        f"{r0:.0%} ({fmt_img(lo0)} of {fmt_img(lim1)} img/s)" if r0 is not None else "—",
        None if r0 is None else r0 >= 0.90)
    fb = get("loader", "train", workers, "first_batch_s")
    add("w5_first_batch", f"W5 first batch ≤ 80 ms ({workers} workers, started with the epoch)",
        f"{fmt_ms(fb)} ms" if fb is not None else "—", None if fb is None else fb <= 0.080)
    return out


def w5_report(args, recs):
    run = next(r for r in recs if r["side"] == "w5-run")
    W = run["workers_list"]
    res = [r for r in recs if r["side"] in ("loader", "torch") and "error" not in r]
    probes = [r for r in recs if r["side"] == "probe" and "error" not in r]

    def get(side, variant, w, key="samples_per_s"):
        return med(r.get(key) for r in res if r["side"] == side and r["variant"] == variant and r["workers"] == w)

    def rng(side, variant, w, key="samples_per_s"):
        return spread(r.get(key) for r in res if r["side"] == side and r["variant"] == variant and r["workers"] == w)

    def limit(w, key="images_per_s"):
        return med(p["decode"].get(str(max(1, w)), {}).get(key) for p in probes)

    def pipe(key):
        return med((p.get("pipeline") or {}).get(key) for p in probes)

    folder, n = run["folder"], run["N"]
    info = run["machine"]
    other = med(r.get("other_cpu_share") for r in recs if r.get("other_cpu_share") is not None)
    other_max = max((r.get("other_cpu_share") or 0 for r in recs), default=0)
    L = []
    A = L.append
    A(W5_BEGIN)
    A(f"## W5: JPEG files, the ImageNet training transform ({run['date']}, one side-by-side run)")
    A("")
    A(f"`/usr/bin/python3 bench/side_by_side.py {' '.join(run['argv'])}` on `{info.get('git', '?')}`"
      f"{' (uncommitted changes)' if info.get('git_dirty') else ''}: loader (`loader bench --workload W5`), PyTorch "
      f"{info.get('torch', '?')} + torchvision (`bench/peer_torch.py --only W5`) and the decode limit "
      f"(`bench/jpeg_decode_probe`) alternating in {run['rounds']} round{'s' if run['rounds'] > 1 else ''} of "
      f"{run['epochs']} epochs each, medians (min–max over rounds in brackets); {run['total_s'] / 60:.1f} min; raw "
      f"lines `{os.path.relpath(args.raw, ROOT)}`. Folder: {folder['files']:,} files generated by `loader images "
      f"make --n {n} --classes {W5_CLASSES} --seed 0` ({folder['bytes'] / 1e6:.0f} MB, "
      f"{folder['bytes'] / max(1, folder['files']) / 1e3:.1f} KB per file), read through the page cache. Machine: "
      f"{info.get('Model name', '?')}, {info.get('cpus')} CPUs. Other CPU: median {other:.0%}, max {other_max:.0%} "
      "of the machine" + (" (the figures are noisier than on an idle machine)." if other_max > 0.05 else "."))
    A("")
    A("| workers | loader img/s | loader + decode_scaling | PyTorch + torchvision | ÷ torchvision | ÷ torchvision, "
      "scaling | decode limit (threads) | share of limit | loader JPEG MB/s | first batch loader / torchvision ms "
      "| parent CPU µs/batch |")
    A("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in W:
        lo, ls, tv = get("loader", "train", w), get("loader", "train+scaling", w), get("torch", "torchvision", w)
        lim = limit(w)
        jmb = get("loader", "train", w, "jpeg_MB_per_s")
        a, b = rng("loader", "train", w)
        sp = f" ({a:.0f}–{b:.0f})" if a is not None and run["rounds"] > 1 else ""
        A(f"| {w} | {fmt_img(lo)}{sp} | {fmt_img(ls)} | {fmt_img(tv)} | {fmt_x(lo / tv) if lo and tv else '—'} | "
          f"{fmt_x(ls / tv) if ls and tv else '—'} | {fmt_img(lim)} ({max(1, w)}) | "
          f"{f'{lo / lim:.0%}' if lo and lim else '—'} | "
          f"{f'{jmb:.1f}' if jmb else '—'} | "
          f"{fmt_ms(get('loader', 'train', w, 'first_batch_s'))} / {fmt_ms(get('torch', 'torchvision', w, 'first_batch_s'))} | "
          + (f"{get('loader', 'train', w, 'main_cpu_us_per_batch') or 0:.0f} |" if w > 0 else "n/a (it loads) |"))
    A("")
    targets = w5_targets(get, limit, 2 if 2 in W else max(W))
    causes = {}
    if args.causes and os.path.exists(args.causes):
        with open(args.causes) as f:
            causes = json.load(f)
    A("| goal (issue 50) | measured | result | cause of a miss (`bench/target_causes.json`) |")
    A("|---|---|:---:|---|")
    for t in targets:
        cause = causes.get(t["id"], "_to be added_") if t["result"] == "MISS" else ""
        A(f"| {t['name']} (`{t['id']}`) | {t['measured']} | **{t['result']}** | {cause} |")
    A("")
    rd, de, tr, sc = pipe("read_ms"), pipe("decode_ms"), pipe("transform_ms"), pipe("scaled_load_ms")
    rde, rsh, ld, lf = pipe("region_decode_ms"), pipe("region_share"), pipe("load_ms"), pipe("load_full_ms")
    if rde is not None:
        A(f"Region decoding (issue 50; `jpeg_decode_probe --pipeline train`, one thread, per image): "
          f"{rsh:.0%} of the files region-decoded (the rest: a box of more than 90% of the image, decoded whole); "
          f"full decode {de:.3f} ms, region decode {rde:.3f} ms of the box RandomResizedCrop drew from the header: "
          f"{de - rde:.3f} ms ({(de - rde) / de:.0%}) of decode time saved; the whole load (decode + transform, "
          f"one call as the dataset makes it) {ld:.3f} ms with region decoding, {lf:.3f} ms without, "
          f"{sc:.3f} ms with decode_scaling as well. The pixels are a full decode's (torchvision's): "
          "`ctest -R ImageRegion`.")
        A("")
    if de is not None:
        A("Where a worker's time goes (per image; `jpeg_decode_probe --pipeline train`, one thread, loader's own "
          f"code: read {rd:.2f} ms, decode {de:.2f} ms, crop + resize + flip + normalise {tr:.2f} ms; with "
          f"decode_scaling, decode + transform {sc:.2f} ms). As shares of the worker time per image in the loader "
          "runs (`stage_workers_busy_s` ÷ images; with 0 workers the epoch's time ÷ images); `rest` is reading "
          "the file, seeding, writing the batch row and the task's messages:")
        A("")
        A("| workers | worker ms per image | decode (region) | resize (+ flip, normalise) | rest |")
        A("|---:|---:|---:|---:|---:|")
        for w in W:
            per = (get("loader", "train", w, "workers_busy_s") if w > 0 else get("loader", "train", w, "epoch_s"))
            if not per:
                continue
            per = per / n * 1e3
            dd = rde if rde is not None else de  # what the worker decodes: the region
            A(f"| {w} | {per:.2f} | {dd / per:.0%} | {tr / per:.0%} | {max(0.0, 1 - (dd + tr) / per):.0%} |")
        A("")
    fails = [r for r in recs if "error" in r]
    if fails:
        A("Failed configurations: " + "; ".join(f"{r['side']} W5/{r['variant']}/w{r['workers']}: {r['error'][:100]}"
                                                  for r in fails) + ".")
        A("")
    bad = [r for r in res if r["side"] == "loader" and not r.get("ok")]
    A("Every loader epoch's label sum and sample count checked: " + (
        "all ok." if not bad else f"{len(bad)} run(s) FAILED the check."))
    if args.plot_w5:
        A("")
        A(f"![W5 images/s]({os.path.basename(args.plot_w5)})")
    A(W5_END)
    return "\n".join(L), targets


def w5_plot(args, recs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    run = next(r for r in recs if r["side"] == "w5-run")
    W = run["workers_list"]
    res = [r for r in recs if r["side"] in ("loader", "torch") and "error" not in r]
    probes = [r for r in recs if r["side"] == "probe" and "error" not in r]
    series = [("loader", "train", "#1f77b4", "loader"), ("loader", "train+scaling", "#6baed6",
                                                         "loader + decode_scaling"),
              ("torch", "torchvision", "#d62728", "PyTorch + torchvision")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / (len(series) + 1)
    for k, (side, var, color, label) in enumerate(series):
        vals = [med(r["samples_per_s"] for r in res if r["side"] == side and r["variant"] == var and r["workers"] == w)
                for w in W]
        ax.bar([i + (k - len(series) / 2) * width for i in range(len(W))], [v or 0 for v in vals], width,
               color=color, label=label)
    lim = [med(p["decode"].get(str(max(1, w)), {}).get("images_per_s") for p in probes) for w in W]
    ax.bar([i + (len(series) - len(series) / 2) * width for i in range(len(W))], [v or 0 for v in lim], width,
           color="#999999", label="tjDecompress2 limit (threads = max(1, workers))")
    ax.set_xticks(range(len(W)))
    ax.set_xticklabels([f"{w} workers" for w in W])
    ax.set_ylabel("images/s")
    ax.set_title(f"W5: {run['N']:,} JPEG files, RandomResizedCrop(224) + flip + normalise, batch 64")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot_w5, dpi=110)
    plt.close(fig)


def w5_write(args, text, out_md):
    """Replaces the W5 section of out_md (between its markers), or puts it right after the title."""
    old = open(out_md).read() if os.path.exists(out_md) else "# Benchmarks\n"
    if W5_BEGIN in old and W5_END in old:
        a = old.index(W5_BEGIN)
        b = old.index(W5_END) + len(W5_END)
        new = old[:a] + text + old[b:]
    else:
        first, _, rest = old.partition("\n")
        new = first + "\n\n" + text + "\n" + ("\n" + rest.lstrip("\n") if rest.strip() else "")
    with open(out_md, "w") as f:
        f.write(new if new.endswith("\n") else new + "\n")


def w5_main(args):
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.from_raw:
        recs = [json.loads(x) for x in open(args.from_raw) if x.strip()]
        args.raw = args.from_raw
    else:
        if not os.path.exists(args.loader):
            raise SystemExit(f"{args.loader} not found: build it first (BUILD_DIR=build-bench scripts/build.sh)")
        args.raw = os.path.join(HERE, "results", f"w5-{'quick' if args.quick else 'full'}-{stamp}.jsonl")
        recs = w5_measure(args)
    out_md = args.out or (os.path.join(HERE, "results", "quick.md") if args.quick
                          else os.path.join(ROOT, "docs", "benchmarks.md"))
    args.plot_w5 = os.path.join(os.path.dirname(os.path.abspath(out_md)),
                                "benchmarks_w5.png" if not args.quick else "benchmarks_quick_w5.png")
    try:
        w5_plot(args, recs)
    except ImportError:
        args.plot_w5 = None
    text, targets = w5_report(args, recs)
    w5_write(args, text, out_md)
    log(f"report: {out_md} (W5 section); raw: {args.raw}")
    for t in targets:
        log(f"target {t['id']}: {t['result']} ({t['measured']})")


if __name__ == "__main__":
    main()
