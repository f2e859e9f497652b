#!/usr/bin/python3
"""How the image figures of docs/api.md ("Images") were measured: `loader images get` against
torchvision 0.14 on the same files and seeds, and decode_scaling against full decoding.

  /usr/bin/python3 tests/golden/images/measure.py --tool build/loader --root DIR [--n 40]

DIR is an ImageFolder of JPEG files (e.g. the W5 folder of `loader images make`).  A second
folder of large images (each of the first files upscaled 4x with PIL and saved at quality
90) is made in a temporary directory, where decode_scaling reaches 1/4 and 1/8 at 224.
Prints one JSON line per configuration: mean and max absolute difference on the 0-255 scale
(the normalised output mapped back: x * std + mean, times 255), and how often DCT scaling
was used.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float64).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float64).reshape(3, 1, 1)


def to255(t):
    return (t.numpy().astype(np.float64) * STD + MEAN) * 255.0


def torchvision(path, preset, size, seed):
    norm = T.Normalize(tuple(MEAN.ravel()), tuple(STD.ravel()))
    if preset == "train":
        tr = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tr = T.Compose([T.Resize(int(size * 256 / 224)), T.CenterCrop(size), T.ToTensor(), norm])
    torch.manual_seed(seed)
    with open(path, "rb") as f:
        return tr(Image.open(f).convert("RGB"))


def loader_get(tool, root, index, preset, size, seed, scaling, out):
    args = [tool, "images", "get", root, "--index", str(index), "--transform", preset, "--size", str(size),
            "--seed", str(seed), "--out", out]
    if scaling:
        args.append("--decode-scaling")
    line = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    return torch.load(out), line


def measure(tool, root, n, preset, size, tmp):
    listing = subprocess.run([tool, "images", "list", root], check=True, capture_output=True, text=True).stdout
    samples = [json.loads(l) for l in listing.splitlines()[1:]]
    step = max(1, len(samples) // n)
    picks = list(range(0, len(samples), step))[:n]
    exact_diff, scaled_diff = [], []
    scales = {}
    out = os.path.join(tmp, "s.pt")
    for k, i in enumerate(picks):
        seed = 1000 + k
        want = to255(torchvision(samples[i]["path"], preset, size, seed))
        got, _ = loader_get(tool, root, i, preset, size, seed, False, out)
        exact_diff.append(np.abs(to255(got) - want))
        scaled, line = loader_get(tool, root, i, preset, size, seed, True, out)
        scales[line["scale_denom"]] = scales.get(line["scale_denom"], 0) + 1
        scaled_diff.append(np.abs(to255(scaled) - to255(got)))
    e, s = np.stack(exact_diff), np.stack(scaled_diff)
    used = [d for d in s if d.any()] or [np.zeros(1)]
    return {"root": root, "preset": preset, "size": size, "samples": len(picks),
            "vs_torchvision_mean": round(float(e.mean()), 4), "vs_torchvision_max": round(float(e.max()), 4),
            "decode_scaling_vs_full_mean": round(float(s.mean()), 4),
            "decode_scaling_vs_full_max": round(float(s.max()), 4),
            "decode_scaling_vs_full_mean_where_used": round(float(np.mean([d.mean() for d in used])), 4),
            "scale_denoms": {str(k): v for k, v in sorted(scales.items())}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--n", type=int, default=40)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # Large images: the first files of each class upscaled 4x.
        big = os.path.join(tmp, "big")
        for cls in sorted(os.listdir(a.root))[:2]:
            os.makedirs(os.path.join(big, cls))
            for name in sorted(os.listdir(os.path.join(a.root, cls)))[:max(1, a.n // 4)]:
                im = Image.open(os.path.join(a.root, cls, name)).convert("RGB")
                im = im.resize((im.width * 4, im.height * 4), Image.BICUBIC)
                im.save(os.path.join(big, cls, name), quality=90)
        for root, preset, size in [(a.root, "train", 224), (a.root, "eval", 224), (a.root, "train", 112),
                                   (a.root, "eval", 112), (a.root, "train", 64), (big, "train", 224),
                                   (big, "eval", 224)]:
            r = measure(a.tool, root, a.n, preset, size, tmp)
            r["root"] = "large (4x)" if root == big else "given"
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
