"""loader: torch.utils.data's DataLoader, run by a C++ runtime.

    import loader
    dl = loader.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)
    for images, labels in dl:      # torch tensors over the shared memory the workers wrote
        ...

``loader.DataLoader`` takes torch 1.13's arguments (and gives its errors); the datasets it
runs are those C++ has: torchvision's ImageFolder/DatasetFolder with torchvision's
transforms, FashionMNIST, torch's TensorDataset, Subset, ConcatDataset and StackDataset
of these, ``loader.datasets`` and datasets registered in C++ by your own extension
(``loader.load_library``, ``loader.datasets.from_handle``).  See docs/python.md.
"""
from __future__ import annotations

import os as _os

import torch as _torch  # noqa: F401 - the extension hands tensors to torch

from . import _C

__version__: str = _C.__version__

from . import datasets, transforms  # noqa: E402
from .dataloader import DataLoader  # noqa: E402

__all__ = ["DataLoader", "datasets", "transforms", "load_library", "__version__"]


def load_library(path: str) -> None:
    """Loads a shared library that registers C++ datasets (LOADER_REGISTER_DATASET),
    collate functions or worker_init functions, here and in every worker process started
    afterwards (they load it before they rebuild their dataset).  It must link
    ``libloader.so`` from this package (``loader.library_path()``)."""
    path = _os.path.abspath(_os.fspath(path))
    _C.load_library(path)
    libs = [p for p in _os.environ.get("LOADER_EXTENSION_LIBRARIES", "").split(":") if p]
    if path not in libs:
        libs.append(path)
        _os.environ["LOADER_EXTENSION_LIBRARIES"] = ":".join(libs)


def library_path() -> str:
    """The path of ``libloader.so``, which an extension module links."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libloader.so")


def include_dir() -> str:
    """The directory of the public C++ headers, for building an extension module
    (``-I$(python -c 'import loader; print(loader.include_dir())')``).  An installed package
    has them; from the build tree, use the source tree's libloader/, datasets/ and actors/."""
    path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")
    if not _os.path.isdir(path):
        raise FileNotFoundError(f"{path}: this loader is not an installed package (pip install .); "
                                "use the source tree's libloader/, datasets/ and actors/ directories")
    return path
