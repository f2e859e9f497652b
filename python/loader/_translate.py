"""Which Python datasets and transforms loader runs in C++, and their C++ handles.

A handle is (registered type name, parameters): what a worker process rebuilds the
dataset from.  ``to_cpp_dataset`` gives the C++ dataset of a Python one, or raises
TypeError naming what it cannot run (issue 49: Python datasets in the workers).
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Dict, List, Tuple

import torch
import torch.utils.data as _tud

from . import _C

Handle = Dict[str, Any]  # {"type": name, "params": {...}}

# TensorDataset tensors already in shared memory, per dataset object (one copy, however
# many loaders use it).  The _SharedTensors file lives as long as the dataset and every
# loader over it (loaders keep a reference).
_shared_tensor_files: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _refuse(what: str, why: str) -> TypeError:
    return TypeError(f"loader.DataLoader cannot run {what} in C++: {why}. Datasets and transforms written in "
                     "Python run in loader's Python workers, which are not released yet; use torch's "
                     "DataLoader for this dataset")


# ------------------------------------------------------------------ transforms
def is_bilinear(interpolation: Any) -> bool:
    """InterpolationMode.BILINEAR, or PIL's BILINEAR (2): the one interpolation the C++ path has."""
    return getattr(interpolation, "value", interpolation) == "bilinear" or interpolation == 2


def _interpolation_ok(t: Any) -> None:
    interp = getattr(t, "interpolation", None)
    if interp is not None and not is_bilinear(interp):
        raise _refuse(f"{type(t).__name__}(interpolation={getattr(interp, 'value', interp)})",
                      "only bilinear interpolation runs in C++")


def _size(size: Any) -> Any:
    if isinstance(size, (list, tuple)):
        return list(size) if len(size) != 1 else int(size[0])
    return int(size)


def transform_step(t: Any) -> Dict[str, Any]:
    """The C++ transform step of one torchvision (or loader.transforms) transform."""
    import torchvision.transforms as T

    if isinstance(t, T.RandomResizedCrop):
        _interpolation_ok(t)
        return {"name": "RandomResizedCrop", "size": _size(t.size), "scale": [float(x) for x in t.scale],
                "ratio": [float(x) for x in t.ratio]}
    if isinstance(t, T.Resize):
        _interpolation_ok(t)
        step = {"name": "Resize", "size": _size(t.size)}
        if t.max_size is not None:
            step["max_size"] = int(t.max_size)
        return step
    if isinstance(t, T.CenterCrop):
        return {"name": "CenterCrop", "size": _size(t.size)}
    if isinstance(t, T.RandomHorizontalFlip):
        return {"name": "RandomHorizontalFlip", "p": float(t.p)}
    if isinstance(t, T.ToTensor):
        return {"name": "ToTensor"}
    if isinstance(t, T.PILToTensor):
        return {"name": "PILToTensor"}
    if isinstance(t, T.ConvertImageDtype):
        if t.dtype != torch.float32:
            raise _refuse(f"ConvertImageDtype({t.dtype})", "only torch.float32 runs in C++")
        return {"name": "ConvertImageDtype", "dtype": "float32"}
    if isinstance(t, T.Normalize):  # in place or not, the values are the same
        return {"name": "Normalize", "mean": [float(x) for x in _seq(t.mean)], "std": [float(x) for x in _seq(t.std)]}
    raise _refuse(f"the transform {type(t).__module__}.{type(t).__qualname__}",
                  "the C++ transforms are RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, "
                  "PILToTensor, ConvertImageDtype and Normalize")


def _seq(x: Any) -> List[Any]:
    """A flat list of a scalar, a sequence, a range, a torch tensor or a numpy array."""
    if isinstance(x, torch.Tensor):
        return x.flatten().tolist()
    if hasattr(x, "tolist") and hasattr(x, "shape"):  # numpy
        v = x.tolist()
        return v if isinstance(v, list) else [v]
    if isinstance(x, (str, bytes)):
        return [x]
    try:
        return list(x)
    except TypeError:
        return [x]


def transform_steps(transform: Any) -> List[Dict[str, Any]]:
    """The C++ steps of a transform: a Compose (nested ones too) or a single transform."""
    import torchvision.transforms as T

    if isinstance(transform, T.Compose):
        steps: List[Dict[str, Any]] = []
        for t in transform.transforms:
            steps.extend(transform_steps(t))
        return steps
    return [transform_step(transform)]


# ------------------------------------------------------------------ datasets
def _is_torchvision_folder(ds: Any) -> bool:
    try:
        from torchvision.datasets import DatasetFolder
    except ImportError:  # pragma: no cover - torchvision is optional
        return False
    return isinstance(ds, DatasetFolder)


def _folder_handle(ds: Any) -> Tuple[Handle, List[Any]]:
    from torchvision.datasets import folder as tvf

    name = type(ds).__name__
    if getattr(ds, "target_transform", None) is not None:
        raise _refuse(f"{name} with target_transform={ds.target_transform!r}", "target_transform is a Python function")
    if ds.loader not in (tvf.default_loader, tvf.pil_loader):
        raise _refuse(f"{name} with loader={getattr(ds.loader, '__name__', ds.loader)!r}",
                      "only torchvision's default_loader (PIL, RGB) runs in C++")
    if ds.loader is tvf.default_loader:
        import torchvision
        if torchvision.get_image_backend() != "PIL":
            raise _refuse(f"{name} with the '{torchvision.get_image_backend()}' image backend",
                          "only torchvision's PIL backend runs in C++")
    if ds.transform is None:
        raise _refuse(f"{name} without a transform", "its samples would be PIL images; end the transform with "
                      "ToTensor or PILToTensor")
    steps = transform_steps(ds.transform)
    params: Dict[str, Any] = {"root": os.fspath(ds.root), "transform": steps, "mode": "RGB"}
    extensions = getattr(ds, "extensions", None)
    if extensions is None:
        raise _refuse(f"{name} with is_valid_file", "is_valid_file is a Python function")
    params["extensions"] = [e.lower() for e in (extensions if isinstance(extensions, (list, tuple)) else [extensions])]
    handle = {"type": "image_folder", "params": params}
    try:
        cpp = _C._Dataset("image_folder", params)
    except ValueError as e:
        text = str(e)
        if "transform" not in text and "step" not in text:
            raise
        # an order or argument of the transforms the C++ path does not reproduce
        raise _refuse(f"{name}'s transform {ds.transform!r}", text.split(": ", 1)[-1].split("image_folder: ", 1)[-1]) from e
    info = cpp.image_info()
    want = [(os.fspath(p), int(t)) for p, t in ds.samples]
    got = [(p, int(t)) for p, t in info["samples"]]
    if got != want:
        raise ValueError(
            f"loader.DataLoader: the {name} at {ds.root!r} lists {len(want)} samples that differ from the "
            f"{len(got)} files loader finds there (were ds.samples changed?). Select samples with "
            "torch.utils.data.Subset instead")
    return handle, [cpp]


def _fashion_mnist_handle(ds: Any) -> Tuple[Handle, List[Any]]:
    import torchvision.transforms as T

    name = type(ds).__name__
    if ds.target_transform is not None:
        raise _refuse(f"{name} with target_transform", "target_transform is a Python function")
    params: Dict[str, Any] = {"root": os.fspath(ds.raw_folder), "train": bool(ds.train)}
    ts = ds.transform.transforms if isinstance(ds.transform, T.Compose) else [ds.transform]
    ts = [t for t in ts if t is not None]
    if not ts or not isinstance(ts[0], T.ToTensor) or len(ts) > 2 or (len(ts) == 2 and not isinstance(ts[1], T.Normalize)):
        raise _refuse(f"{name} with transform={ds.transform!r}", "its C++ form takes ToTensor, optionally followed by "
                      "Normalize with one mean and one std")
    if len(ts) == 2:
        mean, std = _seq(ts[1].mean), _seq(ts[1].std)
        if len(mean) != 1 or len(std) != 1:
            raise _refuse(f"{name} with Normalize({mean}, {std})", "a 1-channel image takes one mean and one std")
        params["mean"], params["std"] = float(mean[0]), float(std[0])
    cpp = _C._Dataset("fashion_mnist", params)
    if len(cpp) != len(ds):
        raise ValueError(f"loader.DataLoader: {name} has {len(ds)} samples, its raw files at {ds.raw_folder!r} "
                         f"{len(cpp)}")
    return {"type": "fashion_mnist", "params": params}, [cpp]


def _tensor_dataset_handle(ds: Any) -> Tuple[Handle, List[Any]]:
    shared = _shared_tensor_files.get(ds)
    if shared is None or shared[0] != [id(t) for t in ds.tensors]:
        files = _C._SharedTensors(list(ds.tensors))
        shared = ([id(t) for t in ds.tensors], files)
        try:
            _shared_tensor_files[ds] = shared
        except TypeError:  # not weak-referenceable: no cache
            pass
    type_name, params = shared[1].handle()
    return {"type": type_name, "params": params}, [shared[1]]


def handle_of(ds: Any) -> Tuple[Handle, List[Any]]:
    """The C++ handle of a dataset and the objects that must outlive loaders over it."""
    from .datasets import CppDataset, CppIterableDataset

    if isinstance(ds, (CppDataset, CppIterableDataset)):
        return {"type": ds._cpp.type(), "params": ds._cpp.params()}, [ds._cpp] + list(ds._keep)
    t = type(ds)
    if t is _tud.TensorDataset:
        return _tensor_dataset_handle(ds)
    if t is _tud.Subset:
        inner, keep = handle_of(ds.dataset)
        return {"type": "subset", "params": {"dataset": inner, "indices": [int(i) for i in _seq(ds.indices)]}}, keep
    if t is _tud.ConcatDataset:
        handles, keep = [], []
        for d in ds.datasets:
            h, k = handle_of(d)
            handles.append(h)
            keep += k
        return {"type": "concat", "params": {"datasets": handles}}, keep
    if t.__name__ == "StackDataset" and t.__module__.startswith("torch.utils.data"):
        members = ds.datasets
        handles, keep, keys = [], [], None
        if isinstance(members, dict):
            keys = list(members.keys())
            members = list(members.values())
        for d in members:
            h, k = handle_of(d)
            handles.append(h)
            keep += k
        params: Dict[str, Any] = {"datasets": handles}
        if keys is not None:
            params["keys"] = keys
        return {"type": "stack", "params": params}, keep
    if _is_torchvision_folder(ds):
        return _folder_handle(ds)
    try:
        from torchvision.datasets import FashionMNIST
    except ImportError:  # pragma: no cover
        FashionMNIST = None
    if FashionMNIST is not None and type(ds) is FashionMNIST:
        return _fashion_mnist_handle(ds)
    raise _refuse(f"the dataset {t.__module__}.{t.__qualname__}",
                  "loader runs torchvision's ImageFolder/DatasetFolder and FashionMNIST, torch's TensorDataset, "
                  "Subset, ConcatDataset and StackDataset of these, loader.datasets, and datasets registered in "
                  "C++ (loader.datasets.from_handle)")


# Handles whose samples draw no random numbers (their parameters say whether they do).
_DETERMINISTIC = {"shared_tensors", "range", "fashion_mnist", "pt_tensor_dataset", "range_iterable", "counting"}
_RANDOM_STEPS = {"RandomResizedCrop", "RandomHorizontalFlip"}


def draws_random(handle_type: str, params: Any) -> bool:
    """Whether a dataset's samples may draw from the default generator (random
    transforms; a dataset type loader does not know: assume it may)."""
    if handle_type in _DETERMINISTIC:
        return False
    if handle_type in ("subset",):
        return draws_random(params["dataset"]["type"], params["dataset"].get("params"))
    if handle_type in ("concat", "stack", "chain"):
        return any(draws_random(h["type"], h.get("params")) for h in params["datasets"])
    if handle_type in ("image_folder", "image_list"):
        steps = params.get("transform", "none")
        if isinstance(steps, str):
            return steps == "train"
        for st in steps:
            name = st if isinstance(st, str) else st.get("name")
            if name in _RANDOM_STEPS and not (name == "RandomHorizontalFlip" and float(st.get("p", 0.5)) == 0.0):
                return True
        return False
    return True


def to_cpp_dataset(ds: Any) -> Tuple[Any, List[Any]]:
    """The C++ dataset (``_C._Dataset``) of a Python dataset, and what must outlive it."""
    from .datasets import CppDataset, CppIterableDataset

    if isinstance(ds, (CppDataset, CppIterableDataset)):
        return ds._cpp, list(ds._keep)
    handle, keep = handle_of(ds)
    if len(keep) == 1 and isinstance(keep[0], _C._Dataset) and keep[0].type() == handle["type"]:
        return keep[0], keep
    return _C._Dataset(handle["type"], handle["params"]), keep
