#!/usr/bin/env python3
"""Loads a checkpoint written by fashion_mnist_libtorch (libtorch modules, saved with
loader::pt::save) into the equivalent torch.nn model and measures its accuracy on the
10,000 Fashion-MNIST test images.

    /usr/bin/python3 demos/check_libtorch_checkpoint.py fashion_libtorch.pt
    /usr/bin/python3 demos/check_libtorch_checkpoint.py fashion_libtorch.pt --expect 0.8912 --json

The model is
    nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                  nn.Linear(128, 10))
(other hidden sizes with --hidden), the Python twin of the C++ program's
torch::nn::Sequential, on images scaled to [0, 1] (pixel / 255).  The state_dict is
loaded with torch.load(path, weights_only=True) and load_state_dict(strict=True), so a
missing, extra or misshapen tensor fails.  The test images are read straight from the
IDX .gz files, not through the loader, and evaluated in batches of 1000 as the C++
program does.

--expect ACC fails (exit status 1) unless the accuracy here is within --tolerance
(default 0.0005, i.e. 5 of 10,000 images) of ACC, the C++ program's figure.
Prints the accuracy (or one JSON object with --json).
"""
import argparse
import gzip
import json
import struct
import sys

import torch
from torch import nn


def build_model(hidden):
    layers = [nn.Flatten()]
    fan_in = 784
    for h in hidden:
        layers += [nn.Linear(fan_in, h), nn.ReLU()]
        fan_in = h
    layers.append(nn.Linear(fan_in, 10))
    return nn.Sequential(*layers)


def read_idx(path, ndim):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    if magic != 0x800 | ndim:
        raise ValueError(f"{path}: bad magic {magic:#010x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--expect", type=float, default=None, metavar="ACC")
    ap.add_argument("--tolerance", type=float, default=0.0005)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    hidden = [int(h) for h in args.hidden.split(",") if h]

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    model = build_model(hidden)
    model.load_state_dict(state, strict=True)  # raises on missing/unexpected keys or shapes
    model.eval()

    images = read_idx(f"{args.root}/t10k-images-idx3-ubyte.gz", 3)
    labels = read_idx(f"{args.root}/t10k-labels-idx1-ubyte.gz", 1).long()
    x = images.float().div(255).unsqueeze(1)  # ToTensor(): [N, 1, 28, 28] in [0, 1]
    correct = 0
    with torch.no_grad():
        for i in range(0, len(labels), 1000):
            correct += int((model(x[i:i + 1000]).argmax(dim=1) == labels[i:i + 1000]).sum())
    accuracy = correct / len(labels)
    ok = args.expect is None or abs(accuracy - args.expect) <= args.tolerance
    result = {
        "test_accuracy": round(accuracy, 6),
        "correct": correct,
        "total": len(labels),
        "strict_load": True,
        "keys": list(state.keys()),
        "dtypes": sorted({str(v.dtype) for v in state.values()}),
        "expected": args.expect,
        "matches_expected": ok,
        "torch": torch.__version__,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.checkpoint}: strict load OK ({len(state)} tensors), test accuracy {accuracy:.4f} "
              f"({correct}/{len(labels)}) in PyTorch {torch.__version__}")
        if args.expect is not None:
            print(f"C++ figure {args.expect:.4f}: {'same' if ok else 'DIFFERENT'} "
                  f"(tolerance {args.tolerance})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
