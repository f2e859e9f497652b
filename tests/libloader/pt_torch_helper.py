"""PyTorch side of tests/libloader/pt_torch_test.cpp (needs torch; run with /usr/bin/python3).

  pt_torch_helper.py describe OUT.json FILE...   load each FILE with torch.load and describe it
  pt_torch_helper.py make OUTDIR                 torch.save a set of objects into OUTDIR and
                                                 describe them in OUTDIR/manifest.json
  pt_torch_helper.py make_pairs OUTDIR N SEED    torch.save N random objects twice, in the zip
                                                 (NAME_zip.pt) and the legacy format
                                                 (NAME_legacy.pt); OUTDIR/manifest.json
                                                 describes them by NAME

Descriptions use the layout of golden/make_golden.py's describe_obj (pt_manifest.json),
extended with sets and bytearrays as loader represents them.
"""
import collections
import hashlib
import io
import json
import math
import os
import struct
import sys

import torch


def _f(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return repr(v)
    return v


def _values(t):
    def fix(a):
        if isinstance(a, list):
            return [fix(b) for b in a]
        if isinstance(a, complex):
            return [_f(a.real), _f(a.imag)]
        return _f(a)
    return fix(t.tolist())


def _raw_hex(t):
    c = t.contiguous()
    width = {torch.float16: (torch.int16, 4), torch.bfloat16: (torch.int16, 4),
             torch.float32: (torch.int32, 8), torch.float64: (torch.int64, 16)}.get(c.dtype)
    if width is None:
        return None
    view, digits = width
    mask = (1 << (4 * digits)) - 1
    return [format(v & mask, "0%dx" % digits) for v in c.view(view).reshape(-1).tolist()]


def _storage_bytes(t):
    st = t.storage()
    return bytes(st.untyped()) if hasattr(st, "untyped") else bytes(st)


def tensor_entry(t):
    e = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "stride": list(t.stride()),
         "storage_offset": t.storage_offset(), "storage_numel": t.storage().size(),
         "is_contiguous": t.is_contiguous(), "requires_grad": bool(t.requires_grad), "values": _values(t.detach())}
    h = _raw_hex(t.detach())
    if h is not None:
        e["values_bits_hex"] = h
    b = _storage_bytes(t.detach())
    e["storage_sha256"] = hashlib.sha256(b).hexdigest()
    e["storage_bytes_hex"] = b.hex() if len(b) <= 512 else None
    return e


def _storage_identity(t):
    """The storage itself (its StorageImpl), as torch.save deduplicates: unlike data_ptr(),
    this tells apart distinct empty storages, which all have data_ptr() 0."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()._cdata
    return t.storage()._storage._cdata


def describe(x, storages):
    if isinstance(x, torch.Tensor):
        d = tensor_entry(x)
        d["kind"] = "parameter" if isinstance(x, torch.nn.Parameter) else "tensor"
        d["storage_id"] = storages.setdefault(_storage_identity(x), len(storages))
        return d
    if isinstance(x, collections.OrderedDict):
        d = {"kind": "OrderedDict", "items": [[describe(k, storages), describe(v, storages)] for k, v in x.items()]}
        md = getattr(x, "_metadata", None)
        if md is not None:
            d["attr__metadata"] = describe(md, storages)
        return d
    if isinstance(x, dict):
        return {"kind": "dict", "items": [[describe(k, storages), describe(v, storages)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"kind": "tuple", "items": [describe(v, storages) for v in x]}
    if isinstance(x, list):
        return {"kind": "list", "items": [describe(v, storages) for v in x]}
    if isinstance(x, (set, frozenset)):
        return {"kind": type(x).__name__, "items": [describe(v, storages) for v in x]}
    if isinstance(x, bool):
        return {"kind": "bool", "value": x}
    if isinstance(x, int):
        return {"kind": "int", "value": x}
    if isinstance(x, float):
        return {"kind": "float", "value": _f(x), "bits_hex": struct.pack(">d", x).hex()}
    if isinstance(x, str):
        return {"kind": "str", "value": x}
    if isinstance(x, (bytes, bytearray)):
        return {"kind": "bytes", "hex": bytes(x).hex()}
    if x is None:
        return {"kind": "None"}
    raise TypeError(type(x))


def entry(obj):
    storages = {}
    d = describe(obj, storages)
    return {"object": d, "num_distinct_storages": len(storages)}


def cmd_describe(out, files):
    result = {}
    for f in files:
        r = {}
        try:
            obj = torch.load(f, weights_only=True)
            r["weights_only"] = True
        except Exception as e:  # noqa: BLE001  (1.13's weights_only lacks BINFLOAT and _codecs.encode)
            r["weights_only"] = False
            r["weights_only_error"] = str(e).splitlines()[-1][:300]
            obj = torch.load(f)
        r.update(entry(obj))
        import zipfile
        if zipfile.is_zipfile(f):
            r["format"] = "zip"
            with zipfile.ZipFile(f) as z:
                r["testzip"] = z.testzip()
                r["records"] = z.namelist()
        else:
            r["format"] = "legacy"
            r["testzip"] = None
            r["records"] = []
        result[os.path.basename(f)] = r
    with open(out, "w") as fh:
        json.dump(result, fh)


def objects():
    inf, nan = float("inf"), float("nan")
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    rg = torch.tensor([1.0, -2.0], requires_grad=True)
    attr = torch.tensor([5, 6], dtype=torch.int16)
    attr.foo = "bar"  # S24: Python attributes (dropped by loader)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2), torch.nn.Conv2d(1, 2, 2))
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / (i + 2))
    shared = torch.arange(6, dtype=torch.int64)
    return {
        "py_float32": torch.tensor([0.0, -0.0, inf, -inf, nan, 1e-45, 3.4e38, 1 / 3], dtype=torch.float32),
        "py_float64": torch.tensor([[0.1, -1e300], [5e-324, nan]], dtype=torch.float64),
        "py_float16": torch.tensor([65504.0, -6e-8, inf, 0.1], dtype=torch.float16),
        "py_bfloat16": torch.tensor([1e38, -3.0, nan, 0.1], dtype=torch.bfloat16),
        "py_int64": torch.tensor([-2**63, 2**63 - 1, 0, -1], dtype=torch.int64),
        "py_int32": torch.tensor([[-2**31], [2**31 - 1]], dtype=torch.int32),
        "py_int16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "py_int8": torch.tensor([-128, 127], dtype=torch.int8),
        "py_uint8": torch.arange(0, 256, 51, dtype=torch.uint8),
        "py_bool": torch.tensor([[True], [False]]),
        "py_complex64": torch.tensor([1 - 1j, nan + 2j, -0.0 + inf * 1j], dtype=torch.complex64),
        "py_scalar": torch.tensor(-7, dtype=torch.int32),
        "py_empty": torch.empty(0, 3, dtype=torch.float16),
        "py_views": [base, base.t(), base[1:, ::2], base[2, 3], base[:, 1:2].expand(4, 5)],
        "py_offset_into_larger": torch.arange(10)[2:5],
        "py_parameter": torch.nn.Parameter(torch.tensor([[1.5, 2.5]])),
        "py_parameter_no_grad": torch.nn.Parameter(torch.tensor([3.0]), requires_grad=False),
        "py_requires_grad": rg,
        "py_tensor_with_attribute": attr,
        "py_state_dict": net.state_dict(),
        "py_many_storages": [torch.full((2,), i, dtype=torch.int32) for i in range(12)],
        "py_same_tensor_twice": {"a": shared, "b": shared, "c": shared[1:3]},
        "py_containers": {"ints": [0, 255, 256, 65535, 65536, -1, -2**31, 2**31, 2**40, -2**63, 2**63 - 1],
                          "floats": [1.5, -0.0, inf, nan, 1e-310], "str": "ünï \U0001F600", "none": None,
                          "bools": (True, False), 7: "int key", (1, "t"): "tuple key",
                          "bytes": b"\x00\xff\x80a", "empty_bytes": b"", "bytearray": bytearray(b"xy"),
                          "set": {3, 1, 2}, "frozenset": frozenset({5}), "size": torch.Size([2, 3]),
                          "nested": [[[]], ((),), {}, collections.OrderedDict(a=1)]},
        "py_tensor_dataset": torch.utils.data.TensorDataset(torch.arange(20.0).reshape(10, 2),
                                                            torch.arange(10)).tensors,
    }


def cmd_make(outdir):
    manifest = {}
    for name, obj in objects().items():
        path = os.path.join(outdir, name + ".pt")
        torch.save(obj, path)
        manifest[name + ".pt"] = entry(obj)
    # saved to a buffer: archive prefix "archive"
    buf = io.BytesIO()
    torch.save({"x": torch.ones(2)}, buf)
    with open(os.path.join(outdir, "py_bytesio.pt"), "wb") as fh:
        fh.write(buf.getvalue())
    manifest["py_bytesio.pt"] = entry({"x": torch.ones(2)})
    # S5: a header before the archive
    with open(os.path.join(outdir, "py_with_header.pt"), "wb") as fh:
        fh.write(b"HEADER")
        torch.save(torch.tensor([1, 2, 3]), fh)
    manifest["py_with_header.pt"] = entry(torch.tensor([1, 2, 3]))
    with open(os.path.join(outdir, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)


def random_objects(n, seed):
    """n random objects of tensors (every dtype, views, shared storages, 0-dim and empty),
    Parameters, nested containers and state_dicts; no Python floats or bytes, which
    torch 1.13's weights_only loader cannot read."""
    import random
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool, torch.complex64]

    def new_tensor():
        dt = rng.choice(dtypes)
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        if dt.is_complex or dt.is_floating_point:
            return torch.randn(shape, generator=gen, dtype=torch.complex64 if dt.is_complex else torch.float64).to(dt)
        if dt == torch.bool:
            return torch.rand(shape, generator=gen) > 0.5
        lo, hi = (0, 256) if dt == torch.uint8 else (-128, 128)
        return torch.randint(lo, hi, shape, generator=gen, dtype=dt)

    def view_of(t):
        choices = [lambda: t]
        if t.dim() == 2:
            choices.append(lambda: t.t())
        if t.dim() >= 1 and t.shape[0] > 1:
            choices += [lambda: t[1:], lambda: t[::2], lambda: t[-1]]
        if t.dim() >= 1:
            choices.append(lambda: t.unsqueeze(0).expand(2, *t.shape))
        return rng.choice(choices)()

    def tensor(pool):
        if pool and rng.random() < 0.4:
            t = view_of(rng.choice(pool))  # shares a storage with an earlier tensor
        else:
            t = new_tensor()
            pool.append(t)
            t = view_of(t) if rng.random() < 0.3 else t
        r = rng.random()
        if r < 0.1 and (t.dtype.is_floating_point or t.dtype.is_complex):
            return torch.nn.Parameter(t, requires_grad=rng.random() < 0.7)
        if r < 0.15 and t.dtype.is_floating_point:
            return t.detach().requires_grad_()
        return t

    def value(pool, depth):
        r = rng.random()
        if depth >= 3 or r < 0.45:
            return tensor(pool)
        if r < 0.55:
            return rng.choice([rng.randint(-2**40, 2**40), "s%d" % rng.randint(0, 99), True, False, None])
        items = [value(pool, depth + 1) for _ in range(rng.randint(0, 4))]
        if r < 0.7:
            return items
        if r < 0.8:
            return tuple(items)
        keys = ["k%d" % i if rng.random() < 0.7 else i for i in range(len(items))]
        return (dict if r < 0.9 else collections.OrderedDict)(zip(keys, items))

    objs = {}
    for i in range(n):
        if i % 7 == 3:
            net = torch.nn.Sequential(torch.nn.Linear(rng.randint(1, 4), 2), torch.nn.BatchNorm1d(2))
            objs["random_%02d" % i] = net.state_dict()
        else:
            pool = []
            objs["random_%02d" % i] = {"x%d" % k: value(pool, 1) for k in range(rng.randint(1, 5))}
    return objs


def cmd_make_pairs(outdir, n, seed):
    manifest = {}
    for name, obj in random_objects(n, seed).items():
        torch.save(obj, os.path.join(outdir, name + "_zip.pt"))
        torch.save(obj, os.path.join(outdir, name + "_legacy.pt"), _use_new_zipfile_serialization=False)
        manifest[name] = entry(obj)
    with open(os.path.join(outdir, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)


if __name__ == "__main__":
    if sys.argv[1] == "describe":
        cmd_describe(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "make":
        cmd_make(sys.argv[2])
    elif sys.argv[1] == "make_pairs":
        cmd_make_pairs(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit("usage: pt_torch_helper.py describe OUT.json FILE... | make OUTDIR | make_pairs OUTDIR N SEED")
