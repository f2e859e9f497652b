"""loader.DataLoader: torch.utils.data.DataLoader's signature over loader's C++ runtime.

The class is a subclass of torch's DataLoader: torch's own ``__init__`` checks the
arguments (same errors, same messages, same attributes, the same default samplers), and
``len()`` is torch's.  What differs is where the batches come from: ``iter()`` runs the
C++ pipeline (sampler, worker processes that collate into shared memory, reorder buffer,
pin-memory stage), and each batch arrives as torch tensors that are views of the shared
memory the worker wrote (no copy).
"""
from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import torch
import torch.utils.data as _tud
from torch.utils.data import _utils as _tud_utils

from . import _C
from . import _translate

__all__ = ["DataLoader"]

_DEFAULT_COLLATES = tuple(f for f in (_tud_utils.collate.default_collate, _tud_utils.collate.default_convert,
                                       getattr(_tud, "default_collate", None), getattr(_tud, "default_convert", None))
                          if f is not None)
_WORKER_EXECUTABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader-worker")
_live_loaders: "weakref.WeakSet[DataLoader]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    # Interpreter exit does not always destroy every object: stop the workers explicitly.
    for dl in list(_live_loaders):
        try:
            dl.shutdown()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


class _GeneratorLink:
    """A torch.Generator and the C++ generator that draws for it.

    The C++ side takes torch's state before an epoch starts (``pull``) and gives its own
    back after its draws (``push``), so that a torch generator ends an epoch in the
    state torch's DataLoader leaves it in.
    """

    __slots__ = ("torch_gen", "cpp", "base", "is_default")

    def __init__(self, torch_gen: torch.Generator, is_default: bool) -> None:
        if torch_gen.device.type != "cpu":
            raise ValueError(
                f"loader.DataLoader: generator on {torch_gen.device} is not supported; "
                "samplers draw from a CPU torch.Generator")
        self.torch_gen = torch_gen
        self.is_default = is_default
        self.cpp = _C._Generator(is_default)
        self.base = b""

    def pull(self) -> None:
        self.base = self.torch_gen.get_state().numpy().tobytes()
        self.cpp.load_torch_state(self.base)

    def push(self) -> None:
        state = self.cpp.changed_torch_state(self.base)
        if state is not None:
            self.base = state
            self.torch_gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))


def _map_state(obj: Any, leaf: Any) -> Any:
    """`obj` (dicts, lists, tuples) with `leaf(x)` for every x that leaf does not leave as None."""
    out = leaf(obj)
    if out is not None:
        return out
    if isinstance(obj, dict):
        return {k: _map_state(v, leaf) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_state(v, leaf) for v in obj)
    return obj


def _bytes_to_tensors(obj: Any) -> Any:
    # torch.load(weights_only=True) takes no bytes objects: carry them as uint8 tensors.
    def leaf(x: Any) -> Any:
        if not isinstance(x, bytes):
            return None
        t = torch.frombuffer(bytearray(x), dtype=torch.uint8) if x else torch.empty(0, dtype=torch.uint8)
        return {"__loader_bytes__": t}

    return _map_state(obj, leaf)


def _tensors_to_bytes(obj: Any) -> Any:
    def leaf(x: Any) -> Any:
        if isinstance(x, dict) and len(x) == 1 and "__loader_bytes__" in x:
            t = x["__loader_bytes__"]
            if isinstance(t, torch.Tensor):
                return t.contiguous().numpy().tobytes()
            if isinstance(t, (bytes, bytearray)):
                return bytes(t)
        return None

    return _map_state(obj, leaf)


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class DataLoader(_tud.DataLoader):
    r"""Data loader: torch.utils.data.DataLoader, run by loader's C++ runtime.

    Arguments, defaults and errors are torch 1.13's (see ``torch.utils.data.DataLoader``):

    Args:
        dataset: a dataset loader runs in C++: ``torchvision.datasets.ImageFolder`` /
            ``DatasetFolder`` (torchvision's loader, a ``Compose`` of RandomResizedCrop,
            Resize, CenterCrop, RandomHorizontalFlip, ToTensor, PILToTensor,
            ConvertImageDtype, Normalize; bilinear), ``torchvision.datasets.FashionMNIST``
            (ToTensor, then optionally Normalize), ``torch.utils.data.TensorDataset`` (its
            tensors are put in shared memory once), ``Subset``, ``ConcatDataset`` and
            ``StackDataset`` of these, ``loader.datasets.*`` and
            ``loader.datasets.from_handle(name, params)``.  Any other dataset raises
            TypeError naming it.
        batch_size, shuffle, sampler, batch_sampler, drop_last: as torch's.  torch's own
            samplers (Sequential, Random, SubsetRandom, WeightedRandom, Distributed,
            BatchSampler) run in C++ with torch's order for the same generator; any other
            iterable of indices is drawn in this process, batch by batch.
        num_workers: worker processes, or ``"auto"``: loader starts and retires workers
            (and tunes the prefetch depth) while it runs (``autotune``).
        collate_fn: None (torch's default_collate / default_convert, done in C++ into shared
            memory), or the name (str) of a C++ collate function registered with
            LOADER_REGISTER_COLLATE_FN.  Python functions are refused (TypeError).
        pin_memory, pin_memory_device: batches page-locked for CUDA; with workers the
            shared-memory slabs themselves are registered once, so pinning copies nothing.
        timeout: seconds to wait for a batch (0: while the workers are alive).
        worker_init_fn: None, or the name of a C++ function registered with
            LOADER_REGISTER_WORKER_INIT_FN (ignored with num_workers=0, as torch ignores it).
        multiprocessing_context: what torch accepts ("fork", "spawn", "forkserver" or a
            context); whatever it names, workers start by fork+exec of loader's worker
            program, i.e. with "spawn" semantics.
        generator: a CPU ``torch.Generator``: the shuffle order and the workers' base seed
            are those torch's DataLoader draws from it, and it is left in the same state.
        prefetch_factor, persistent_workers: as torch's.

    loader's own keywords:
        in_order: deliver batches in sampler order (default) or as soon as ready.
        worker_seeding: "per-worker" (torch's) or "per-task" (a batch's random draws
            depend only on the seed and its position: the same for any num_workers).
        max_worker_restarts: a worker that dies is restarted up to this many times and its
            batches re-run, so the epoch yields every batch exactly once, in order.
        remote_workers: ["host:port", ...] of ``loader serve`` hosts, after the local ones.
        remote_token_file: the file holding the secret the worker hosts expect.
        remote_timeout: seconds a remote worker may stay silent before it counts as lost.
        remote_tls: (cert, key, ca) file paths for TLS to the worker hosts.
        shm_limit_bytes: an upper bound for the shared memory of batches in flight.
        autotune: dict for ``num_workers="auto"``: min_workers, max_workers,
            memory_budget_bytes, tune_prefetch, max_prefetch_factor.
        worker_mode: "process" (default) or "in_process" (threads, for debugging).

    Besides torch's interface: ``state_dict()`` / ``load_state_dict()`` (mid-epoch
    checkpoints, plain Python objects for torch.save), ``stats()`` (the epoch figures and
    diagnosis as a dict), ``pin_memory_status()`` and ``shutdown()``.
    """

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1, shuffle: Optional[bool] = None,
                 sampler: Union[_tud.Sampler, Iterable, None] = None,
                 batch_sampler: Union[_tud.Sampler, Iterable, None] = None,
                 num_workers: Union[int, str] = 0, collate_fn: Union[None, str, Any] = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Union[None, str, Any] = None, multiprocessing_context: Any = None,
                 generator: Optional[torch.Generator] = None, *, prefetch_factor: int = 2,
                 persistent_workers: bool = False, pin_memory_device: str = "",
                 in_order: bool = True, worker_seeding: str = "per-worker", max_worker_restarts: int = 0,
                 remote_workers: Optional[Sequence[str]] = None, remote_token_file: Optional[str] = None,
                 remote_timeout: float = 10.0, remote_tls: Optional[Sequence[str]] = None,
                 shm_limit_bytes: int = 0, autotune: Optional[Dict[str, Any]] = None,
                 worker_mode: str = "process") -> None:
        auto = isinstance(num_workers, str)
        if auto and num_workers != "auto":
            raise ValueError(f"num_workers must be an int >= 0 or 'auto', got {num_workers!r}")
        remote = list(remote_workers or [])
        # torch's checks of prefetch_factor / persistent_workers / multiprocessing_context
        # need workers; "auto" and remote-only pools have them.
        torch_workers = 1 if auto or (isinstance(num_workers, int) and num_workers == 0 and remote) else num_workers
        super().__init__(dataset, batch_size, shuffle, sampler, batch_sampler, torch_workers, collate_fn,
                         pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
                         prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
                         pin_memory_device=pin_memory_device)
        self.num_workers = num_workers
        self.in_order = in_order
        self.worker_seeding = worker_seeding
        self.max_worker_restarts = max_worker_restarts
        self.remote_workers = remote
        self.remote_token_file = remote_token_file
        self.remote_timeout = remote_timeout
        self.remote_tls = tuple(remote_tls) if remote_tls else None
        self.shm_limit_bytes = shm_limit_bytes
        self.autotune = dict(autotune) if autotune else None
        self.worker_mode = worker_mode
        uses_workers = auto or num_workers > 0 or bool(remote)

        options: Dict[str, Any] = {
            "num_workers": "auto" if auto else num_workers,
            "pin_memory": bool(pin_memory), "pin_memory_device": pin_memory_device,
            "timeout": float(timeout), "persistent_workers": bool(persistent_workers),
            "in_order": bool(in_order), "worker_seeding": worker_seeding,
            "max_worker_restarts": int(max_worker_restarts), "shm_limit_bytes": int(shm_limit_bytes),
        }
        if uses_workers:
            options["worker_mode"] = worker_mode
            options["worker_executable"] = _WORKER_EXECUTABLE
            options["prefetch_factor"] = int(prefetch_factor)
            ctx = self.multiprocessing_context
            if ctx is not None:
                options["multiprocessing_context"] = ctx.get_start_method() if isinstance(
                    ctx, multiprocessing.context.BaseContext) else str(ctx)
        if remote:
            options["remote_workers"] = remote
            if remote_token_file is not None:
                options["remote_token_file"] = os.fspath(remote_token_file)
            options["remote_timeout_ms"] = int(remote_timeout * 1000)
            if remote_tls:
                if len(remote_tls) != 3:
                    raise ValueError("remote_tls must be (certificate, key, CA) file paths")
                options["remote_tls_cert"], options["remote_tls_key"], options["remote_tls_ca"] = (
                    os.fspath(p) for p in remote_tls)
        if autotune:
            options["autotune"] = dict(autotune)

        # collate_fn / worker_init_fn: torch's defaults, or C++ functions by name.
        if isinstance(self.collate_fn, str):
            options["collate_fn_name"] = self.collate_fn
        elif self.collate_fn not in _DEFAULT_COLLATES:
            raise TypeError(
                f"loader.DataLoader: collate_fn={_callable_name(self.collate_fn)} is a Python function, which "
                "loader does not run yet; leave collate_fn=None (default_collate, done in C++) or pass the "
                "name of a C++ collate function registered with LOADER_REGISTER_COLLATE_FN")
        if isinstance(worker_init_fn, str):
            options["worker_init_fn_name"] = worker_init_fn
        elif worker_init_fn is not None and uses_workers:
            raise TypeError(
                f"loader.DataLoader: worker_init_fn={_callable_name(worker_init_fn)} is a Python function, "
                "which loader's worker processes do not run yet; pass the name of a C++ function registered "
                "with LOADER_REGISTER_WORKER_INIT_FN, or None")

        self._cpp_dataset, self._keep = _translate.to_cpp_dataset(dataset)
        self._links: Dict[int, _GeneratorLink] = {}
        self._epoch_samplers: List[Any] = []  # (torch DistributedSampler, C++ sampler)
        self._default_link = self._link(torch.default_generator)

        cpp_sampler = cpp_batch_sampler = None
        if not self._cpp_dataset.is_iterable():
            if self.batch_sampler is None:  # batch_size=None: no auto-batching
                options["batch_size"] = None
                cpp_sampler = self._cpp_sampler(self.sampler)
            elif batch_sampler is None:  # the BatchSampler torch's __init__ made
                options["batch_size"] = int(self.batch_size)
                options["drop_last"] = bool(self.drop_last)
                cpp_sampler = self._cpp_sampler(self.sampler)
            else:  # the user's batch sampler (the C++ options then keep batch_size's default, 1)
                options["batch_size"] = 1
                cpp_batch_sampler = self._cpp_batch_sampler(self.batch_sampler)
        else:
            options["batch_size"] = self.batch_size
            options["drop_last"] = bool(self.drop_last)
        gen_link = self._link(generator)
        self._cpp = _C._DataLoader(self._cpp_dataset, options, cpp_sampler, cpp_batch_sampler,
                                   gen_link.cpp if gen_link else None)
        # Links other than the default generator are pushed after every batch (a sampler
        # with replacement draws while the epoch runs); the default one only around the
        # epoch's start, so that the training loop's own draws from it are not overwritten.
        self._eager_links = [l for l in self._links.values() if not l.is_default]
        # Without workers the samples' random transforms draw from torch's default
        # generator in this process, between the training loop's own draws: mirror it
        # around every batch, as torch's DataLoader shares it.
        self._sync_default_per_batch = (not uses_workers) and _translate.draws_random(
            self._cpp_dataset.type(), self._cpp_dataset.params())
        _live_loaders.add(self)

    # ------------------------------------------------------------------ translation
    def _link(self, gen: Optional[torch.Generator]) -> Optional[_GeneratorLink]:
        if gen is None:
            return None
        link = self._links.get(id(gen))
        if link is None:
            if not isinstance(gen, torch.Generator):
                raise TypeError(f"generator must be a torch.Generator, got {type(gen).__name__}")
            link = _GeneratorLink(gen, is_default=gen is torch.default_generator)
            self._links[id(gen)] = link
        return link

    def _cpp_gen(self, gen: Optional[torch.Generator]) -> Any:
        link = self._link(gen)
        return None if link is None or link.is_default else link.cpp

    def _cpp_sampler(self, s: Any) -> Any:
        t = type(s)
        if t is _tud.SequentialSampler:
            return _C.sequential_sampler(len(s.data_source))
        if t is _tud.RandomSampler:
            return _C.random_sampler(len(s.data_source), bool(s.replacement), s._num_samples,
                                     self._cpp_gen(s.generator))
        if t is _tud.SubsetRandomSampler:
            return _C.subset_random_sampler(list(s.indices), self._cpp_gen(s.generator))
        if t is _tud.WeightedRandomSampler:
            return _C.weighted_random_sampler(s.weights, int(s.num_samples), bool(s.replacement),
                                              self._cpp_gen(s.generator))
        if t is _tud.distributed.DistributedSampler:
            cpp = _C.distributed_sampler(len(s.dataset), int(s.num_replicas), int(s.rank), bool(s.shuffle),
                                         int(s.seed), bool(s.drop_last))
            self._epoch_samplers.append((s, cpp))
            return cpp
        return _C.python_sampler(s)

    def _cpp_batch_sampler(self, bs: Any) -> Any:
        if type(bs) is _tud.BatchSampler:
            return _C.batch_sampler(self._cpp_sampler(bs.sampler), int(bs.batch_size), bool(bs.drop_last))
        return _C.python_batch_sampler(bs)

    # ------------------------------------------------------------------ iteration
    def _uses_workers(self) -> bool:
        return self.num_workers == "auto" or self.num_workers > 0 or bool(self.remote_workers)

    def __iter__(self) -> "_LoaderIter":
        # torch's rule: with persistent_workers, one iterator for the loader's lifetime.
        if self.persistent_workers and self._uses_workers():
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def _get_iterator(self) -> "_LoaderIter":
        return _LoaderIter(self)

    def _start_epoch(self) -> Any:
        for s, cpp in self._epoch_samplers:
            cpp.set_epoch(int(s.epoch))
        for link in self._links.values():
            link.pull()
        it = self._cpp.iter()
        for link in self._links.values():
            link.push()
        return it

    # ------------------------------------------------------------------ checkpoints, figures
    def state_dict(self) -> Dict[str, Any]:
        """The loader's position: where the current (or last) epoch is, the sampler's and
        generators' states.  Plain Python objects (dicts, lists, ints, str, uint8 tensors):
        ``torch.save`` it and ``torch.load(..., weights_only=True)`` gives it back."""
        return _bytes_to_tensors(self._cpp.state_dict())

    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> None:
        """Makes the next ``iter()`` resume ``state_dict`` (from ``state_dict()``), also into
        another num_workers (with worker_seeding="per-task", byte for byte; strict=False)."""
        self._cpp.load_state_dict(_tensors_to_bytes(state_dict), strict)

    def stats(self) -> Dict[str, Any]:
        """The figures of the epochs so far (batches, stage times, waits, workers, autotune
        decisions) and their diagnosis, as a dict."""
        return json.loads(self._cpp.stats_json())

    def pin_memory_status(self) -> Dict[str, Any]:
        """Whether batches are pinned, by which backend, and why not when they are not."""
        return self._cpp.pin_memory_status()

    def shutdown(self) -> None:
        """Stops the worker processes now (they also stop when the loader is freed)."""
        it = self._iterator
        if it is not None:
            it._close()
        self._cpp.shutdown()

    def __repr__(self) -> str:
        parts = [f"dataset={type(self.dataset).__name__}", f"batch_size={self.batch_size!r}"]
        if self.batch_size is None or self.sampler is not None:
            parts.append(f"sampler={type(self.sampler).__name__}")
        if self.batch_sampler is not None and not isinstance(self.batch_sampler, _tud.BatchSampler):
            parts.append(f"batch_sampler={type(self.batch_sampler).__name__}")
        parts += [f"num_workers={self.num_workers!r}", f"drop_last={self.drop_last!r}",
                  f"pin_memory={self.pin_memory!r}", f"timeout={self.timeout!r}"]
        if self._uses_workers():
            parts += [f"prefetch_factor={self.prefetch_factor!r}",
                      f"persistent_workers={self.persistent_workers!r}"]
        if isinstance(self.collate_fn, str):
            parts.append(f"collate_fn={self.collate_fn!r}")
        if self.generator is not None:
            parts.append(f"generator=Generator(initial_seed={self.generator.initial_seed()})")
        parts += [f"in_order={self.in_order!r}", f"worker_seeding={self.worker_seeding!r}"]
        if self.max_worker_restarts:
            parts.append(f"max_worker_restarts={self.max_worker_restarts!r}")
        if self.remote_workers:
            parts.append(f"remote_workers={self.remote_workers!r}")
        if self.shm_limit_bytes:
            parts.append(f"shm_limit_bytes={self.shm_limit_bytes!r}")
        return f"loader.DataLoader({', '.join(parts)})"


class _LoaderIter:
    """The iterator of a loader.DataLoader epoch (torch's ``_BaseDataLoaderIter`` API:
    ``__next__``, ``__len__``, ``_reset`` for persistent workers)."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._it: Any = None
        self._reset(loader, first_iter=True)

    def __iter__(self) -> "_LoaderIter":
        return self

    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None
        self._num_yielded = 0
        self._first = True
        self._it = loader._start_epoch()

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            raise StopIteration
        loader = self._loader
        per_batch = loader._sync_default_per_batch
        if per_batch:
            loader._default_link.pull()
        try:
            batch = it.next()
        except KeyboardInterrupt:
            self._close()  # Ctrl-C: the workers go now, not when the traceback is freed
            raise
        if per_batch:
            loader._default_link.push()
        if batch is Ellipsis:
            for link in loader._links.values():
                link.push()
            raise StopIteration
        self._num_yielded += 1
        if self._first:
            self._first = False
            for link in loader._links.values():
                link.push()
        else:
            for link in loader._eager_links:
                link.push()
        return batch

    def __len__(self) -> int:
        return len(self._loader)

    def state_dict(self) -> Dict[str, Any]:
        """This epoch's position (the same as the loader's state_dict() while it runs)."""
        if self._it is None:
            raise RuntimeError("this iterator is closed")
        return _bytes_to_tensors(self._it.state_dict())

    def stats(self) -> Dict[str, Any]:
        """This epoch's figures so far."""
        if self._it is None:
            raise RuntimeError("this iterator is closed")
        return json.loads(self._it.stats_json())

    def worker_pids(self) -> List[int]:
        """The process ids of this epoch's worker processes."""
        return [] if self._it is None else list(self._it.worker_pids())

    def _close(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None

    def __getstate__(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")
