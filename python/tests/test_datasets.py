"""The datasets loader runs in C++, against torch's and torchvision's own results."""
import gzip
import os
import shutil

import pytest
import torch
import torch.utils.data as tud
import torchvision
import torchvision.transforms as T

import loader

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_tf(cls=T):
    return cls.Compose([cls.RandomResizedCrop(32), cls.RandomHorizontalFlip(), cls.ToTensor(),
                        cls.Normalize(MEAN, STD)])


def eval_tf(cls=T):
    return cls.Compose([cls.Resize(40), cls.CenterCrop(32), cls.ToTensor(), cls.Normalize(MEAN, STD)])


def assert_same_batches(ours, theirs):
    a, b = list(ours), list(theirs)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert type(x) is type(y)
        assert len(x) == len(y)
        for p, q in zip(x, y):
            assert p.dtype == q.dtype and p.shape == q.shape
            assert torch.equal(p, q), (p - q).abs().max()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("tf", [train_tf, eval_tf], ids=["train", "eval"])
def test_image_folder_batches_are_torchvisions_pixel_for_pixel(image_root, tf, num_workers):
    ds = torchvision.datasets.ImageFolder(image_root, transform=tf())

    def epochs(cls):
        # Without workers the transforms draw from the default generator, and so does the
        # training loop between batches (torch.rand below): both streams must be torch's.
        torch.manual_seed(99)
        dl = cls(ds, batch_size=4, shuffle=True, num_workers=num_workers, generator=torch.Generator().manual_seed(17))
        out = []
        for _ in range(2):
            for batch in dl:
                out.append(batch)
                out.append([torch.rand(3)])
        return out

    assert_same_batches(epochs(loader.DataLoader), epochs(tud.DataLoader))


def test_pil_to_tensor_and_convert_image_dtype(image_root):
    tf = T.Compose([T.Resize((24, 20)), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(image_root, transform=tf)
    assert_same_batches(loader.DataLoader(ds, batch_size=5), tud.DataLoader(ds, batch_size=5))
    tf = T.Compose([T.CenterCrop(30), T.PILToTensor(), T.ConvertImageDtype(torch.float32)])
    ds = torchvision.datasets.ImageFolder(image_root, transform=tf)
    assert_same_batches(loader.DataLoader(ds, batch_size=5), tud.DataLoader(ds, batch_size=5))


def test_dataset_folder_with_torchvisions_loader(image_root):
    ds = torchvision.datasets.DatasetFolder(image_root, loader=torchvision.datasets.folder.default_loader,
                                            extensions=(".jpg",), transform=eval_tf())
    assert_same_batches(loader.DataLoader(ds, batch_size=3, num_workers=1), tud.DataLoader(ds, batch_size=3))


def test_loader_datasets_image_folder_is_torchvisions(image_root):
    ours = loader.datasets.ImageFolder(image_root, transform=eval_tf(loader.transforms))
    theirs = torchvision.datasets.ImageFolder(image_root, transform=eval_tf())
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples and ours.targets == theirs.targets
    assert len(ours) == len(theirs)
    for i in (0, 7, len(ours) - 1):
        a, b = ours[i], theirs[i]
        assert torch.equal(a[0], b[0]) and a[1] == b[1]
    torch.manual_seed(3)
    a = [ours[i][0] for i in range(4)] if False else None  # noqa: F841 - eval: no draws
    assert_same_batches(loader.DataLoader(ours, batch_size=4, num_workers=2), tud.DataLoader(theirs, batch_size=4))


def test_image_list(image_root, tmp_path):
    theirs = torchvision.datasets.ImageFolder(image_root, transform=eval_tf())
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{os.path.relpath(p, image_root)},{t}\n" for p, t in theirs.samples))
    ours = loader.datasets.ImageList(str(lst), root=image_root, transform=eval_tf(loader.transforms))
    assert [t for _, t in ours.samples] == theirs.targets
    assert_same_batches(loader.DataLoader(ours, batch_size=4), tud.DataLoader(theirs, batch_size=4))


def test_loader_transforms_are_torchvisions_and_check_interpolation():
    assert isinstance(loader.transforms.RandomResizedCrop(8), T.RandomResizedCrop)
    with pytest.raises(ValueError, match="bicubic"):
        loader.transforms.Resize(8, interpolation=T.InterpolationMode.BICUBIC)
    assert loader.transforms.steps(train_tf(loader.transforms))[0]["name"] == "RandomResizedCrop"


def test_transforms_loader_cannot_run_are_refused_naming_them(image_root):
    ds = torchvision.datasets.ImageFolder(image_root, transform=T.Compose([T.ColorJitter(0.4), T.ToTensor()]))
    with pytest.raises(TypeError, match="ColorJitter"):
        loader.DataLoader(ds)
    ds = torchvision.datasets.ImageFolder(image_root, transform=T.Compose([
        T.Resize(8, interpolation=T.InterpolationMode.NEAREST), T.ToTensor()]))
    with pytest.raises(TypeError, match="nearest"):
        loader.DataLoader(ds)
    ds = torchvision.datasets.ImageFolder(image_root, transform=T.Compose([T.ToTensor(), T.RandomHorizontalFlip()]))
    with pytest.raises(TypeError, match="RandomHorizontalFlip.*after a tensor conversion"):
        loader.DataLoader(ds)
    ds = torchvision.datasets.ImageFolder(image_root, transform=eval_tf(), target_transform=lambda t: t + 1)
    with pytest.raises(TypeError, match="target_transform"):
        loader.DataLoader(ds)
    ds = torchvision.datasets.ImageFolder(image_root, transform=eval_tf())
    ds.samples = ds.samples[:3]
    with pytest.raises(ValueError, match="Subset"):
        loader.DataLoader(ds)


def test_subset_indices_of_any_sequence(image_root):
    import numpy as np

    ds = torchvision.datasets.ImageFolder(image_root, transform=eval_tf())
    for idx in (np.array([3, 1, 2, 9]), torch.tensor([4, 0, 8]), range(5, 1, -1)):
        sub = tud.Subset(ds, idx)
        assert_same_batches(loader.DataLoader(sub, batch_size=2), tud.DataLoader(sub, batch_size=2))


def test_tensor_dataset_subset_concat_stack():
    a = tud.TensorDataset(torch.randn(30, 16), torch.arange(30))
    b = tud.TensorDataset(torch.randn(12, 16), torch.arange(100, 112))
    sub = tud.Subset(a, [5, 3, 29, 0, 11, 2, 2])
    cat = tud.ConcatDataset([a, sub, b])
    for ds in (a, sub, cat, tud.Subset(cat, list(range(40, 0, -3)))):
        for nw in (0, 2):
            g = torch.Generator().manual_seed(8)
            assert_same_batches(loader.DataLoader(ds, batch_size=6, shuffle=True, num_workers=nw, generator=g),
                                tud.DataLoader(ds, batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(8)))


def test_tensor_dataset_tensors_go_to_shared_memory_once():
    from loader import _translate

    ds = tud.TensorDataset(torch.randn(100, 4), torch.arange(100))
    dl1 = loader.DataLoader(ds, batch_size=10, num_workers=1)
    dl2 = loader.DataLoader(ds, batch_size=10, num_workers=1)
    assert dl1._keep[0] is dl2._keep[0]
    assert dl1._keep[0].nbytes() >= 100 * 4 * 4 + 100 * 8
    assert ds in _translate._shared_tensor_files
    list(dl1), list(dl2)


def test_non_contiguous_and_odd_dtypes():
    x = torch.randn(20, 6).t().contiguous().t()  # column-major
    ds = tud.TensorDataset(x, torch.arange(20, dtype=torch.int16), torch.rand(20) > 0.5,
                           torch.randn(20, 2, dtype=torch.float64))
    assert_same_batches(loader.DataLoader(ds, batch_size=7, num_workers=2), tud.DataLoader(ds, batch_size=7))


@pytest.fixture(scope="module")
def fashion_root(tmp_path_factory):
    src = "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(src):
        pytest.skip("dataset-fashion-mnist is not installed (scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("fmnist")
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        with gzip.open(os.path.join(src, name + ".gz")) as f, open(raw / name, "wb") as out:
            shutil.copyfileobj(f, out)
    return str(root)


@pytest.mark.parametrize("normalize", [False, True])
def test_fashion_mnist_is_torchvisions(fashion_root, normalize):
    tf = T.Compose([T.ToTensor()] + ([T.Normalize((0.2860,), (0.3530,))] if normalize else []))
    ds = torchvision.datasets.FashionMNIST(fashion_root, train=False, transform=tf)
    ours = loader.DataLoader(ds, batch_size=500, num_workers=2)
    theirs = tud.DataLoader(ds, batch_size=500)
    for x, y in zip(ours, theirs):
        assert torch.equal(x[1], y[1])
        if normalize:  # float32 (x - m) / s: the same operations in the same order
            assert torch.allclose(x[0], y[0], rtol=0, atol=1e-6)
        else:
            assert torch.equal(x[0], y[0])
    mine = loader.datasets.FashionMNIST(fashion_root, train=False)
    assert len(mine) == 10000 and torch.equal(mine[3][0], ds[3][0] if not normalize else T.ToTensor()(ds.data[3].numpy()))


# ------------------------------------------------------------------ the user's own C++ dataset
def test_extension_dataset_from_handle_runs_in_workers():
    path = os.environ.get("LOADER_TEST_EXT")
    if not path or not os.path.exists(path):
        pytest.skip("LOADER_TEST_EXT (the test extension, built with the tests) is not set")
    loader.load_library(path)
    assert path in os.environ["LOADER_EXTENSION_LIBRARIES"].split(":")
    ds = loader.datasets.from_handle("test_squares", {"n": 50, "offset": 1})
    assert len(ds) == 50
    sq, vec = ds[7]
    assert int(sq) == 50 and vec.tolist() == [7.0, 7.0, 7.0]
    got = list(loader.DataLoader(ds, batch_size=8, num_workers=2))
    assert torch.cat([b[0] for b in got]).tolist() == [i * i + 1 for i in range(50)]
    with pytest.raises(KeyError, match="no_such_dataset"):
        loader.datasets.from_handle("no_such_dataset", {})
