"""PyTorch side of tests/libloader/pt_torch_test.cpp (needs torch; run with /usr/bin/python3).

  pt_torch_helper.py describe OUT.json FILE...   load each FILE with torch.load and describe it
  pt_torch_helper.py make OUTDIR                 torch.save a set of objects into OUTDIR and
                                                 describe them in OUTDIR/manifest.json

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


def describe(x, storages):
    if isinstance(x, torch.Tensor):
        d = tensor_entry(x)
        d["kind"] = "parameter" if isinstance(x, torch.nn.Parameter) else "tensor"
        d["storage_id"] = storages.setdefault(x.storage().data_ptr(), len(storages))
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
        with zipfile.ZipFile(f) as z:
            r["testzip"] = z.testzip()
            r["records"] = z.namelist()
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


if __name__ == "__main__":
    if sys.argv[1] == "describe":
        cmd_describe(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "make":
        cmd_make(sys.argv[2])
    else:
        sys.exit("usage: pt_torch_helper.py describe OUT.json FILE... | make OUTDIR")
