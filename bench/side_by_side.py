#!/usr/bin/python3
"""loader vs PyTorch on the standard workloads, side by side, in one run.

Runs `loader bench` and bench/peer_torch.py (PyTorch's DataLoader, the
`tensor` and `python` variants) alternately on the same workloads, sizes and worker
counts, measures this machine's copy bandwidth (`loader bench --memcpy`), and writes
the report docs/benchmarks.md with its plots docs/benchmarks_*.png.

    /usr/bin/python3 bench/side_by_side.py                 # full run (~10 min per round)
    /usr/bin/python3 bench/side_by_side.py --rounds 3      # 3 interleaved rounds (WORKLOADS.md)
    /usr/bin/python3 bench/side_by_side.py --quick         # smoke run (< 2 min), report in bench/results/

Every configuration runs in its own process; this script samples that process tree
from /proc every 20 ms (the same way for both sides) for its memory, and the
system-wide CPU time spent outside it (other work on the machine), and keeps every
raw JSON line in bench/results/.
"""
import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(ROOT, "bench", "peer_torch.py")
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
# like-for-like pairs for the ratio column
PAIRS = {"tensor": "tensor", "gen": "python"}
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
        batches=epochs_json[0]["batches"],
        epoch_s=statistics.median(eps),
        ok=all(e["ok"] for e in epochs_json),
    )
    log(f"loader {wl}/{variant}/w{workers}{'/persistent' if persistent else ''}"
        f"{'' if prefetch is None else '/pf' + str(prefetch)}: {rec['samples_per_s']:>12.0f} samples/s, "
        f"first {rec['first_batch_s'] * 1e3:7.2f} ms, tree RSS {ext['ext_peak_tree_rss_mb']:.0f} MB, "
        f"other CPU {ext['other_cpu_share']:.0%}")
    return rec


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
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.6))
    series = [("loader", "tensor", "#1f77b4", "loader tensor (mmap)"), ("loader", "gen", "#6baed6", "loader gen"),
              ("torch", "tensor", "#d62728", "torch tensor"), ("torch", "python", "#fc9272", "torch python")]
    for ax, wl in zip(axes, ["W1", "W2", "W3", "W4"]):
        width = 0.2
        for k, (side, var, color, label) in enumerate(series):
            vals = [res.stat(side, wl, var, w, "samples_per_s") for w in workers_list]
            xs = [i + (k - 1.5) * width for i in range(len(workers_list))]
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
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)
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


def pf_title(res):
    return f"loader: memory vs prefetch_factor ({res.pf_workload} {res.pf_variant}, 2 workers)"


def write_report(args, res, mc, info, busy_start, busy_end, t_total, scaling, pf_rows, out_md, plot_files):
    W = args.workers_list
    lines = []
    A = lines.append
    A("# Benchmarks: loader vs PyTorch DataLoader")
    A("")
    A(f"Measured by `/usr/bin/python3 bench/side_by_side.py {' '.join(args.argv)}` in one run "
      f"(ended {args.date}, {t_total / 60:.1f} min, {args.rounds} round{'s' if args.rounds > 1 else ''}); "
      f"raw results: `{os.path.relpath(args.raw, ROOT)}`"
      + (f"; this page was written from them by `--from-raw` (same data, analysis added)." if args.from_raw
         else ".") + " Plots: " + ", ".join(f"`{os.path.basename(p)}`" for p in plot_files) + ".")
    A("")
    A("**Machine**: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".")
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
    A("* The two sides alternate configuration by configuration (workload → workers → round), so slow drifts "
      "of the machine hit both.")
    A("* `first batch`: from creating the epoch iterator to the first batch in hand (includes worker "
      "start-up without persistent workers). `epoch restart`: the same with `persistent_workers=True`, "
      "median over epochs 2–4 (workers already running).")
    A("* Memory: peak over the run of the sum of RSS over the process tree, sampled by this script every "
      "20 ms from `/proc/PID/statm` for both sides (the tree is found by scanning `/proc/*/stat`; "
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

    # ---- throughput table
    A("## Throughput")
    A("")
    A("samples/s (median epoch). Ratios are like for like: loader `tensor` ÷ torch `tensor`, "
      "loader `gen` ÷ torch `python` (W4: loader `gen` ÷ torch `python`).")
    A("")
    A("| workload | workers | loader tensor | loader gen | torch tensor | torch python | ratio tensor | ratio gen | "
      "loader MB/s | share of memcpy limit |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        for w in W:
            lt = res.stat("loader", wl, "tensor", w, "samples_per_s") if wl != "W4" else None
            lg = res.stat("loader", wl, "gen", w, "samples_per_s")
            tt = res.stat("torch", wl, "tensor", w, "samples_per_s") if wl != "W4" else None
            tp = res.stat("torch", wl, "python", w, "samples_per_s")
            best_var = "tensor" if wl != "W4" else "gen"
            mbs = res.stat("loader", wl, best_var, w, "MB_per_s")
            lim = memcpy_limit(mc, w)
            fail = ""
            if not res.get("loader", wl, best_var, w) and res.failed("loader", wl, best_var, w):
                fail = " (loader failed: " + res.failed("loader", wl, best_var, w)[0]["error"][:80] + ")"
            share = f"{mbs / lim:.0%}" if mbs and lim else "—"
            A(f"| {wl} | {w} | {fmt_rate(lt) if wl != 'W4' else 'n/a'} | {fmt_rate(lg)} | "
              f"{fmt_rate(tt) if wl != 'W4' else 'n/a'} | {fmt_rate(tp)} | "
              f"{fmt_x(lt / tt) if lt and tt else '—'} | {fmt_x(lg / tp) if lg and tp else '—'} | "
              f"{(f'{mbs:.0f}' if mbs else '—')}{fail} | {share} |")
    A("")
    A("Steady state: the same with `persistent_workers=True`, samples/s of the warm epochs 2–4 "
      "(no worker start-up, slabs already made); variants as in the latency table below.")
    A("")
    A("| workload | workers | loader warm | torch warm | ratio | loader warm MB/s | share of memcpy limit |")
    A("|---|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        for w in [x for x in W if x > 0]:
            lw = res.stat("loader", wl, lv, w, "warm_samples_per_s", True)
            tw = res.stat("torch", wl, tv, w, "warm_samples_per_s", True)
            mbs = lw * WORKLOADS[wl]["bytes"] / 1e6 if lw else None
            lim = memcpy_limit(mc, w)
            A(f"| {wl} | {w} | {fmt_rate(lw)} | {fmt_rate(tw)} | {fmt_x(lw / tw) if lw and tw else '—'} | "
              f"{f'{mbs:.0f}' if mbs else '—'} | {f'{mbs / lim:.0%}' if mbs and lim else '—'} |")
    A("")
    for pf in plot_files[:1]:
        A(f"![samples/s per workload and worker count]({os.path.basename(pf)})")
        A("")

    # ---- latency table
    A("## Latency: first batch and epoch restart")
    A("")
    A("ms. `first batch` as above (median over epochs; every epoch starts fresh workers). `epoch restart`: "
      "first batch of epochs 2–4 with `persistent_workers=True` (variant: " +
      ", ".join(f"{wl} loader {PERSISTENT[wl][0]} / torch {PERSISTENT[wl][1]}" for wl in WORKLOADS) + ").")
    A("")
    A("| workload | workers | loader first batch | torch first batch | loader epoch restart | torch epoch restart |")
    A("|---|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        for w in W:
            A(f"| {wl} | {w} | {fmt_ms(res.stat('loader', wl, lv, w, 'first_batch_s'))} | "
              f"{fmt_ms(res.stat('torch', wl, tv, w, 'first_batch_s'))} | "
              f"{fmt_ms(res.stat('loader', wl, lv, w, 'warm_first_batch_s', True)) if w > 0 else 'n/a'} | "
              f"{fmt_ms(res.stat('torch', wl, tv, w, 'warm_first_batch_s', True)) if w > 0 else 'n/a'} |")
    A("")

    # ---- memory table
    A("## Peak memory")
    A("")
    A("MB. `tree RSS`: sum of RSS over the process tree (same sampler for both sides; over-counts "
      "shared pages). `loader mem`: each page once (see above); `dataset` is the memory file's size, "
      "`slabs` the shared segments beyond it; `overhead` = `loader mem` − dataset − slabs, i.e. "
      "private memory plus mapped program text of all processes.")
    A("")
    A("| workload | workers | loader tree RSS | torch tree RSS | loader mem | dataset | slabs | overhead | "
      "sys Δ loader | sys Δ torch |")
    A("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        lv, tv = PERSISTENT[wl]
        for w in W:
            rec = res.get("loader", wl, lv, w)
            ds_mb = rec[0]["dataset_mb"] if rec else None
            shm = res.stat("loader", wl, lv, w, "self_peak_shm_mb")
            slabs = (shm - ds_mb) if shm is not None and ds_mb is not None else None
            lm = res.stat("loader", wl, lv, w, "self_peak_mem_mb")
            over = res.stat("loader", wl, lv, w, "self_peak_anon_mb")
            fmb = res.stat("loader", wl, lv, w, "self_peak_file_mb")
            A(f"| {wl} | {w} | {fmt_mb(res.stat('loader', wl, lv, w, 'ext_peak_tree_rss_mb'))} | "
              f"{fmt_mb(res.stat('torch', wl, tv, w, 'ext_peak_tree_rss_mb'))} | {fmt_mb(lm)} | {fmt_mb(ds_mb)} | "
              f"{fmt_mb(slabs)} | {fmt_mb(over + fmb if over is not None and fmb is not None else None)} | "
              f"{fmt_mb(res.stat('loader', wl, lv, w, 'ext_peak_sys_delta_mb'))} | "
              f"{fmt_mb(res.stat('torch', wl, tv, w, 'ext_peak_sys_delta_mb'))} |")
    A("")

    # ---- targets
    A("## Targets (2 workers, ratios from this run)")
    A("")
    A("| target | measured | met |")
    A("|---|---:|:---:|")
    targets = []

    def t_row(name, val, ok, txt):
        targets.append((name, ok))
        A(f"| {name} | {txt if val is not None else 'not measured'} | "
          f"{'yes' if ok else ('no' if val is not None else '—')} |")

    lt = res.stat("loader", "W1", "tensor", 2, "samples_per_s")
    tt = res.stat("torch", "W1", "tensor", 2, "samples_per_s")
    r = lt / tt if lt and tt else None
    t_row("W1 ≥ 100× torch `tensor`", r, r is not None and r >= 100, fmt_x(r))
    mbs = res.stat("loader", "W2", "tensor", 2, "MB_per_s")
    lim = memcpy_limit(mc, 2)
    r = mbs / lim if mbs and lim else None
    t_row("W2 ≥ 80% of the 2-thread memcpy limit", r, r is not None and r >= 0.8,
          f"{r:.0%} ({mbs:.0f} of {lim:.0f} MB/s)" if r else "")
    lt = res.stat("loader", "W3", "tensor", 2, "samples_per_s")
    tt = res.stat("torch", "W3", "tensor", 2, "samples_per_s")
    r = lt / tt if lt and tt else None
    t_row("W3 ≥ 3× torch `tensor`", r, r is not None and r >= 3, fmt_x(r))
    lg = res.stat("loader", "W4", "gen", 2, "samples_per_s")
    tp = res.stat("torch", "W4", "python", 2, "samples_per_s")
    r = lg / tp if lg and tp else None
    t_row("W4 ≥ 40× torch `python`", r, r is not None and r >= 40, fmt_x(r))
    fbs = [res.stat("loader", wl, PERSISTENT[wl][0], 2, "first_batch_s") for wl in WORKLOADS]
    fb = max(fbs) if all(x is not None for x in fbs) else None
    t_row("first batch ≤ 10 ms (worst workload)", fb, fb is not None and fb <= 0.010,
          " / ".join(f"{wl} {fmt_ms(x)}" for wl, x in zip(WORKLOADS, fbs)) + " ms")
    rs = [res.stat("loader", wl, PERSISTENT[wl][0], 2, "warm_first_batch_s", True) for wl in WORKLOADS]
    rmax = max(rs) if all(x is not None for x in rs) else None
    t_row("epoch restart with persistent workers ≤ 1 ms", rmax, rmax is not None and rmax <= 0.001,
          " / ".join(f"{wl} {fmt_ms(x)}" for wl, x in zip(WORKLOADS, rs)) + " ms")
    overs = []
    for wl in WORKLOADS:
        a = res.stat("loader", wl, PERSISTENT[wl][0], 2, "self_peak_anon_mb")
        f = res.stat("loader", wl, PERSISTENT[wl][0], 2, "self_peak_file_mb")
        overs.append(a + f if a is not None and f is not None else None)
    omax = max(overs) if all(x is not None for x in overs) else None
    t_row("peak memory ≤ dataset + slab pool + 50 MB", omax, omax is not None and omax <= 50,
          "overhead " + " / ".join(f"{wl} {fmt_mb(x)}" for wl, x in zip(WORKLOADS, overs)) + " MB")
    A("")
    A("Causes of the targets missed: see *Analysis* below.")
    A("")
    A("### Where loader's time goes")
    A("")
    A("CPU seconds per epoch (median) of the main process (the application thread and the runtime's "
      "actor threads, without the memory sampler) and of the worker processes, from `getrusage` and "
      "`/proc/PID/stat`; these do not depend on how busy the machine was. `ctx switches` are the main "
      "process's voluntary context switches (each one a thread waiting for a message).")
    A("")
    A("| workload | variant | workers | epoch s | main CPU s | workers CPU s | main CPU µs/batch | "
      "ctx switches/batch |")
    A("|---|---|---:|---:|---:|---:|---:|---:|")
    for wl in WORKLOADS:
        for lv in LOADER_VARIANTS[wl]:
            for w in W:
                rs = res.get("loader", wl, lv, w)
                if not rs:
                    continue
                ep = med(r.get("epoch_s") for r in rs)
                mc_ = med(r.get("main_cpu_s") for r in rs)
                wc = med(r.get("workers_cpu_s") for r in rs)
                cs = med(r.get("main_ctx_switches") for r in rs)
                nb = rs[0].get("batches") or 1
                A(f"| {wl} | {lv} | {w} | {ep:.3f} | {mc_:.3f} | {wc:.3f} | {mc_ / nb * 1e6:.0f} | {cs / nb:.1f} |")
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
    ap.add_argument("--no-torch", action="store_true", help="loader side only (debugging)")
    ap.add_argument("--out", default=None, help="report path (default docs/benchmarks.md; quick: bench/results/quick.md)")
    ap.add_argument("--from-raw", default=None,
                    help="write the report from a results file of an earlier run (no measuring)")
    ap.add_argument("--analysis", default=os.path.join(HERE, "analysis.md"),
                    help="markdown file pasted into the report's Analysis section, if it exists")
    args = ap.parse_args()
    args.workers_list = [int(x) for x in args.workers.split(",")]
    if args.epochs is None:
        args.epochs = 2 if args.quick else 3
    only = args.only.split(",")
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


def measure(args, only):
    """Runs everything; returns the records (also written, one JSON line each, to args.raw)."""
    t_all = time.perf_counter()
    info = machine()
    busy_start = busy_processes()
    log(f"machine: {info}; busy at start: {busy_start or 'none'}")
    raw = open(args.raw, "w")
    recs = []

    def keep(rec):
        raw.write(json.dumps(rec) + "\n")
        raw.flush()
        recs.append(rec)

    mc = run_memcpy(args)
    keep({"side": "memcpy", "workload": "-", "variant": "-", "workers": 0,
          "results": {f"{k}_{t}": v for (k, t), v in mc.items()}})

    def n_of(wl):
        return WORKLOADS[wl]["quickN" if args.quick else "N"]

    # main matrix + persistent matrix, alternating sides config by config
    for wl in only:
        n = n_of(wl)
        for w in args.workers_list:
            for rnd in range(args.rounds):
                for lv, tv in zip(LOADER_VARIANTS[wl] + [None] * 2, TORCH_VARIANTS[wl] + [None] * 2):
                    if lv is None and tv is None:
                        break
                    if lv:
                        keep(dict(run_loader(args, wl, lv, w, n, args.epochs), round=rnd))
                    if tv and not args.no_torch:
                        keep(dict(run_torch(args, wl, tv, w, n, args.epochs), round=rnd))
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
          "workers_list": args.workers_list, "only": only})
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
    res = Results([r for r in recs if r["side"] in ("loader", "torch")])
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
    for name, ok in targets:
        log(f"target {name}: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
