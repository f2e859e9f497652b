#!/usr/bin/python3
"""Checks, with torchvision, the image folders that the `loader` tool writes.

    loader images export --dataset fashion-mnist --out /tmp/fmnist
    /usr/bin/python3 scripts/check_image_folders.py --export /tmp/fmnist [--every 1]

  torchvision.datasets.ImageFolder on DIR/train and DIR/test must find the 10 classes
  with class_to_idx[folder] == the Fashion-MNIST label of every file in it (the folder
  names sort in label order), one file per sample (60,000 and 10,000), files in dataset
  order within a class, and (every --every-th file; default all) PIL's pixels equal to
  the IDX files' bytes.

    loader images make --out /tmp/w5 --n 300 --classes 10 --seed 0
    /usr/bin/python3 scripts/check_image_folders.py --generated /tmp/w5 --n 300 --classes 10

  ImageFolder finds n0000000.. with class_to_idx[n000000k] == k, N files, file i in class
  i % classes; every file decodes with PIL as an RGB JPEG of 200..800 px per side.

Exit status 0 when every check passes, 1 otherwise (the failures are printed).  Needs
the Debian interpreter (/usr/bin/python3: python3-torchvision, python3-pil, numpy).
"""
import argparse
import gzip
import os
import re
import sys

import numpy as np


def read_idx(path):
    """An IDX file (gzip or plain) as a numpy array."""
    if not os.path.exists(path) and os.path.exists(path[:-3]):
        path = path[:-3]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


# torchvision.datasets.FashionMNIST.classes, in label order
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"]


def check_export(root, idx_root, every):
    from PIL import Image
    from torchvision.datasets import ImageFolder
    failures = []
    for split, prefix, count in (("train", "train", 60000), ("test", "t10k", 10000)):
        labels = read_idx(os.path.join(idx_root, f"{prefix}-labels-idx1-ubyte.gz"))
        images = read_idx(os.path.join(idx_root, f"{prefix}-images-idx3-ubyte.gz"))
        ds = ImageFolder(os.path.join(root, split))
        print(f"{split}: ImageFolder found {len(ds.classes)} classes, {len(ds.samples)} files; class_to_idx "
              f"{ds.class_to_idx}")
        if len(ds.classes) != 10:
            failures.append(f"{split}: {len(ds.classes)} classes, expected 10")
        for name, k in ds.class_to_idx.items():
            want = re.sub(r"[/ \\]", "_", FASHION_CLASSES[k]) if k < 10 else None
            if name != f"{k}_{want}":
                failures.append(f"{split}: class_to_idx[{name!r}] = {k}, but label {k} is {FASHION_CLASSES[k]!r}")
        if len(ds.samples) != count:
            failures.append(f"{split}: {len(ds.samples)} files, expected {count}")
        last_index = {}
        checked = 0
        for j, (path, target) in enumerate(ds.samples):
            i = int(os.path.splitext(os.path.basename(path))[0])
            if labels[i] != target:
                failures.append(f"{split}: {path}: ImageFolder gives class {target}, the dataset's label of "
                                f"sample {i} is {labels[i]}")
            if last_index.get(target, -1) >= i:
                failures.append(f"{split}: {path} is out of dataset order in its class folder")
            last_index[target] = i
            if j % every == 0:
                with Image.open(path) as im:
                    if im.mode != "L" or im.size != (28, 28):
                        failures.append(f"{split}: {path}: mode {im.mode} size {im.size}, expected L 28x28")
                    elif not np.array_equal(np.asarray(im), images[i]):
                        failures.append(f"{split}: {path}: pixels differ from sample {i} of the IDX file")
                checked += 1
            if len(failures) > 20:
                break
        print(f"{split}: labels of {len(ds.samples)} files checked, pixels of {checked}")
    return failures


def check_generated(root, n, classes):
    from PIL import Image
    from torchvision.datasets import ImageFolder
    failures = []
    ds = ImageFolder(root)
    want_classes = min(n, classes)
    print(f"ImageFolder found {len(ds.classes)} classes, {len(ds.samples)} files")
    for name, k in ds.class_to_idx.items():
        if name != f"n{k:07d}":
            failures.append(f"class_to_idx[{name!r}] = {k}, expected n{k:07d}")
    if len(ds.classes) != want_classes:
        failures.append(f"{len(ds.classes)} classes, expected {want_classes}")
    if len(ds.samples) != n:
        failures.append(f"{len(ds.samples)} files, expected {n}")
    seen = set()
    for path, target in ds.samples:
        m = re.fullmatch(r"(n\d{7})_(\d{8})\.JPEG", os.path.basename(path))
        if not m:
            failures.append(f"{path}: unexpected file name")
            continue
        i = int(m.group(2))
        seen.add(i)
        if i % classes != target:
            failures.append(f"{path}: class {target}, expected {i % classes}")
        with Image.open(path) as im:
            if im.format != "JPEG" or im.mode != "RGB" or not all(200 <= s <= 800 for s in im.size):
                failures.append(f"{path}: {im.format} {im.mode} {im.size}, expected an RGB JPEG of 200..800 px")
            im.load()
        if len(failures) > 20:
            break
    if seen != set(range(n)):
        failures.append(f"files for indices {sorted(set(range(n)) - seen)[:10]}... missing")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--export", metavar="DIR", help="a folder written by `loader images export --dataset fashion-mnist`")
    g.add_argument("--generated", metavar="DIR", help="a folder written by `loader images make`")
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist", help="--export: the IDX files")
    ap.add_argument("--every", type=int, default=1, help="--export: compare the pixels of every K-th file (default 1)")
    ap.add_argument("--n", type=int, help="--generated: the --n it was made with")
    ap.add_argument("--classes", type=int, default=10, help="--generated: the --classes it was made with")
    args = ap.parse_args()
    if args.generated and args.n is None:
        ap.error("--generated needs --n")
    if args.every < 1:
        ap.error("--every must be >= 1")
    failures = check_export(args.export, args.root, args.every) if args.export else \
        check_generated(args.generated, args.n, args.classes)
    for f in failures[:20]:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
