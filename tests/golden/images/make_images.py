#!/usr/bin/python3
"""Golden data for the image tests (tests/libloader/image_*_test.cpp), from PIL 9.4,
torchvision 0.14 and torch 1.13 (Debian 12's python3-pil, python3-torchvision,
python3-torch).  Run as `/usr/bin/python3 tests/golden/images/make_images.py`; it rewrites
files/ and the JSON files beside this script in about 5 s.

  files/*.jpg, *.png   small test images (33x21 and a few others), a few KB in all
  decode.json          per file: PIL's Image.open(f).convert("RGB") and .convert("L") bytes
                       (base64, HWC), size and PIL's mode
  transforms.json      RandomResizedCrop.get_params boxes and RandomHorizontalFlip draws
                       after torch.manual_seed(seed), for several seeds, image sizes, scales
                       and ratios; Pillow's crop().resize(BILINEAR) outputs; whole train /
                       eval pipelines (uint8 before ToTensor, and float32 after Normalize)
  folder.json          torchvision's ImageFolder classes and samples for the tree in
                       FOLDER_TREE (paths relative to the root), and its error for an
                       empty class
"""
import base64
import hashlib
import io
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import warnings
import zlib

import numpy as np
import PIL
import torch
import torchvision
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")

META = {
    "generator": "tests/golden/images/make_images.py",
    "pil": PIL.__version__,
    "torchvision": torchvision.__version__,
    "torch": torch.__version__,
    "numpy": np.__version__,
}


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def pattern(w, h, seed):
    """A smooth gradient with some texture: chroma subsampling and resampling matter."""
    rs = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 5.0 + seed) * np.cos(y / 7.0)
    g = 255 * x / max(w - 1, 1)
    b = 255 * y / max(h - 1, 1)
    img = np.stack([r, g, b], -1) + rs.randint(-20, 21, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------ PNG writer
def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def png_bytes(w, h, bit_depth, color_type, rows, extra=b"", interlace=0, plte=None, trns=None):
    """rows: one bytes object per row of packed samples (no filter byte)."""
    head = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, interlace))
    head += extra
    if plte is not None:
        head += png_chunk(b"PLTE", plte)
    if trns is not None:
        head += png_chunk(b"tRNS", trns)
    if interlace:
        raw = adam7(w, h, bit_depth, color_type, rows)
    else:
        raw = b"".join(b"\x00" + r for r in rows)
    return head + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")


def samples_per_pixel(color_type):
    return {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]


def unpack_row(row, w, bit_depth, spp):
    """Packed row -> list of per-pixel sample tuples (ints)."""
    n = w * spp
    if bit_depth == 8:
        vals = list(row[:n])
    elif bit_depth == 16:
        vals = [struct.unpack(">H", row[2 * i:2 * i + 2])[0] for i in range(n)]
    else:
        vals = []
        per = 8 // bit_depth
        for i in range(n):
            byte = row[i // per]
            shift = 8 - bit_depth * (i % per + 1)
            vals.append((byte >> shift) & ((1 << bit_depth) - 1))
    return [tuple(vals[i * spp:(i + 1) * spp]) for i in range(w)]


def pack_row(pixels, bit_depth):
    vals = [v for p in pixels for v in p]
    if bit_depth == 8:
        return bytes(vals)
    if bit_depth == 16:
        return b"".join(struct.pack(">H", v) for v in vals)
    per = 8 // bit_depth
    out = bytearray((len(vals) + per - 1) // per)
    for i, v in enumerate(vals):
        out[i // per] |= v << (8 - bit_depth * (i % per + 1))
    return bytes(out)


def adam7(w, h, bit_depth, color_type, rows):
    spp = samples_per_pixel(color_type)
    pix = [unpack_row(r, w, bit_depth, spp) for r in rows]
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    out = b""
    for x0, y0, dx, dy in passes:
        for y in range(y0, h, dy):
            sub = [pix[y][x] for x in range(x0, w, dx)]
            if sub:
                out += b"\x00" + pack_row(sub, bit_depth)
    return out


def make_pngs(w, h):
    rgb = pattern(w, h, 1)
    rs = np.random.RandomState(7)
    alpha = rs.randint(0, 256, (h, w)).astype(np.uint8)
    gray = (rgb[..., 1] // 2 + rgb[..., 0] // 2).astype(np.uint8)
    out = {}
    out["rgb8.png"] = png_bytes(w, h, 8, 2, [rgb[y].tobytes() for y in range(h)])
    out["rgba8.png"] = png_bytes(w, h, 8, 6, [np.dstack([rgb, alpha])[y].tobytes() for y in range(h)])
    out["gray8.png"] = png_bytes(w, h, 8, 0, [gray[y].tobytes() for y in range(h)])
    out["gray_alpha8.png"] = png_bytes(w, h, 8, 4, [np.dstack([gray, alpha])[y].tobytes() for y in range(h)])
    # 16-bit: values spread over the whole range (PIL keeps the high byte; 16-bit gray
    # is mode "I", whose convert clips to 0..255).
    rgb16 = rgb.astype(np.uint16) * 257 + rs.randint(0, 257, (h, w, 3)).astype(np.uint16)
    out["rgb16.png"] = png_bytes(w, h, 16, 2, [rgb16[y].astype(">u2").tobytes() for y in range(h)])
    rgba16 = np.dstack([rgb16, alpha.astype(np.uint16) * 257])
    out["rgba16.png"] = png_bytes(w, h, 16, 6, [rgba16[y].astype(">u2").tobytes() for y in range(h)])
    g16 = rs.randint(0, 600, (h, w)).astype(np.uint16)  # many values above 255: clipped
    out["gray16.png"] = png_bytes(w, h, 16, 0, [g16[y].astype(">u2").tobytes() for y in range(h)])
    ga16 = np.dstack([gray.astype(np.uint16) * 257, alpha.astype(np.uint16) * 257])
    out["gray_alpha16.png"] = png_bytes(w, h, 16, 4, [ga16[y].astype(">u2").tobytes() for y in range(h)])
    for depth in (1, 2, 4):
        vals = (gray.astype(np.int64) * ((1 << depth) - 1) // 255).astype(np.uint8)
        rows = [pack_row([(int(v),) for v in vals[y]], depth) for y in range(h)]
        out[f"gray{depth}.png"] = png_bytes(w, h, depth, 0, rows)
    # Palette: 12 colours; index 13..15 are past the palette (PIL shows its gray ramp).
    pal = np.array([[i * 20, 255 - i * 20, (i * 77) % 256] for i in range(12)], dtype=np.uint8)
    idx = (rs.randint(0, 16, (h, w))).astype(np.uint8)
    out["palette8.png"] = png_bytes(w, h, 8, 3, [idx[y].tobytes() for y in range(h)], plte=pal.tobytes())
    out["palette8_trns.png"] = png_bytes(w, h, 8, 3, [idx[y].tobytes() for y in range(h)], plte=pal.tobytes(),
                                         trns=bytes([0, 128, 255, 7]))
    idx4 = (idx % 12).astype(np.uint8)
    out["palette4.png"] = png_bytes(w, h, 4, 3, [pack_row([(int(v),) for v in idx4[y]], 4) for y in range(h)],
                                    plte=pal.tobytes())
    out["rgb8_trns.png"] = png_bytes(w, h, 8, 2, [rgb[y].tobytes() for y in range(h)], trns=struct.pack(">HHH", 10, 20, 30))
    gama = png_chunk(b"gAMA", struct.pack(">I", 100000))  # gamma 1.0: PIL ignores it
    out["rgb8_gamma.png"] = png_bytes(w, h, 8, 2, [rgb[y].tobytes() for y in range(h)], extra=gama)
    out["rgb8_interlaced.png"] = png_bytes(w, h, 8, 2, [rgb[y].tobytes() for y in range(h)], interlace=1)
    out["gray2_interlaced.png"] = png_bytes(
        w, h, 2, 0, [pack_row([(int(v) >> 6,) for v in gray[y]], 2) for y in range(h)], interlace=1)
    return out


def make_jpegs(w, h):
    rgb = Image.fromarray(pattern(w, h, 2))
    out = {}

    def save(im, **kw):
        b = io.BytesIO()
        im.save(b, "JPEG", **kw)
        return b.getvalue()

    out["rgb420.jpg"] = save(rgb, quality=90, subsampling=2)
    out["rgb444.jpg"] = save(rgb, quality=90, subsampling=0)
    out["rgb422.jpg"] = save(rgb, quality=75, subsampling=1)
    out["gray.jpg"] = save(rgb.convert("L"), quality=90)
    out["progressive.jpg"] = save(rgb, quality=85, progressive=True)
    cmyk = Image.fromarray(np.dstack([pattern(w, h, 3), pattern(w, h, 4)[..., :1]]), "CMYK")
    out["cmyk.jpg"] = save(cmyk, quality=90)
    out["rgb420_big.jpg"] = save(Image.fromarray(pattern(97, 61, 5)), quality=90)  # for resampling
    return out


# ------------------------------------------------------------------ decode.json
def decode_golden(files):
    out = {}
    for name, data in sorted(files.items()):
        im = Image.open(io.BytesIO(data))
        with warnings.catch_warnings():  # palette8_trns.png: "Palette images with Transparency..."
            warnings.simplefilter("ignore")
            rgb = np.asarray(im.convert("RGB"))
            l = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
        out[name] = {"pil_mode": im.mode, "width": im.size[0], "height": im.size[1],
                     "rgb": b64(rgb), "l": b64(l),
                     "rgb_sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}
    return out


# ------------------------------------------------------------------ transforms.json
def draws(seed, size, n, scale, ratio, with_flip):
    h, w = size
    img = torch.empty(3, h, w)
    torch.manual_seed(seed)
    out = []
    for _ in range(n):
        i, j, hh, ww = T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
        rec = {"box": [i, j, hh, ww]}
        if with_flip:
            rec["flip"] = bool(torch.rand(1) < 0.5)
        out.append(rec)
    return out


def transforms_golden(files):
    cases = []
    sizes = [(375, 500), (500, 375), (21, 33), (100, 100), (1, 1), (30, 400), (400, 30), (2000, 3000)]
    settings = [((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)), ((0.5, 0.9), (0.5, 2.0)), ((0.9, 1.0), (0.1, 0.2)),
                ((0.25, 0.75), (1.0, 1.0))]
    for seed in (0, 1, 42):
        for size in sizes:
            for scale, ratio in settings:
                cases.append({"seed": seed, "height": size[0], "width": size[1], "scale": list(scale),
                              "ratio": list(ratio), "draws": draws(seed, size, 6, scale, ratio, True)})
    # log(ratio) and exp() through torch's float32 kernels for many values.
    ratios = [0.1, 0.2, 0.5, 0.75, 3.0 / 4.0, 4.0 / 3.0, 1.0, 1.5, 2.0, 3.0, 7.3, 10.0, 0.013, 99.0]
    logs = torch.log(torch.tensor(ratios)).tolist()
    xs = torch.linspace(-3, 3, 601)
    exps = torch.exp(xs).tolist()
    exp_cases = [[float(x), e] for x, e in zip(xs.tolist(), exps)]
    # Pillow's crop(box).resize(size, BILINEAR) on RGB and L.
    src = Image.open(io.BytesIO(files["rgb420_big.jpg"])).convert("RGB")
    resizes = []
    for box, size in [((0, 0, 97, 61), (24, 16)), ((5, 3, 90, 58), (32, 32)), ((10, 7, 40, 29), (77, 50)),
                      ((0, 0, 97, 61), (97, 30)), ((0, 0, 97, 61), (20, 61)), ((13, 11, 14, 12), (5, 9)),
                      ((0, 0, 97, 61), (7, 3)), ((30, 20, 61, 53), (31, 33)), ((1, 1, 96, 60), (1, 1))]:
        for mode in ("RGB", "L"):
            im = src.convert(mode).crop(box).resize(size, Image.BILINEAR)
            resizes.append({"mode": mode, "box": list(box), "size": list(size), "pixels": b64(np.asarray(im))})
    # Whole pipelines on files.
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    pipelines = []
    for fname in ("rgb420_big.jpg", "rgb8.png"):
        for seed in (0, 1, 42):
            for name, size in (("train", 24), ("eval", 24), ("train", 40), ("eval", 13)):
                if name == "train":
                    geo = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
                else:
                    geo = [T.Resize(int(size * 256 / 224)), T.CenterCrop(size)]
                torch.manual_seed(seed)
                im = Image.open(io.BytesIO(files[fname])).convert("RGB")
                u8 = np.asarray(T.Compose(geo)(im))
                rec = {"file": fname, "seed": seed, "preset": name, "size": size, "shape": list(u8.shape),
                       "uint8_hwc": b64(u8)}
                if seed == 0 and size == 24:  # the float output of ToTensor + Normalize, bit for bit
                    torch.manual_seed(seed)
                    im = Image.open(io.BytesIO(files[fname])).convert("RGB")
                    f32 = T.Compose(geo + [T.ToTensor(), T.Normalize(mean, std)])(im).numpy()
                    rec["float32_chw"] = b64(f32.astype("<f4"))
                pipelines.append(rec)
    # Sequences of samples (a dataset's get() in order after one manual_seed).
    seqs = []
    for seed in (3, 17):
        torch.manual_seed(seed)
        tr = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip()])
        outs = []
        for fname in ("rgb420.jpg", "rgb8.png", "gray.jpg", "rgb420_big.jpg"):
            outs.append(b64(np.asarray(tr(Image.open(io.BytesIO(files[fname])).convert("RGB")))))
        seqs.append({"seed": seed, "files": ["rgb420.jpg", "rgb8.png", "gray.jpg", "rgb420_big.jpg"], "size": 16,
                     "uint8_hwc": outs})
    # CenterCrop larger than the image (zero padding), Resize with max_size, Resize((h, w)).
    extra = []
    src_small = Image.open(io.BytesIO(files["rgb420.jpg"])).convert("RGB")  # 33x21
    for desc, tr in [("CenterCrop(25,40)", T.CenterCrop((25, 40))), ("CenterCrop(30)", T.CenterCrop(30)),
                     ("CenterCrop(10,7)", T.CenterCrop((10, 7))),
                     ("Resize(10,max_size=12)", T.Resize(10, max_size=12)), ("Resize((9,50))", T.Resize((9, 50))),
                     ("Resize(21)", T.Resize(21)),
                     ("Resize(40)+CenterCrop(50)", T.Compose([T.Resize(40), T.CenterCrop(50)])),
                     ("CenterCrop(30)+Resize(12)", T.Compose([T.CenterCrop(30), T.Resize(12)])),
                     ("Resize(12)+Resize(30)", T.Compose([T.Resize(12), T.Resize(30)]))]:
        a = np.asarray(tr(src_small))
        extra.append({"transform": desc, "shape": list(a.shape), "uint8_hwc": b64(a)})
    return {"meta": META, "draws": cases, "log": [[r, l] for r, l in zip(ratios, logs)], "exp": exp_cases,
            "resize": resizes, "pipelines": pipelines, "sequences": seqs, "geometry": extra}


# ------------------------------------------------------------------ folder.json
# (path, kind): "f" a file, "d" a directory, "l:TARGET" a symbolic link.
FOLDER_TREE = [
    ("cat", "d"), ("cat/a.jpg", "f"), ("cat/B.JPG", "f"), ("cat/c.jpeg", "f"), ("cat/notes.txt", "f"),
    ("cat/sub", "d"), ("cat/sub/d.png", "f"), ("cat/sub/deeper", "d"), ("cat/sub/deeper/f.PNG", "f"),
    ("cat/sub-x", "d"), ("cat/sub-x/e.png", "f"), ("cat/z.webp", "f"), ("cat/Upper.Jpeg", "f"),
    ("cat/link", "l:../Zebra"),
    ("dog", "d"), ("dog/1.png", "f"), ("dog/10.png", "f"), ("dog/2.png", "f"), ("dog/_x.jpg", "f"),
    ("dog/.hidden.jpg", "f"), ("dog/noext", "f"), ("dog/x.jpg.bak", "f"), ("dog/y.tiff", "f"),
    ("Zebra", "d"), ("Zebra/x.bmp", "f"), ("Zebra/y.ppm", "f"),
    ("readme.txt", "f"),
]
EMPTY_TREE = [("a", "d"), ("a/x.jpg", "f"), ("b", "d"), ("b/readme.txt", "f"), ("c", "d")]


def build(root, tree):
    for path, kind in tree:
        p = os.path.join(root, path)
        if kind == "d":
            os.makedirs(p, exist_ok=True)
        elif kind == "f":
            open(p, "wb").close()
        else:
            os.symlink(kind[2:], p)


def folder_golden():
    out = {"meta": META, "tree": [list(t) for t in FOLDER_TREE], "empty_tree": [list(t) for t in EMPTY_TREE]}
    with tempfile.TemporaryDirectory() as d:
        root = os.path.join(d, "root")
        build(root, FOLDER_TREE)
        ds = ImageFolder(root)
        out["classes"] = ds.classes
        out["class_to_idx"] = ds.class_to_idx
        out["samples"] = [[os.path.relpath(p, root), t] for p, t in ds.samples]
        ds2 = ImageFolder(root, is_valid_file=lambda p: p.endswith((".png", ".bmp")))
        out["samples_png_bmp"] = [[os.path.relpath(p, root), t] for p, t in ds2.samples]
        try:
            ImageFolder(root, is_valid_file=lambda p: p.endswith(".png"))
            raise SystemExit("Zebra has no .png: it should be refused")
        except FileNotFoundError as e:
            out["empty_class_error_is_valid_file"] = {"type": type(e).__name__, "message": str(e)}
        root2 = os.path.join(d, "empty")
        build(root2, EMPTY_TREE)
        try:
            ImageFolder(root2)
            raise SystemExit("an empty class should be refused")
        except FileNotFoundError as e:
            out["empty_class_error"] = {"type": type(e).__name__, "message": str(e)}
        root3 = os.path.join(d, "noclasses")
        os.makedirs(root3)
        open(os.path.join(root3, "x.jpg"), "wb").close()
        try:
            ImageFolder(root3)
        except FileNotFoundError as e:
            out["no_class_error"] = {"type": type(e).__name__, "message": str(e).replace(root3, "{root}")}
    return out


def main():
    if os.path.isdir(FILES):
        shutil.rmtree(FILES)
    os.makedirs(FILES)
    files = {}
    files.update(make_jpegs(33, 21))
    files.update(make_pngs(33, 21))
    for name, data in files.items():
        with open(os.path.join(FILES, name), "wb") as f:
            f.write(data)
    for name, obj in (("decode.json", {"meta": META, "files": decode_golden(files)}),
                      ("transforms.json", transforms_golden(files)), ("folder.json", folder_golden())):
        with open(os.path.join(HERE, name), "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
    total = sum(len(d) for d in files.values())
    print(f"{len(files)} images ({total} bytes) in {FILES}; decode.json, transforms.json, folder.json", file=sys.stderr)


if __name__ == "__main__":
    main()
