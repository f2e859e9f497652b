"""loader.DataLoader against torch.utils.data.DataLoader: signature, errors, orders, seeds,
iterators, checkpoints."""
import inspect
import io
import multiprocessing
import pickle

import pytest
import torch
import torch.utils.data as tud

import loader

N = 37


def index_ds(n=N):
    return tud.TensorDataset(torch.arange(n), torch.arange(n, dtype=torch.float64) * 0.5)


def batches_of(dl):
    return [b[0].tolist() if isinstance(b, (list, tuple)) else b.tolist() for b in dl]


# ------------------------------------------------------------------ the signature
def test_signature_is_torchs_then_loaders_own():
    ours = inspect.signature(loader.DataLoader.__init__).parameters
    theirs = inspect.signature(tud.DataLoader.__init__).parameters
    names = list(ours)
    assert names[: len(theirs)] == list(theirs)
    for name, p in theirs.items():
        assert ours[name].default == p.default, name
        assert ours[name].kind == p.kind, name
    for extra in ("in_order", "worker_seeding", "max_worker_restarts", "remote_workers", "remote_token_file"):
        assert ours[extra].kind == inspect.Parameter.KEYWORD_ONLY
    assert issubclass(loader.DataLoader, tud.DataLoader)


def test_version_is_the_cpp_version():
    assert loader.__version__ == loader._C.__version__
    assert loader.__version__.count(".") == 2


def test_help_and_repr():
    doc = loader.DataLoader.__doc__
    assert "num_workers" in doc and "state_dict" in doc
    text = io.StringIO()
    import pydoc
    text.write(pydoc.render_doc(loader.DataLoader, renderer=pydoc.plaintext))
    assert "torch.utils.data.DataLoader" in text.getvalue()
    r = repr(loader.DataLoader(index_ds(), batch_size=4, shuffle=True))
    assert r.startswith("loader.DataLoader(") and "batch_size=4" in r and "RandomSampler" in r


# ------------------------------------------------------------------ errors, as torch's
ds_map = index_ds()
ERRORS = [
    dict(num_workers=-1),
    dict(timeout=-1),
    dict(prefetch_factor=3),
    dict(persistent_workers=True),
    dict(shuffle=True, sampler=tud.SequentialSampler(ds_map)),
    dict(batch_sampler=tud.BatchSampler(tud.SequentialSampler(ds_map), 3, False), batch_size=4),
    dict(batch_sampler=tud.BatchSampler(tud.SequentialSampler(ds_map), 3, False), shuffle=True),
    dict(batch_sampler=tud.BatchSampler(tud.SequentialSampler(ds_map), 3, False), drop_last=True),
    dict(batch_size=None, drop_last=True),
    dict(multiprocessing_context="spawn"),
    dict(num_workers=1, multiprocessing_context="nope"),
    dict(num_workers=1, multiprocessing_context=3),
]


def outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None


@pytest.mark.parametrize("kwargs", ERRORS, ids=[",".join(sorted(k)) for k in ERRORS])
def test_errors_are_torchs(kwargs):
    theirs = outcome(lambda: tud.DataLoader(ds_map, **kwargs))
    ours = outcome(lambda: loader.DataLoader(ds_map, **kwargs))
    assert theirs is not None
    assert ours == theirs


def test_iterable_dataset_errors_are_torchs():
    it_ds = loader.datasets.from_handle("range_iterable", {"end": 10})
    assert isinstance(it_ds, tud.IterableDataset)
    for kw in (dict(shuffle=True), dict(sampler=[1, 2]), dict(batch_sampler=[[1, 2]])):
        theirs = outcome(lambda: tud.DataLoader(it_ds, **kw))
        assert theirs is not None and outcome(lambda: loader.DataLoader(it_ds, **kw)) == theirs
    assert [b.tolist() for b in loader.DataLoader(it_ds, batch_size=4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_attributes_are_guarded_as_torchs():
    dl = loader.DataLoader(ds_map, batch_size=4)
    for attr in ("batch_size", "sampler", "batch_sampler", "drop_last", "dataset", "persistent_workers"):
        with pytest.raises(ValueError, match=f"{attr} attribute should not be set after DataLoader is initialized"):
            setattr(dl, attr, None)


def test_multiprocessing_context_takes_what_torch_takes():
    for ctx in ("fork", "spawn", "forkserver", multiprocessing.get_context("spawn")):
        dl = loader.DataLoader(ds_map, batch_size=8, num_workers=1, multiprocessing_context=ctx)
        assert isinstance(dl.multiprocessing_context, multiprocessing.context.BaseContext)
        assert batches_of(dl) == batches_of(tud.DataLoader(ds_map, batch_size=8))


def test_python_functions_are_refused_with_their_names():
    def my_collate(batch):
        return batch

    with pytest.raises(TypeError, match="collate_fn=.*my_collate"):
        loader.DataLoader(ds_map, collate_fn=my_collate)

    def init(worker_id):
        pass

    with pytest.raises(TypeError, match="worker_init_fn=.*init"):
        loader.DataLoader(ds_map, num_workers=1, worker_init_fn=init)
    loader.DataLoader(ds_map, worker_init_fn=init)  # never called without workers, as in torch


def test_a_python_dataset_is_refused_naming_it():
    class Mine(tud.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match="Mine"):
        loader.DataLoader(Mine())
    with pytest.raises(TypeError, match="Mine"):
        loader.DataLoader(tud.ConcatDataset([index_ds(), Mine()]))


# ------------------------------------------------------------------ orders and seeds
def sampler_cases():
    ds = index_ds()
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    w = torch.rand(N, generator=g(5), dtype=torch.float64) + 0.1
    return {
        "sequential": lambda: dict(batch_size=5),
        "shuffle": lambda: dict(batch_size=5, shuffle=True, generator=g(1)),
        "shuffle_drop_last": lambda: dict(batch_size=5, shuffle=True, drop_last=True, generator=g(2)),
        "random_replacement": lambda: dict(batch_size=4, sampler=tud.RandomSampler(ds, replacement=True, generator=g(3))),
        "random_num_samples": lambda: dict(batch_size=4, sampler=tud.RandomSampler(ds, num_samples=50, replacement=True,
                                                                                 generator=g(4))),
        "random_without_replacement_num_samples": lambda: dict(
            batch_size=4, sampler=tud.RandomSampler(ds, num_samples=60, generator=g(14))),
        "subset_random": lambda: dict(batch_size=3, sampler=tud.SubsetRandomSampler([3, 1, 4, 15, 9, 2, 6], generator=g(6))),
        "weighted": lambda: dict(batch_size=6, sampler=tud.WeightedRandomSampler(w, 30, generator=g(7))),
        "weighted_no_replacement": lambda: dict(batch_size=6, sampler=tud.WeightedRandomSampler(w, 20, replacement=False,
                                                                                               generator=g(8))),
        "batch_sampler": lambda: dict(batch_sampler=tud.BatchSampler(tud.RandomSampler(ds, generator=g(9)), 7, True)),
        "no_batching": lambda: dict(batch_size=None, shuffle=True, generator=g(10)),
        "python_sampler": lambda: dict(batch_size=4, sampler=[5, 3, 1, 30, 2, 2, 8]),
        "python_batch_sampler": lambda: dict(batch_sampler=[[1, 2], [36, 0, 5], [7]]),
        "distributed": lambda: dict(batch_size=4, sampler=tud.distributed.DistributedSampler(
            ds, num_replicas=3, rank=1, shuffle=True, seed=11)),
        "distributed_drop_last": lambda: dict(batch_size=4, sampler=tud.distributed.DistributedSampler(
            ds, num_replicas=4, rank=3, shuffle=False, drop_last=True)),
    }


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", list(sampler_cases()))
def test_order_is_torchs(case, num_workers):
    ds = index_ds()
    ours = loader.DataLoader(ds, num_workers=num_workers, **sampler_cases()[case]())
    theirs = tud.DataLoader(ds, **sampler_cases()[case]())
    assert len(ours) == len(theirs)
    for epoch in range(2):
        for dl in (ours, theirs):
            s = dl.sampler if dl.batch_sampler is None or not hasattr(dl.batch_sampler, "sampler") else dl.batch_sampler.sampler
            if isinstance(s, tud.distributed.DistributedSampler):
                s.set_epoch(epoch)
        a, b = list(ours), list(theirs)
        assert len(a) == len(b) == len(ours)
        for x, y in zip(a, b):
            if isinstance(y, (list, tuple)):
                assert type(x) is type(y) and len(x) == len(y)
                for p, q in zip(x, y):
                    assert p.dtype == q.dtype and torch.equal(p, q)
            else:
                assert torch.equal(x, y)
    if ours.generator is not None:
        assert torch.equal(ours.generator.get_state(), theirs.generator.get_state())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_default_generator_is_drawn_as_torch_draws_it(num_workers):
    ds = index_ds()
    torch.manual_seed(1234)
    a = batches_of(loader.DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers))
    after_ours = torch.random.get_rng_state()
    torch.manual_seed(1234)
    b = batches_of(tud.DataLoader(ds, batch_size=8, shuffle=True))
    after_theirs = torch.random.get_rng_state()
    assert a == b
    assert torch.equal(after_ours, after_theirs)
    # and the training loop's own draws in between are not overwritten
    torch.manual_seed(7)
    out = []
    for batch in loader.DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers):
        out.append(torch.rand(1).item())
    torch.manual_seed(7)
    ref = []
    for batch in tud.DataLoader(ds, batch_size=8, shuffle=True):
        ref.append(torch.rand(1).item())
    assert out == ref


# ------------------------------------------------------------------ iterators
def test_persistent_workers_keep_one_iterator_and_its_workers():
    dl = loader.DataLoader(index_ds(), batch_size=5, num_workers=2, persistent_workers=True)
    it1 = iter(dl)
    pids = it1.worker_pids()
    assert len(pids) == 2
    first = batches_of(it1)
    it2 = iter(dl)
    assert it2 is it1
    assert it2.worker_pids() == pids  # the same processes serve the second epoch
    assert batches_of(it2) == first == batches_of(tud.DataLoader(index_ds(), batch_size=5))
    dl2 = loader.DataLoader(index_ds(), batch_size=5, num_workers=1)
    assert iter(dl2) is not iter(dl2)


def test_len_and_iterator_len():
    dl = loader.DataLoader(index_ds(), batch_size=5, drop_last=True)
    it = iter(dl)
    assert len(dl) == len(it) == N // 5
    with pytest.raises(NotImplementedError):
        pickle.dumps(it)


def test_batches_are_default_collates_structure():
    ds = index_ds(10)
    a = next(iter(loader.DataLoader(ds, batch_size=4)))
    b = next(iter(tud.DataLoader(ds, batch_size=4)))
    assert type(a) is type(b) is list
    assert [t.dtype for t in a] == [t.dtype for t in b]
    single = next(iter(loader.DataLoader(ds, batch_size=None)))
    ref = next(iter(tud.DataLoader(ds, batch_size=None)))
    assert type(single) is type(ref) and [t.tolist() for t in single] == [t.tolist() for t in ref]


def test_num_workers_auto_gives_the_same_batches():
    ds = index_ds()
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    dl = loader.DataLoader(ds, batch_size=4, shuffle=True, num_workers="auto", generator=g1)
    assert dl.num_workers == "auto"
    assert batches_of(dl) == batches_of(tud.DataLoader(ds, batch_size=4, shuffle=True, generator=g2))
    with pytest.raises(ValueError, match="num_workers"):
        loader.DataLoader(ds, num_workers="many")


# ------------------------------------------------------------------ checkpoints and figures
@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_dict_round_trips_through_torch_save(tmp_path, num_workers):
    ds = index_ds(60)

    def make():
        return loader.DataLoader(ds, batch_size=4, shuffle=True, num_workers=num_workers,
                                 generator=torch.Generator().manual_seed(3))

    full = batches_of(make())
    dl = make()
    it = iter(dl)
    head = [next(it)[0].tolist() for _ in range(6)]
    state = dl.state_dict()
    path = tmp_path / "ckpt.pt"
    torch.save({"loader": state}, path)
    del it, dl
    restored = torch.load(path, weights_only=True)["loader"]
    dl2 = make()
    dl2.load_state_dict(restored)
    tail = batches_of(dl2)
    assert head + tail == full


def test_stats_is_a_dict_of_figures():
    dl = loader.DataLoader(index_ds(), batch_size=4, num_workers=1)
    n = len(list(dl))
    s = dl.stats()
    assert isinstance(s, dict)
    assert s["total"]["batches"] == n == len(dl)
    assert isinstance(s["total"]["diagnosis"], str)


def test_the_runtimes_warnings_are_python_warnings():
    ds = index_ds(8)
    with pytest.warns(UserWarning, match="pin memory device is set") as theirs:
        list(tud.DataLoader(ds, batch_size=4, pin_memory_device="cuda"))
    with pytest.warns(UserWarning, match="pin memory device is set") as ours:
        list(loader.DataLoader(ds, batch_size=4, pin_memory_device="cuda"))
    assert str(ours[0].message) == str(theirs[0].message)
