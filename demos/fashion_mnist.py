#!/usr/bin/python3
"""Fashion-MNIST from Python: a torch.nn MLP fed by loader.DataLoader with 2 worker processes.

The model, optimiser and schedule of the C++ demo (demos/fashion_mnist_train.cpp):
Flatten, Linear(784, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 10); Adam, lr 1e-3
on a cosine to 0 over all steps; batches of 128, shuffled; 15 epochs reach about 0.89 test
accuracy.  The data: torchvision's FashionMNIST over its raw files, which loader runs in
C++ (ToTensor), or the files of Debian's dataset-fashion-mnist.

    PYTHONPATH=build/python /usr/bin/python3 demos/fashion_mnist.py            # or with loader installed
    ... demos/fashion_mnist.py --epochs 3 --workers 2 --out fashion_py.pt

Writes the state_dict (--out), a JSON line per epoch beside it (.jsonl: loss, train/test
accuracy, samples/s, seconds waiting for data) and, with matplotlib, its plot (.png,
scripts/plot_training.py).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn

import loader

DEBIAN_FILES = "/usr/share/datasets/fashion-mnist"


def datasets(root):
    """torchvision's FashionMNIST when its raw files are under root, else loader's over the IDX files."""
    try:
        import torchvision
        import torchvision.transforms as T

        tf = T.ToTensor()
        return (torchvision.datasets.FashionMNIST(root, train=True, transform=tf),
                torchvision.datasets.FashionMNIST(root, train=False, transform=tf))
    except (ImportError, RuntimeError):  # no torchvision, or no raw files in torchvision's layout
        return loader.datasets.FashionMNIST(root, train=True), loader.datasets.FashionMNIST(root, train=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default=DEBIAN_FILES, help="torchvision's root, or a folder of the four IDX files")
    p.add_argument("--out", default="fashion_mlp_py.pt")
    a = p.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - a.workers) if a.workers else (os.cpu_count() or 1))
    train_ds, test_ds = datasets(a.root)
    train = loader.DataLoader(train_ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                              persistent_workers=a.workers > 0, generator=torch.Generator().manual_seed(a.seed))
    test = loader.DataLoader(test_ds, batch_size=1000, num_workers=a.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    steps = a.epochs * len(train)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    loss_fn = nn.CrossEntropyLoss()
    log_path = os.path.splitext(a.out)[0] + ".jsonl"
    with open(log_path, "w") as log:
        for epoch in range(1, a.epochs + 1):
            model.train()
            t0 = time.perf_counter()
            wait = 0.0
            total_loss = correct = seen = 0
            it = iter(train)
            while True:
                w0 = time.perf_counter()
                try:
                    x, y = next(it)
                except StopIteration:
                    break
                wait += time.perf_counter() - w0
                out = model(x)
                loss = loss_fn(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                total_loss += loss.item() * len(y)
                correct += (out.argmax(1) == y).sum().item()
                seen += len(y)
            epoch_s = time.perf_counter() - t0
            model.eval()
            hits = n = 0
            with torch.no_grad():
                for x, y in test:
                    hits += (model(x).argmax(1) == y).sum().item()
                    n += len(y)
            row = {"epoch": epoch, "loss": total_loss / seen, "train_accuracy": correct / seen,
                   "test_accuracy": hits / n, "samples_per_s": seen / epoch_s, "data_wait_s": wait,
                   "epoch_s": epoch_s, "lr": sched.get_last_lr()[0], "workers": a.workers}
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"epoch {epoch:2d}  loss {row['loss']:.4f}  train {row['train_accuracy']:.4f}  "
                  f"test {row['test_accuracy']:.4f}  {row['samples_per_s']:,.0f} samples/s  "
                  f"waited {wait:.2f} s of {epoch_s:.2f} s", flush=True)
    torch.save(model.state_dict(), a.out)
    print(f"state_dict written to {os.path.abspath(a.out)}, log {os.path.abspath(log_path)}")
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "plot_training.py")
    try:
        import matplotlib  # noqa: F401

        subprocess.run([sys.executable, plot, log_path, "--out", os.path.splitext(a.out)[0] + ".png",
                        "--title", f"Python, loader.DataLoader, {a.workers} workers"], check=False)
    except ImportError:
        print("(matplotlib not found: the log was not plotted)")


if __name__ == "__main__":
    main()
