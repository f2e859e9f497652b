"""loader's C++ datasets as torch datasets.

Each is a ``torch.utils.data.Dataset`` (or ``IterableDataset``) whose samples come from
C++: indexing one runs the C++ dataset in this process, and ``loader.DataLoader`` runs it
in its worker processes (they rebuild it from its handle: a registered name plus
parameters).

    ds = loader.datasets.ImageFolder("/data/train", transform=loader.transforms.Compose([
        loader.transforms.RandomResizedCrop(224), loader.transforms.RandomHorizontalFlip(),
        loader.transforms.ToTensor(),
        loader.transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    img, label = ds[0]                      # torchvision's bytes for the same draws

    squares = loader.datasets.from_handle("my_dataset", {"n": 100})   # registered in C++
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch.utils.data as _tud

from . import _C

__all__ = ["CppDataset", "CppIterableDataset", "ImageFolder", "ImageList", "FashionMNIST", "from_handle"]


class CppDataset(_tud.Dataset):
    """A map-style dataset implemented in C++ (``from_handle`` makes one)."""

    def __init__(self, cpp: Any, keep: Sequence[Any] = ()) -> None:
        self._cpp = cpp
        self._keep = list(keep)

    @property
    def handle(self) -> Tuple[str, Any]:
        """(registered type name, parameters): what a worker rebuilds this dataset from."""
        return self._cpp.type(), self._cpp.params()

    def __len__(self) -> int:
        return len(self._cpp)

    def __getitem__(self, index: int) -> Any:
        return self._cpp[int(index)]

    def __repr__(self) -> str:
        name, params = self.handle
        return f"loader.datasets.{type(self).__name__}({name!r}, {params!r})"


class CppIterableDataset(_tud.IterableDataset):
    """An iterable dataset implemented in C++ (``from_handle`` makes one)."""

    def __init__(self, cpp: Any) -> None:
        self._cpp = cpp
        self._keep: List[Any] = []

    @property
    def handle(self) -> Tuple[str, Any]:
        return self._cpp.type(), self._cpp.params()

    def __iter__(self):
        return iter(self._cpp)

    def __repr__(self) -> str:
        name, params = self.handle
        return f"loader.datasets.CppIterableDataset({name!r}, {params!r})"


def from_handle(name: str, params: Optional[Dict[str, Any]] = None) -> Any:
    """The dataset registered in C++ as ``name`` (LOADER_REGISTER_DATASET or
    LOADER_REGISTER_ITERABLE_DATASET), built with ``params``.

    A dataset of your own: build a shared library that registers it and links
    ``libloader.so`` (next to this package), then ``loader.load_library(path)`` before
    this call; worker processes load the same library (LOADER_EXTENSION_LIBRARIES).
    KeyError when nothing is registered under ``name``.
    """
    cpp = _C._Dataset(name, {} if params is None else params)
    return CppIterableDataset(cpp) if cpp.is_iterable() else CppDataset(cpp)


def _steps(transform: Any) -> Any:
    from ._translate import transform_steps

    return "none" if transform is None else transform_steps(transform)


def _refuse_callable(cls: str, what: str, value: Any) -> None:
    if value is not None:
        raise TypeError(f"loader.datasets.{cls}: {what} is a Python function, which the C++ dataset does not run; "
                        f"leave it None (or use torchvision.datasets.{cls} with torch's DataLoader)")


class _ImageDataset(CppDataset):
    transform: Any

    def _finish(self) -> None:
        info = self._cpp.image_info()
        self.samples: List[Tuple[str, int]] = [(p, int(t)) for p, t in info["samples"]]
        self.imgs = self.samples
        self.targets: List[int] = [t for _, t in self.samples]
        if "classes" in info:
            self.classes: List[str] = list(info["classes"])
            self.class_to_idx: Dict[str, int] = dict(info["class_to_idx"])


class ImageFolder(_ImageDataset):
    """torchvision.datasets.ImageFolder, decoded and transformed in C++.

    ``root/<class>/<image>`` as torchvision finds them (same classes, order, targets);
    ``transform`` is a Compose of loader.transforms (or torchvision's) that the C++ path
    has, or None (samples are then uint8 HWC tensors).  ``extensions`` (default
    torchvision's IMG_EXTENSIONS), ``mode`` ("RGB", as torchvision's loader, or "L"),
    ``decode_scaling`` (let the JPEG decoder downscale first: faster, not
    torchvision's bytes) and ``max_image_pixels`` are loader's.
    """

    def __init__(self, root: str, transform: Any = None, target_transform: Any = None, loader: Any = None,
                 is_valid_file: Any = None, *, extensions: Optional[Sequence[str]] = None, mode: str = "RGB",
                 decode_scaling: bool = False, max_image_pixels: Optional[int] = None) -> None:
        _refuse_callable("ImageFolder", "target_transform", target_transform)
        _refuse_callable("ImageFolder", "loader", loader)
        _refuse_callable("ImageFolder", "is_valid_file", is_valid_file)
        params: Dict[str, Any] = {"root": os.fspath(root), "transform": _steps(transform), "mode": mode,
                                  "decode_scaling": bool(decode_scaling)}
        if extensions is not None:
            params["extensions"] = [e.lower() for e in extensions]
        if max_image_pixels is not None:
            params["max_image_pixels"] = int(max_image_pixels)
        super().__init__(_C._Dataset("image_folder", params))
        self.root = os.fspath(root)
        self.transform = transform
        self.target_transform = None
        self._finish()


class ImageList(_ImageDataset):
    """Images listed in a text file of ``path,label`` lines (paths relative to ``root``
    when given), decoded and transformed in C++ as ImageFolder's."""

    def __init__(self, list_file: str, root: Optional[str] = None, transform: Any = None, *, mode: str = "RGB",
                 decode_scaling: bool = False, max_image_pixels: Optional[int] = None) -> None:
        params: Dict[str, Any] = {"list": os.fspath(list_file), "transform": _steps(transform), "mode": mode,
                                  "decode_scaling": bool(decode_scaling)}
        if root is not None:
            params["root"] = os.fspath(root)
        if max_image_pixels is not None:
            params["max_image_pixels"] = int(max_image_pixels)
        super().__init__(_C._Dataset("image_list", params))
        self.root = root
        self.transform = transform
        self._finish()


class FashionMNIST(CppDataset):
    """Fashion-MNIST from its IDX files (``root`` holds ``train-images-idx3-ubyte[.gz]`` and
    the other three, or torchvision's ``root/FashionMNIST/raw``): samples are
    (float32 [1, 28, 28] in [0, 1], then ``(x - mean) / std`` when given, int label),
    torchvision's ``ToTensor()`` (+ ``Normalize``) bytes."""

    def __init__(self, root: str, train: bool = True, mean: Optional[float] = None,
                 std: Optional[float] = None) -> None:
        root = os.fspath(root)
        raw = os.path.join(root, "FashionMNIST", "raw")
        if os.path.isdir(raw):
            root = raw
        params: Dict[str, Any] = {"root": root, "train": bool(train)}
        if mean is not None or std is not None:
            if mean is None or std is None:
                raise ValueError("FashionMNIST: give both mean and std, or neither")
            params["mean"], params["std"] = float(mean), float(std)
        super().__init__(_C._Dataset("fashion_mnist", params))
        self.root = root
        self.train = train
