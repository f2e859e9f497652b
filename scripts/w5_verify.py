#!/usr/bin/python3
"""W5's checksums do not depend on the number of workers, nor on a worker's death.

    /usr/bin/python3 scripts/w5_verify.py [--loader build/loader] [--n 3000] [--epochs 2]

Runs `loader bench --workload W5 --epochs E --verify --n N` (per-task seeding, W5's
default) with --workers 0, 1, 2 and 3, and with 2 workers of which worker 0 is SIGKILLed
after 3 batches of every epoch and restarted (--kill-worker-after 3
--max-worker-restarts E), and checks that every run prints, epoch by epoch, the same
checksum (every byte of every batch, weighted by its position and the batch's index:
the random crops and flips included) and passes its label-sum check.  The folder is the
generated one (`loader images make`, cached).  Exit status 0 when all agree, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(loader, n, epochs, workers, extra=()):
    cmd = [loader, "bench", "--workload", "W5", "--n", str(n), "--epochs", str(epochs), "--verify", "--workers",
           str(workers), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or len(lines) != epochs:
        sys.exit(f"w5_verify: `{' '.join(cmd)}` failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return cmd, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", default=os.path.join(ROOT, "build", "loader"))
    ap.add_argument("--n", type=int, default=3000, help="images (default 3000: W5's N)")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    configs = [("0 workers", 0, ()), ("1 worker", 1, ()), ("2 workers", 2, ()), ("3 workers", 3, ()),
               ("2 workers, worker 0 SIGKILLed after 3 batches", 2,
                ("--kill-worker-after", "3", "--max-worker-restarts", str(args.epochs)))]
    results = []
    for name, w, extra in configs:
        cmd, lines = run(args.loader, args.n, args.epochs, w, extra)
        sums = [e["checksum"] for e in lines]
        ok = all(e["ok"] for e in lines)
        killed = [e.get("killed_worker_pid", 0) for e in lines]
        restarts = [e.get("worker_restarts", 0) for e in lines]
        print(f"{name:48s} checksums {sums}  label sums ok: {ok}" +
              (f"  killed pids {killed}, restarts {restarts}" if extra else ""), flush=True)
        if extra and not all(k > 0 for k in killed):
            sys.exit(f"w5_verify: {name}: no worker was killed in some epoch ({killed})")
        results.append((name, sums, ok))
    ref = results[0][1]
    bad = [name for name, sums, ok in results if sums != ref or not ok]
    if bad:
        print("MISMATCH: " + ", ".join(bad) + f" differ from 0 workers ({ref})")
        return 1
    print(f"ok: the same {args.epochs} checksums with 0, 1, 2, 3 workers and after a worker was killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
