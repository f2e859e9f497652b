#!/usr/bin/env python3
"""Loads a checkpoint written by fashion_mnist_train into the documented PyTorch model
and measures its accuracy on the 10,000 Fashion-MNIST test images.

    /usr/bin/python3 demos/check_checkpoint.py fashion_mlp.pt
    /usr/bin/python3 demos/check_checkpoint.py fashion_mlp.pt --json
    /usr/bin/python3 demos/check_checkpoint.py init.pt --compare-init 0

The model is exactly
    nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                  nn.Linear(128, 10))
(other hidden sizes with --hidden), on images scaled to [0, 1] (pixel / 255).  The
state_dict is loaded with torch.load(path, weights_only=True) and
load_state_dict(strict=True), so a missing, extra or misshapen tensor fails.  The
test images are read straight from the IDX .gz files, not through the loader.

--compare-init SEED also checks that the file's weights equal those PyTorch gives the
model right after torch.manual_seed(SEED) (for a checkpoint written with --epochs 0).

Prints the accuracy (or one JSON object with --json); exit status 1 on any failure.
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
    body = data[4 + 4 * ndim:]
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare-init", type=int, default=None, metavar="SEED")
    args = ap.parse_args()
    hidden = [int(h) for h in args.hidden.split(",") if h]

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    model = build_model(hidden)
    expected = model.state_dict()
    keys_match = list(state.keys()) == list(expected.keys())
    for k, v in state.items():
        if v.dtype != torch.float32:
            raise SystemExit(f"{args.checkpoint}: {k} has dtype {v.dtype}, expected torch.float32")
    model.load_state_dict(state, strict=True)  # raises on missing/unexpected keys or shapes
    model.eval()

    init_equal = None
    if args.compare_init is not None:
        torch.manual_seed(args.compare_init)
        fresh = build_model(hidden).state_dict()
        init_equal = all(torch.equal(fresh[k], state[k]) for k in fresh)

    images = read_idx(f"{args.root}/t10k-images-idx3-ubyte.gz", 3)
    labels = read_idx(f"{args.root}/t10k-labels-idx1-ubyte.gz", 1).long()
    x = images.float().div(255).unsqueeze(1)  # ToTensor(): [N, 1, 28, 28] in [0, 1]
    with torch.no_grad():
        pred = model(x).argmax(dim=1)
    accuracy = (pred == labels).float().mean().item()
    result = {
        "test_accuracy": round(accuracy, 6),
        "correct": int((pred == labels).sum()),
        "total": int(labels.numel()),
        "strict_load": True,
        "keys_in_order": keys_match,
        "keys": list(state.keys()),
        "shapes": {k: list(v.shape) for k, v in state.items()},
        "torch": torch.__version__,
    }
    if init_equal is not None:
        result["init_equal"] = init_equal
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.checkpoint}: strict load OK, test accuracy {accuracy:.4f} "
              f"({result['correct']}/{result['total']})")
        if init_equal is not None:
            print(f"weights equal PyTorch's initialisation for seed {args.compare_init}: {init_equal}")
    return 0 if init_equal in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
