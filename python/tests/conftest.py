"""Fixtures of the Python suite: small image folders made with PIL, and the leak check
every test runs under (no child process and no shared-memory mapping left behind)."""
import gc
import os
import random

import pytest

import loader  # noqa: F401 - the package under test (PYTHONPATH=build/python, or installed)


def _children():
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            out.append(int(pid))
    return out


def shm_mappings():
    """This process's mappings of shared-memory files (slabs, shared tensors)."""
    with open("/proc/self/maps") as f:
        return [line for line in f if "/dev/shm/" in line or "memfd:" in line]


@pytest.fixture(autouse=True)
def no_leftovers():
    before = set(_children())
    yield
    gc.collect()
    import time

    deadline = time.time() + 10
    while time.time() < deadline:
        left = set(_children()) - before
        if not left:
            break
        time.sleep(0.05)
    assert not left, f"worker processes left behind: {sorted(left)}"


def make_image_folder(root, classes=3, per_class=5, seed=0, sizes=((64, 48), (50, 80), (100, 75))):
    """root/<class>/<i>.jpg|png of random pictures (smooth, so JPEG is realistic)."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            w, h = sizes[(c + i) % len(sizes)]
            img = Image.new("RGB", (w, h), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
            draw = ImageDraw.Draw(img)
            for _ in range(6):
                x0, y0 = rng.randrange(w), rng.randrange(h)
                draw.ellipse([x0, y0, x0 + rng.randrange(5, 30), y0 + rng.randrange(5, 30)],
                             fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
            ext = "png" if i % 4 == 3 else "jpg"
            img.save(os.path.join(d, f"img_{i}.{ext}"), quality=90)
    return root


@pytest.fixture(scope="session")
def image_root(tmp_path_factory):
    return make_image_folder(str(tmp_path_factory.mktemp("images")))
