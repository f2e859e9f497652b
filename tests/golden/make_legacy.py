#!/usr/bin/env python3
"""Record the legacy-format `.pt` golden files (tests/golden/pt_legacy/).

Run with Debian's PyTorch (python3-torch 1.13.1):
    /usr/bin/python3 make_legacy.py [OUTDIR]
OUTDIR defaults to the folder holding this script; the files go to OUTDIR/pt_legacy/ and
their description to OUTDIR/pt_legacy/manifest.json.

Every file but three is written by torch.save(obj, path, _use_new_zipfile_serialization=False)
itself. Torch 1.13 never writes storage views (view_metadata) or a non-CPU location, and
it no longer writes the tar format, so `storage_views.pt`, `location_cuda.pt` and
`tar_format_float32.pt` are written by this script in the layout torch.load reads, and
torch.load checks them here before they are recorded. The manifest describes what
torch.load returns for each file (the layout of pt_manifest.json, via make_golden.py's
describe_obj) and the file's layout: sys_info, storage keys and where each storage
record's bytes start.

Legacy files embed storage keys that are memory addresses, so two runs differ in those
bytes (and in the record offsets that follow them); the objects they describe do not.
"""
import collections
import hashlib
import io
import json
import os
import pickle
import pickletools
import struct
import sys
import tarfile
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402  (describe_obj, META)

OUT = os.path.join(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else HERE, "pt_legacy")


def legacy_save(obj, path, **kw):
    torch.save(obj, path, _use_new_zipfile_serialization=False, **kw)


def crafted_legacy_save(obj, path, views=None, location="cpu"):
    """torch 1.13's _legacy_save with two things it no longer writes: storage views and a
    location other than 'cpu'. `views` maps the data_ptr of a tensor's storage to
    (root tensor, element offset): that storage is written as a view into the root's."""
    views = views or {}
    serialized = {}

    def persistent_id(o):
        if not isinstance(o, torch.storage.TypedStorage):
            return None
        stype = getattr(torch, o.pickle_storage_type())
        if o.data_ptr() in views:
            root_t, off = views[o.data_ptr()]
            root = root_t.storage()
            key = str(root._storage._cdata)
            serialized[key] = root
            return ("storage", stype, key, location, root.size(), (str(o._storage._cdata), off, o.size()))
        key = str(o._storage._cdata)
        serialized[key] = o
        return ("storage", stype, key, location, o.size(), None)

    sys_info = dict(protocol_version=1001, little_endian=sys.byteorder == "little",
                    type_sizes=dict(short=2, int=4, long=struct.calcsize("l")))
    with open(path, "wb") as f:
        pickle.dump(0x1950a86a20f9469cfc6c, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump(sys_info, f, protocol=2)
        p = pickle.Pickler(f, protocol=2)
        p.persistent_id = persistent_id
        p.dump(obj)
        keys = sorted(serialized)
        pickle.dump(keys, f, protocol=2)
        f.flush()
        for k in keys:
            st = serialized[k]
            st._storage._write_file(f, True, True, torch._utils._element_size(st.dtype))


def tar_format_save(t, path):
    """The tar format of PyTorch <= 0.3 (members 'storages', 'tensors', 'pickle'), as
    torch.load's legacy_load reads it, for one contiguous float32 tensor."""
    st = io.BytesIO()
    pickle.dump(1, st, protocol=2)
    pickle.dump((0, "cpu", torch.FloatStorage), st, protocol=2)
    st.write(struct.pack("<q", t.numel()) + t.numpy().tobytes())
    pickle.dump([], st, protocol=2)  # storage views
    te = io.BytesIO()
    pickle.dump(1, te, protocol=2)
    pickle.dump((1, 0, torch.FloatTensor), te, protocol=2)
    te.write(struct.pack("<ii", t.dim(), 0) + struct.pack("<%dq" % t.dim(), *t.shape) +
             struct.pack("<%dq" % t.dim(), *t.stride()) + struct.pack("<q", 0))
    pk = io.BytesIO()
    p = pickle.Pickler(pk, protocol=2)
    p.persistent_id = lambda o: 1 if o is t else None
    p.dump(t)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, buf in (("storages", st), ("tensors", te), ("pickle", pk)):
            data = buf.getvalue()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def layout(path):
    """sys_info, pickle protocol, the storage key list and each record's offsets."""
    declared = {}

    class Scan(pickle.Unpickler):
        def find_class(self, mod, name):
            if "Storage" in name:
                return torch.serialization.StorageType(name)
            return super().find_class(mod, name)

        def persistent_load(self, pid):
            _, stype, key, _loc, numel, view = pid
            if key not in declared:
                declared[key] = (stype.dtype, numel,
                                 torch.storage.TypedStorage(wrap_storage=torch.UntypedStorage(
                                     numel * torch._utils._element_size(stype.dtype)), dtype=stype.dtype))
            root = declared[key][2]
            if view is None:
                return root
            _vk, off, size = view
            es = torch._utils._element_size(root.dtype)
            return torch.storage.TypedStorage(wrap_storage=root._storage[off * es:(off + size) * es], dtype=root.dtype)

    with open(path, "rb") as f:
        raw = f.read()
    f = io.BytesIO(raw)
    protos = [op[1] for op in pickletools.genops(raw) if op[0].name == "PROTO"][:1]
    pickle.load(f)
    pickle.load(f)
    sys_info = pickle.load(f)
    object_offset = f.tell()
    Scan(f).load()
    keys_offset = f.tell()
    keys = pickle.load(f)
    records = []
    for k in keys:
        count, = struct.unpack("<q", f.read(8))
        dtype = declared[k][0]
        records.append({"key": k, "dtype": str(dtype).replace("torch.", ""), "numel": count, "data_offset": f.tell()})
        f.seek(count * torch._utils._element_size(dtype), 1)
    return {"pickle_protocol": protos[0] if protos else None, "sys_info": sys_info, "object_offset": object_offset,
            "keys_offset": keys_offset, "storage_keys": keys, "records": records, "end_offset": f.tell()}


def weights_only_loads(path):
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return True
    except Exception:  # noqa: BLE001  (1.13's weights_only unpickler has no BINFLOAT, _codecs.encode)
        return False


def objects():
    inf, nan = float("inf"), float("nan")
    f32 = torch.tensor([[0.0, -1.5, 3.25, 1e-8], [inf, -inf, nan, 65504.0], [1.0 / 3, -0.0, 2.0 ** -149, 3.4e38]],
                       dtype=torch.float32)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    with torch.no_grad():
        net[0].weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) / 8)
        net[0].bias.copy_(torch.tensor([0.5, -0.5]))
        net[1].running_mean.copy_(torch.tensor([0.25, 0.75]))
        net[1].running_var.copy_(torch.tensor([1.5, 2.5]))
        net[1].num_batches_tracked.fill_(7)
    shared = torch.arange(6, dtype=torch.int64)
    dtypes = {
        "float32": f32,
        "float64": torch.tensor([0.1, -2.5, 1e300, -1e-300, inf, 5e-324], dtype=torch.float64),
        "float16": torch.tensor([0.0, 1.0, -2.0, 0.5, 65504.0, 6.1035e-05, 5.96e-08, inf], dtype=torch.float16),
        "bfloat16": torch.tensor([0.0, 1.0, -2.0, 3.140625, 1e38, -1e-38, inf, 0.1], dtype=torch.bfloat16),
        "int64": torch.tensor([[0, 1, -1], [2**62, -2**63, 2**63 - 1]], dtype=torch.int64),
        "int32": torch.tensor([0, -1, 2**31 - 1, -2**31], dtype=torch.int32),
        "int16": torch.tensor([0, -1, 32767, -32768], dtype=torch.int16),
        "int8": torch.tensor([0, -1, 127, -128], dtype=torch.int8),
        "uint8": torch.arange(0, 256, 17, dtype=torch.uint8).reshape(4, 4),
        "bool": torch.tensor([[True, False, True], [False, False, True]]),
        "complex64": torch.tensor([1 + 2j, -0.5 - 0.25j, nan + 1j], dtype=torch.complex64),
    }
    objs = {"t_" + k: v for k, v in dtypes.items()}
    objs.update({
        # every dtype in one file: records of odd sizes, most of them unaligned
        "all_dtypes": {k: v[..., :3] if v.dim() else v for k, v in dtypes.items()},
        "t_scalar_0dim": torch.tensor(3.5),
        "t_scalar_int64": torch.tensor(-7, dtype=torch.int64),
        "t_empty_1d": torch.empty(0, dtype=torch.float32),
        "t_empty_2x0": torch.empty(2, 0, dtype=torch.int64),
        "t_large_f32_1000": torch.arange(1000, dtype=torch.float32) * 0.5,
        "view_transpose": base.t(),
        "view_slice_step": base[:, ::2],
        "view_offset": base[1:, 2:],
        "view_expand_stride0": torch.tensor([1.0, 2.0, 3.0]).expand(4, 3),
        "views_sharing_storage": [base, base[1:], base.t(), base[2, 3]],
        "shared_storages": {"a": shared, "b": shared, "c": shared[1:3], "d": torch.ones(2, dtype=torch.int64),
                            "e": [shared.view(2, 3)]},
        "nested": {"a": [torch.arange(2), (torch.ones(2), 3)],
                   "b": {"c": torch.tensor([7], dtype=torch.int16), "d": "str", "e": 1.5, "f": None, "g": False,
                         3: "int key", "h": b"\x00\x01", (1, "t"): "tuple key"},
                   "i": [[[]], ((),), {}, collections.OrderedDict(x=torch.zeros(1))]},
        "state_dict": net.state_dict(),
        "parameter": torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
        "requires_grad_tensor": torch.tensor([1.0, 2.0, 3.0], requires_grad=True),
        "many_storages": [torch.full((3,), i, dtype=torch.int16) for i in range(12)],
    })
    return objs


def main():
    warnings.simplefilter("ignore")
    os.makedirs(OUT, exist_ok=True)
    manifest = {}

    def record(name, path, loaded, **extra):
        storages = {}
        with open(path, "rb") as fh:
            sha = hashlib.sha256(fh.read()).hexdigest()
        e = {"object": mg.describe_obj(loaded, storages), "num_distinct_storages": len(storages),
             "file_size": os.path.getsize(path), "sha256": sha, "weights_only_loads": weights_only_loads(path)}
        e.update(extra)
        manifest[name] = e

    for name, obj in objects().items():
        path = os.path.join(OUT, name + ".pt")
        legacy_save(obj, path)
        loaded = torch.load(path)
        assert mg._eq(obj, loaded), name
        record(name + ".pt", path, loaded, legacy=layout(path))

    # pickle protocol 4: FRAME and MEMOIZE opcodes, the magic number in a frame
    obj = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "n": 3}
    path = os.path.join(OUT, "protocol4.pt")
    legacy_save(obj, path, pickle_protocol=4)
    loaded = torch.load(path)
    assert mg._eq(obj, loaded)
    record("protocol4.pt", path, loaded, legacy=layout(path))

    # storage views (view_metadata), as PyTorch < 1.0 wrote them
    root = torch.arange(10, dtype=torch.float32)
    v1 = root[2:6].clone()      # saved as a view: elements [2, 6) of root's storage
    v2 = root[7:10].clone()     # another view of the same storage
    path = os.path.join(OUT, "storage_views.pt")
    crafted_legacy_save({"root": root, "v1": v1, "v1_2x2": v1.view(2, 2), "v2": v2[1:]}, path,
                        views={v1.data_ptr(): (root, 2), v2.data_ptr(): (root, 7)})
    loaded = torch.load(path)
    assert torch.equal(loaded["v1"], root[2:6]) and torch.equal(loaded["v2"], root[8:10])
    assert loaded["v1"].data_ptr() == loaded["root"].data_ptr() + 8  # the view shares the root's bytes
    assert loaded["v1_2x2"].storage().data_ptr() == loaded["v1"].storage().data_ptr()
    record("storage_views.pt", path, loaded, legacy=layout(path))

    # a checkpoint saved from a GPU: location 'cuda:0' (loaded with map_location='cpu')
    obj = {"w": torch.tensor([1.5, -2.5]), "b": torch.tensor([3], dtype=torch.int64)}
    path = os.path.join(OUT, "location_cuda.pt")
    crafted_legacy_save(obj, path, location="cuda:0")
    loaded = torch.load(path, map_location="cpu")
    assert mg._eq(obj, loaded)
    record("location_cuda.pt", path, loaded, legacy=layout(path))

    # a whole pickled nn.Module: ('module', <class>, source_file, source) persistent ids.
    # The class is made with type() so that no source file or source text is embedded.
    tiny_cls = type("Tiny", (torch.nn.Module,), {})
    globals()["Tiny"] = tiny_cls
    tiny = tiny_cls()
    tiny.w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    path = os.path.join(OUT, "module_tiny.pt")
    legacy_save(tiny, path)
    back = torch.load(path)
    assert torch.equal(back.w, tiny.w)
    with open(path, "rb") as fh:
        manifest["module_tiny.pt"] = {"refused": "a pickled torch.nn.Module ('module' persistent id)",
                                      "file_size": os.path.getsize(path),
                                      "sha256": hashlib.sha256(fh.read()).hexdigest()}

    # the tar format of PyTorch <= 0.3, which torch.load still reads
    t = torch.tensor([1.0, 2.0, 3.0])
    path = os.path.join(OUT, "tar_format_float32.pt")
    tar_format_save(t, path)
    assert torch.equal(torch.load(path), t)
    with open(path, "rb") as fh:
        manifest["tar_format_float32.pt"] = {"refused": "the tar format of PyTorch <= 0.3",
                                             "object": mg.describe_obj(t, {}), "file_size": os.path.getsize(path),
                                             "sha256": hashlib.sha256(fh.read()).hexdigest()}

    meta = dict(mg.META, generator="make_legacy.py")
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"description": "Legacy-format (pre-1.6, non-zip) torch.save files written by torch 1.13 "
                   "(_use_new_zipfile_serialization=False; storage_views.pt, location_cuda.pt and "
                   "tar_format_float32.pt written by make_legacy.py in the layout torch.load reads). 'object' "
                   "describes what torch.load returns, as in pt_manifest.json; 'legacy' gives the layout: "
                   "sys_info, storage keys and each storage record's data offset. 'refused' marks files "
                   "loader refuses by design.", "files": manifest, "meta": meta}, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", len(manifest), "files and manifest.json into", OUT)


if __name__ == "__main__":
    main()
