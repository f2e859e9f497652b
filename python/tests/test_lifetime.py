"""Batches are torch tensors over the slabs the workers wrote: no copy, and a slab goes back
when its last tensor is freed, on any thread."""
import gc
import random
import threading

import torch
import torch.utils.data as tud

import loader
from conftest import shm_mappings


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_batches_are_views_of_shared_memory_without_copy():
    ds = tud.TensorDataset(torch.randn(64, 1024), torch.arange(64))
    dl = loader.DataLoader(ds, batch_size=16, num_workers=1)
    x, y = next(iter(dl))
    base = x.data_ptr()
    maps = [l for l in shm_mappings()]
    inside = False
    for line in maps:
        lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
        inside |= lo <= base < hi
    assert inside, "the batch tensor does not point into a shared-memory mapping"
    assert torch.equal(x, ds.tensors[0][:16]) and torch.equal(y, torch.arange(16))


def test_a_thousand_batches_kept_then_freed_from_two_threads():
    n = 1000
    ds = tud.TensorDataset(torch.randn(n * 2, 2048), torch.arange(n * 2))  # 16 KB per batch
    gc.collect()
    maps_before, rss_before = len(shm_mappings()), rss_bytes()
    dl = loader.DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
    kept = list(dl)
    assert len(kept) == n
    # every batch still holds what it was given, after the whole epoch
    for i in random.Random(0).sample(range(n), 50):
        assert torch.equal(kept[i][0], ds.tensors[0][2 * i: 2 * i + 2])
        assert kept[i][1].tolist() == [2 * i, 2 * i + 1]
    second = list(dl)  # a second epoch while the first one's batches are alive
    assert torch.equal(second[10][0], kept[10][0])
    del second
    expected = [b[1].clone() for b in kept]
    del dl  # the loader goes; its batches stay valid
    gc.collect()
    assert all(torch.equal(b[1], e) for b, e in zip(kept, expected))

    order = list(range(n))
    random.Random(1).shuffle(order)
    halves = [order[: n // 2], order[n // 2:]]
    slots = kept
    kept = None
    errors = []

    def free(indices):
        try:
            for i in indices:
                slots[i] = None
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=free, args=(h,)) for h in halves]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    del slots
    gc.collect()
    assert len(shm_mappings()) <= maps_before + 1  # the dataset's own shared tensors
    assert rss_bytes() < rss_before + 48 * 2**20


def test_batch_sent_to_another_thread_outlives_everything():
    ds = tud.TensorDataset(torch.arange(100, dtype=torch.float32).reshape(50, 2))
    box = {}

    def consumer(batch, done):
        done.wait()
        gc.collect()
        box["sum"] = float(batch[0].sum())

    done = threading.Event()
    dl = loader.DataLoader(ds, batch_size=50, num_workers=1)
    batch = next(iter(dl))
    t = threading.Thread(target=consumer, args=(batch, done))
    t.start()
    del batch, dl
    done.set()
    t.join()
    assert box["sum"] == float(sum(range(100)))
