#!/usr/bin/python3
"""Draws the per-epoch log of demos/fashion_mnist_train (--log PATH.jsonl) as a PNG.

    scripts/plot_training.py fashion_mlp.jsonl                 # writes fashion_mlp.png
    scripts/plot_training.py run.jsonl --out curves.png --title "2 workers"

Four panels, one point per epoch: training loss; train and test accuracy; samples
per second; seconds the trainer waited for data (with its share of the epoch).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys


def read_log(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot_training: {path}:{n}: not JSON ({e})")
    if not rows:
        sys.exit(f"plot_training: {path} holds no epochs")
    for key in ("epoch", "loss", "train_accuracy", "test_accuracy", "samples_per_s", "data_wait_s"):
        if key not in rows[0]:
            sys.exit(f"plot_training: {path}: the first line has no \"{key}\" (is it a fashion_mnist_train --log file?)")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="JSON lines written by fashion_mnist_train --log")
    ap.add_argument("--out", help="PNG to write (default: the log's name with .png)")
    ap.add_argument("--title", help="figure title (default: from the log)")
    args = ap.parse_args()
    rows = read_log(args.log)
    out = args.out or os.path.splitext(args.log)[0] + ".png"

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = [r["epoch"] for r in rows]
    fig, ax = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    first = rows[0]
    title = args.title or "Fashion-MNIST MLP fed by loader: {} workers, batch {}, {} epochs".format(
        first.get("workers", "?"), first.get("batch_size", "?"), len(rows))
    fig.suptitle(title)

    a = ax[0][0]
    a.plot(ep, [r["loss"] for r in rows], "o-", color="tab:red")
    a.set_title("training loss (mean cross-entropy)")
    a.set_xlabel("epoch")

    a = ax[0][1]
    a.plot(ep, [r["train_accuracy"] for r in rows], "o-", label="train (batches, during the epoch)")
    a.plot(ep, [r["test_accuracy"] for r in rows], "s-", label="test (10,000 images, after the epoch)")
    best = max(rows, key=lambda r: r["test_accuracy"])
    a.annotate(f"best test {best['test_accuracy']:.4f}", (best["epoch"], best["test_accuracy"]),
               textcoords="offset points", xytext=(0, -16), ha="right" if best["epoch"] == ep[-1] else "center")
    a.set_title("accuracy")
    a.set_xlabel("epoch")
    a.legend(loc="lower right")

    a = ax[1][0]
    a.bar(ep, [r["samples_per_s"] for r in rows], color="tab:green")
    a.set_title("training throughput (samples/s)")
    a.set_xlabel("epoch")

    a = ax[1][1]
    wait = [r["data_wait_s"] for r in rows]
    a.bar(ep, wait, color="tab:purple")
    a.set_title("time waiting for data (s per epoch, % of the epoch)")
    a.set_xlabel("epoch")
    a.set_ylim(0, max(wait) * 1.15 if max(wait) > 0 else 1)
    if all("epoch_s" in r and r["epoch_s"] > 0 for r in rows):
        for e, w, r in zip(ep, wait, rows):
            a.annotate(f"{100 * w / r['epoch_s']:.0f}%", (e, w), textcoords="offset points", xytext=(0, 2),
                       ha="center", fontsize=8)
    for row in ax:
        for a in row:
            a.grid(alpha=0.3)
            if len(ep) <= 20:
                a.set_xticks(ep)
    fig.savefig(out, dpi=100)
    print(f"plot_training: {out}")


if __name__ == "__main__":
    main()
