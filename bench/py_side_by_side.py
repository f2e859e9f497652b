#!/usr/bin/python3
"""loader.DataLoader against torch.utils.data.DataLoader from Python, side by side, in one run.

Both loaders get the same dataset objects (W1: a TensorDataset of 16 floats + a label,
batch 256; W2: a TensorDataset of 150 KB uint8 images, batch 64; W5: torchvision's
ImageFolder with the ImageNet training transform, batch 64, over a generated JPEG
folder), shuffled with the same seed, with 0 and 2 workers; and `loader bench` runs W1
and W5 from C++ in the same rounds, so the Python layer's own cost is the difference.
Each configuration runs in its own process, rounds alternate the sides, and every
epoch is one JSON line (bench/results/py-<time>.jsonl); the summary line says the
medians and the ratios of the speed goals.

    /usr/bin/python3 bench/py_side_by_side.py                     # ~6 min on 2 cores
    /usr/bin/python3 bench/py_side_by_side.py --quick             # smaller N, 1 round
    /usr/bin/python3 bench/py_side_by_side.py --write-docs        # + the section of docs/benchmarks.md

Needs the package importable (PYTHONPATH=build/python, or installed) and the `loader`
program (--loader, default build/loader) for `loader bench` and `loader images make`.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SIZES = {  # N (full, quick), batch size
    "W1": ((250_000, 50_000), 256),
    "W2": ((5_000, 1_000), 64),
    "W5": ((3_000, 640), 64),
}


# ------------------------------------------------------------------ one configuration (child)
def make_dataset(workload, n, image_root):
    import torch
    import torch.utils.data as tud

    if workload == "W1":
        g = torch.Generator().manual_seed(0)
        return tud.TensorDataset(torch.randn(n, 16, generator=g), torch.arange(n) % 10)
    if workload == "W2":
        g = torch.Generator().manual_seed(0)
        return tud.TensorDataset(torch.randint(0, 256, (n, 3, 224, 224), dtype=torch.uint8, generator=g),
                                 torch.arange(n) % 10)
    import torchvision
    import torchvision.transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return torchvision.datasets.ImageFolder(image_root, transform=tf)


def child(args):
    import torch
    import torch.utils.data as tud

    (n_full, n_quick), bs = SIZES[args.workload]
    n = n_quick if args.quick else n_full
    ds = make_dataset(args.workload, n, args.image_root)
    if args.side == "torch":
        cls = tud.DataLoader
        extra = {}
    else:
        import loader

        cls = loader.DataLoader
        extra = {}
    kw = dict(batch_size=bs, shuffle=True, num_workers=args.workers, generator=torch.Generator().manual_seed(1))
    if args.workers > 0:
        kw["persistent_workers"] = False
    dl = cls(ds, **kw, **extra)
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        first = None
        samples = batches = 0
        for b in dl:
            if first is None:
                first = time.perf_counter() - t0
            samples += int(b[1].shape[0])
            batches += 1
        wall = time.perf_counter() - t0
        print(json.dumps({"side": args.side, "workload": args.workload, "workers": args.workers, "epoch": epoch,
                          "n": n, "batch_size": bs, "samples": samples, "batches": batches, "wall_s": wall,
                          "first_batch_s": first, "samples_per_s": samples / wall,
                          "us_per_batch": wall / max(batches, 1) * 1e6}), flush=True)


# ------------------------------------------------------------------ the run (parent)
def run_child(args, side, workload, workers, image_root):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--side", side, "--workload", workload,
           "--workers", str(workers), "--epochs", str(args.epochs), "--image-root", image_root]
    if args.quick:
        cmd.append("--quick")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def run_cpp(args, workload, workers, image_root):
    (n_full, n_quick), bs = SIZES[workload]
    n = n_quick if args.quick else n_full
    cmd = [args.loader, "bench", "--workload", workload, "--workers", str(workers), "--epochs", str(args.epochs)]
    if workload == "W5":
        cmd += ["--root", image_root, "--seeding", "per-worker"]  # N: the folder's files
    else:
        cmd += ["--n", str(n)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = []
    for e, line in enumerate(l for l in out.splitlines() if l.startswith("{")):
        j = json.loads(line)
        sps = j.get("images_per_s") or j["samples_per_s"]
        batches = -(-n // bs)
        rows.append({"side": "cpp", "workload": workload, "workers": workers, "epoch": e, "n": n, "batch_size": bs,
                     "samples": j.get("samples", n), "wall_s": n / sps, "samples_per_s": sps,
                     "us_per_batch": n / sps / batches * 1e6})
    return rows


def ensure_images(args, n):
    cache = os.environ.get("LOADER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "loader")
    root = os.path.join(cache, f"py-bench-w5-{n}")
    if not os.path.isdir(root) or not os.listdir(root):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([args.loader, "images", "make", "--out", root, "--n", str(n), "--classes", "10", "--seed", "0"],
                       check=True, capture_output=True)
    return root


def median_of(rows, side, workload, workers, skip_first=True):
    xs = [r["samples_per_s"] for r in rows if r["side"] == side and r["workload"] == workload and r["workers"] == workers
          and (not skip_first or r["epoch"] > 0 or args_epochs == 1)]
    return statistics.median(xs) if xs else None


args_epochs = 2


def summarise(rows, workloads, workers_list):
    table = []
    for w in workloads:
        for k in workers_list:
            py, th, cpp = (median_of(rows, s, w, k) for s in ("loader", "torch", "cpp"))
            bs = SIZES[w][1]
            row = {"workload": w, "workers": k, "loader_py": py, "torch": th, "loader_cpp": cpp,
                   "vs_torch": py / th if py and th else None, "vs_cpp": py / cpp if py and cpp else None}
            if py and cpp:
                row["python_us_per_batch"] = (bs / py - bs / cpp) * 1e6
            table.append(row)
    return table


def fmt(x, unit=""):
    if x is None:
        return "n/a"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M{unit}"
    if x >= 1e4:
        return f"{x / 1e3:.1f} k{unit}"
    return f"{x:,.0f}{unit}"


def write_docs(table, meta, plot_path):
    lines = [
        "<!-- python begin: written by bench/py_side_by_side.py --write-docs -->",
        f"## From Python: `loader.DataLoader` against `torch.utils.data.DataLoader` ({meta['date']}, one run)",
        "",
        f"`{meta['command']}` on `{meta['commit']}`: both loaders over the same dataset objects, shuffled "
        f"with the same seed, {meta['rounds']} round(s) of {meta['epochs']} epochs, alternating; median "
        "samples/s of the epochs after each process's first; `loader bench` (C++) on the same workloads in the same "
        f"rounds. Raw lines: `{meta['raw']}`. Machine: {meta['cpus']} CPUs.",
        "",
        "| workload | workers | loader (Python) | torch DataLoader | loader (C++, `loader bench`) | Python ÷ torch "
        "| Python ÷ C++ | Python layer per batch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        us = r.get("python_us_per_batch")
        ratio = "n/a" if r["vs_torch"] is None else f"{r['vs_torch']:.1f}×"
        share = "n/a" if r["vs_cpp"] is None else f"{r['vs_cpp'] * 100:.0f}%"
        if us is None:
            cost = "n/a"
        elif abs(r["vs_cpp"] - 1) < 0.02:
            cost = "≈ 0 (the sides within 2%)"
        else:
            cost = f"{us:.1f} µs"
        lines.append(f"| {r['workload']} | {r['workers']} | {fmt(r['loader_py'])} | {fmt(r['torch'])} | "
                     f"{fmt(r['loader_cpp'])} | {ratio} | {share} | {cost} |")
    def row(w, k):
        return next((r for r in table if r["workload"] == w and r["workers"] == k), None)

    goals = []
    for w, k, key, want, text in (("W5", 2, "vs_torch", 2.5, "W5 from Python ≥ 2.5× torch's DataLoader over the same ImageFolder"),
                                  ("W5", 2, "vs_cpp", 0.95, "W5 from Python ≥ 95% of `loader bench --workload W5`"),
                                  ("W1", 2, "vs_torch", 60, "W1 from Python ≥ 60× torch's DataLoader"),
                                  ("W2", 2, "vs_torch", 5, "W2 from Python ≥ 5× torch's DataLoader")):
        r = row(w, k)
        if r and r[key] is not None:
            got = f"{r[key]:.2f}×" if key == "vs_torch" else f"{r[key] * 100:.1f}%"
            goals.append(f"| {text} (2 workers) | {got} | {'pass' if r[key] >= want else 'MISS'} |")
    r = row("W1", 2)
    if r and r.get("python_us_per_batch") is not None:
        us = r["python_us_per_batch"]
        goals.append(f"| the Python layer ≤ 10 µs per W1 batch (W1 from Python against W1 from C++, 2 workers) | "
                     f"{us:.1f} µs | {'pass' if us <= 10 else 'MISS'} |")
    if goals:
        lines += ["", "| speed goal (issue 47) | this run | |", "|---|---|---|"] + goals
    lines += ["", "W1 from C++ is `loader bench`'s W1 (its features computed from the index), W1 from Python a "
              "TensorDataset of torch.randn features: the same sizes, batch and sampler; the difference per batch "
              "is what the Python layer costs (the iterator, the DLPack hand-off of two tensors, the generator "
              "mirror). W2 has no C++ row: `loader bench`'s W2 is another dataset. The first epoch of each "
              "process (worker start, page cache) is not counted."]
    lines += ["", "![loader from Python against torch's DataLoader](benchmarks_python.png)", "",
              "<!-- python end -->"]
    section = "\n".join(lines) + "\n"
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = open(path).read() if os.path.exists(path) else ""
    begin, end = "<!-- python begin", "<!-- python end -->"
    if begin in text:
        a = text.index(begin)
        b = text.index(end) + len(end) + 1
        text = text[:a] + section + text[b:]
    else:
        # after the opening table of today's figures: before the first "<!-- W5 begin" section
        at = text.find("<!-- W5 begin")
        text = (text[:at] + section + "\n" + text[at:]) if at >= 0 else text + "\n" + section
    with open(path, "w") as f:
        f.write(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [f"{r['workload']}\n{r['workers']} workers" for r in table]
        xs = range(len(table))
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.27
        for i, (key, name) in enumerate((("torch", "torch DataLoader"), ("loader_py", "loader (Python)"),
                                         ("loader_cpp", "loader (C++)"))):
            ax.bar([x + (i - 1) * width for x in xs], [r[key] or 0 for r in table], width, label=name)
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels)
        ax.set_ylabel("samples/s (log)")
        ax.set_title(f"From Python, same dataset objects ({meta['date']})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot_path, dpi=110)
    except ImportError:
        pass


def main():
    global args_epochs
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", default="loader")
    p.add_argument("--workload", default="W1")
    p.add_argument("--only", default="W1,W2,W5", help="workloads (default W1,W2,W5)")
    p.add_argument("--workers", default="0,2", help="worker counts (default 0,2)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per process (the first is not counted)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--image-root", default="")
    p.add_argument("--loader", default=os.path.join(ROOT, "build", "loader"))
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--from-raw", help="re-render docs from a raw .jsonl of an earlier run (with --write-docs)")
    args = p.parse_args()
    if args.child:
        args.workers = int(args.workers)
        return child(args)
    args_epochs = args.epochs
    if args.from_raw:
        with open(args.from_raw) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        summary = lines[-1]
        write_docs(summary["summary"], summary, os.path.join(ROOT, "docs", "benchmarks_python.png"))
        return
    workloads = args.only.split(",")
    workers_list = [int(x) for x in args.workers.split(",")]
    if args.quick:
        args.rounds = 1
    image_root = ensure_images(args, SIZES["W5"][0][1 if args.quick else 0]) if "W5" in workloads else ""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    raw = os.path.join(HERE, "results", f"py-{stamp}.jsonl")
    rows = []
    t0 = time.time()
    with open(raw, "w") as f:
        for rnd in range(args.rounds):
            for w in workloads:
                for k in workers_list:
                    sides = ["torch", "loader", "cpp"] if rnd % 2 == 0 else ["cpp", "loader", "torch"]
                    for side in sides:
                        if side == "cpp" and w == "W2":
                            continue  # loader bench's W2 is another dataset (bench_w2); the goal compares to torch
                        got = run_cpp(args, w, k, image_root) if side == "cpp" else run_child(args, side, w, k, image_root)
                        for r in got:
                            r["round"] = rnd
                            f.write(json.dumps(r) + "\n")
                            f.flush()
                        rows += got
                        print(f"round {rnd} {w} workers={k} {side}: "
                              f"{fmt(statistics.median(r['samples_per_s'] for r in got))} samples/s", file=sys.stderr)
        table = summarise(rows, workloads, workers_list)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "commit": commit,
                "command": "/usr/bin/python3 bench/py_side_by_side.py " + " ".join(sys.argv[1:]),
                "rounds": args.rounds, "epochs": args.epochs, "raw": os.path.relpath(raw, ROOT),
                "cpus": os.cpu_count(), "seconds": round(time.time() - t0, 1)}
        summary = {"summary": table, **meta}
        f.write(json.dumps(summary) + "\n")
    print(json.dumps(summary))
    if args.write_docs:
        write_docs(table, meta, os.path.join(ROOT, "docs", "benchmarks_python.png"))


if __name__ == "__main__":
    main()
