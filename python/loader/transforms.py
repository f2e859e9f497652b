"""torchvision's transforms that loader runs in C++, with torchvision's signatures.

Each class is torchvision's own (a subclass): called on a PIL image it does exactly
what torchvision does; inside a dataset that loader runs (loader.datasets.ImageFolder,
or torchvision's ImageFolder given to loader.DataLoader), the same steps run in C++ in
the worker processes, with torchvision's bytes for the same random draws.  torchvision's
own classes are recognised just as well; these add checks at construction for what the
C++ path does not have (interpolation other than bilinear).

    from loader import transforms as T
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
import torchvision.transforms as _T
from torchvision.transforms import InterpolationMode

__all__ = ["Compose", "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "ToTensor",
           "PILToTensor", "ConvertImageDtype", "Normalize", "InterpolationMode", "steps"]


def _bilinear(cls: str, interpolation: Any) -> None:
    from ._translate import is_bilinear

    if not is_bilinear(interpolation):
        raise ValueError(f"loader.transforms.{cls}: interpolation={getattr(interpolation, 'value', interpolation)} "
                         "does not run in C++; only InterpolationMode.BILINEAR does")


class Compose(_T.Compose):
    """torchvision.transforms.Compose(transforms)."""


class RandomResizedCrop(_T.RandomResizedCrop):
    """torchvision.transforms.RandomResizedCrop(size, scale, ratio, interpolation, antialias).
    PIL images are always resized with antialiasing (torchvision 0.14's PIL path), so
    ``antialias`` changes nothing for them."""

    def __init__(self, size: Union[int, Sequence[int]], scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: InterpolationMode = InterpolationMode.BILINEAR,
                 antialias: Optional[bool] = None) -> None:
        _bilinear("RandomResizedCrop", interpolation)
        super().__init__(size, scale=scale, ratio=ratio, interpolation=interpolation, antialias=antialias)


class Resize(_T.Resize):
    """torchvision.transforms.Resize(size, interpolation, max_size, antialias)."""

    def __init__(self, size: Union[int, Sequence[int]], interpolation: InterpolationMode = InterpolationMode.BILINEAR,
                 max_size: Optional[int] = None, antialias: Optional[bool] = None) -> None:
        _bilinear("Resize", interpolation)
        super().__init__(size, interpolation=interpolation, max_size=max_size, antialias=antialias)


class CenterCrop(_T.CenterCrop):
    """torchvision.transforms.CenterCrop(size)."""


class RandomHorizontalFlip(_T.RandomHorizontalFlip):
    """torchvision.transforms.RandomHorizontalFlip(p=0.5)."""


class ToTensor(_T.ToTensor):
    """torchvision.transforms.ToTensor(): float32 CHW in [0, 1]."""


class PILToTensor(_T.PILToTensor):
    """torchvision.transforms.PILToTensor(): uint8 CHW."""


class ConvertImageDtype(_T.ConvertImageDtype):
    """torchvision.transforms.ConvertImageDtype(dtype); the C++ path converts to torch.float32."""

    def __init__(self, dtype: torch.dtype) -> None:
        if dtype != torch.float32:
            raise ValueError(f"loader.transforms.ConvertImageDtype: {dtype} does not run in C++; torch.float32 does")
        super().__init__(dtype)


class Normalize(_T.Normalize):
    """torchvision.transforms.Normalize(mean, std, inplace=False)."""


def steps(transform: Any) -> List[dict]:
    """The C++ steps a transform (a Compose or a single one) runs as: a list of dicts
    ``{"name": ..., arguments}``, as in an ``image_folder`` handle's "transform"."""
    from ._translate import transform_steps

    return transform_steps(transform)
