"""CIFAR-10 data: the real pickle format written by the test, one-line failures, both loaders, synthetic data."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from devicebench.data.cifar import CLASSES, CIFAR10Files, TensorLoader, tutorial_transform
from devicebench.data.loader import LoaderSettings, data_loader
from devicebench.data.synthetic import SyntheticCIFAR10, make_split
from devicebench.errors import DataUnavailable
from devicebench.models.cifar_net import Net

BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


# One torch thread for this module (conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_cifar(root: Path, per_batch: int = 20, test: int = 30, str_keys_in: tuple[str, ...] = ()) -> Path:
    """A tiny CIFAR-10 in the real format: pickled dicts, `data` uint8 N×3072 rows (R, G, B planes of
    1024 pixels), `labels` a list; `batches.meta` with `label_names`. Keys are bytes as a Python 3 writer
    makes them, or str (as the shipped Python 2 pickles read with encoding="latin1") for `str_keys_in`."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for name, n in [*((b, per_batch) for b in BATCHES), ("test_batch", test)]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=n)]
        entry: dict = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": []}
        if name in str_keys_in:
            entry = {k.decode(): v for k, v in entry.items()}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [c.encode() for c in CLASSES],
        b"num_vis": 3072,
    }
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f)
    return folder


def test_reads_the_real_pickle_format(tmp_path: Path) -> None:
    folder = write_cifar(tmp_path, per_batch=20, test=30, str_keys_in=("data_batch_2",))
    train = CIFAR10Files(tmp_path, train=True, verify=False)
    test = CIFAR10Files(tmp_path, train=False, verify=False)
    assert len(train) == 100 and len(test) == 30
    assert train.classes == list(CLASSES)
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    first = raw[b"data"][0]
    # row = 1024 red, 1024 green, 1024 blue values; torchvision keeps images as HWC
    assert np.array_equal(train.data[0][..., 0].reshape(-1), first[:1024])
    assert np.array_equal(train.data[0][..., 2].reshape(-1), first[2048:])
    assert train.targets[:20] == raw[b"labels"]
    limited = CIFAR10Files(tmp_path, train=True, verify=False, limit=7)
    assert len(limited) == 7 and np.array_equal(limited.data, train.data[:7])


def test_verify_reports_the_failed_checksum_in_one_line(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    with pytest.raises(DataUnavailable) as e:
        CIFAR10Files(tmp_path, train=True, verify=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert "data_batch_1" in msg and "checksum" in msg and "download=true" in msg
    assert "verify=false" not in msg  # skipping the check is not the fix for a file that fails it


class _RunsCode:
    """What a hostile pickle carries: unpickling calls `open(marker, "w")`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("where", ["data_batch_1", "batches.meta"])
def test_a_crafted_pickle_runs_no_code_even_without_verify(tmp_path: Path, where: str) -> None:
    folder = write_cifar(tmp_path)
    marker = tmp_path / "pwned"
    with open(folder / where, "wb") as f:
        pickle.dump({b"data": _RunsCode(marker), b"labels": [0]}, f)
    with pytest.raises(DataUnavailable) as e:
        CIFAR10Files(tmp_path, train=True, verify=False)
    assert not marker.exists(), "unpickling the batch ran code"
    msg = str(e.value)
    assert where in msg and "io.open" in msg and "\n" not in msg


@pytest.mark.parametrize("protocol", [2, 5])
def test_every_pickle_protocol_of_numpy_arrays_still_loads(tmp_path: Path, protocol: int) -> None:
    folder = write_cifar(tmp_path, per_batch=3, test=3)
    data = np.arange(3 * 3072, dtype=np.uint8).reshape(3, 3072)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": data, b"labels": np.array([1, 2, 3])}, f, protocol=protocol)
    test = CIFAR10Files(tmp_path, train=False, verify=False)
    assert test.targets == [1, 2, 3] and test.data[0][0, 0, 0] == data[0, 0]


@pytest.mark.parametrize("label", [50, -3, "x", 2.5, None])
def test_a_label_outside_the_ten_classes_is_a_corrupt_file(tmp_path: Path, label: object) -> None:
    folder = write_cifar(tmp_path, per_batch=2)
    with open(folder / "data_batch_4", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, label]}, f)
    with pytest.raises(
        DataUnavailable, match=rf"data_batch_4 is corrupt: label 1 is {label!r}, not a class 0-9"
    ):
        CIFAR10Files(tmp_path, train=True, verify=False)


def test_a_missing_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    folder = write_cifar(tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataUnavailable) as e:
        CIFAR10Files(tmp_path, train=True, verify=False)
    msg = str(e.value)
    assert str(folder / "data_batch_3") in msg and "\n" not in msg
    assert "download=true" in msg and "data=synthetic" in msg
    CIFAR10Files(tmp_path, train=False, verify=False)  # the test split does not need it
    with pytest.raises(DataUnavailable, match="test_batch"):
        CIFAR10Files(tmp_path / "empty", train=False, verify=False)


def test_a_truncated_pickle_is_one_line_naming_the_file(tmp_path: Path) -> None:
    folder = write_cifar(tmp_path)
    blob = (folder / "data_batch_2").read_bytes()
    (folder / "data_batch_2").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataUnavailable) as e:
        CIFAR10Files(tmp_path, train=True, verify=False)
    msg = str(e.value)
    assert "data_batch_2" in msg and "corrupt or truncated" in msg and "\n" not in msg


def test_a_download_without_network_names_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a refused loopback port stands in for "no network": the same URLError path, and instant
    monkeypatch.setattr(CIFAR10Files, "url", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    with pytest.raises(DataUnavailable) as e:
        CIFAR10Files(tmp_path, train=True, download=True)
    msg = str(e.value)
    assert "cannot download CIFAR-10 from 127.0.0.1" in msg and "data=synthetic" in msg and "\n" not in msg


def test_both_loaders_give_the_same_normalised_values() -> None:
    ds = SyntheticCIFAR10(train=False, transform=tutorial_transform(), limit=70)
    cpu = torch.device("cpu")
    reference = list(data_loader(ds, LoaderSettings(32, cpu), shuffle=False))
    ours = list(TensorLoader(ds.data, ds.targets, 32, cpu, shuffle=False))
    assert len(reference) == len(ours) == 3
    for (x1, y1), (x2, y2) in zip(reference, ours, strict=True):
        assert x1.dtype == x2.dtype == torch.float32
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert ours[0][0].min() >= -1 and ours[0][0].max() <= 1


def test_tensor_loader_shuffles_reproducibly_and_covers_every_image() -> None:
    images, labels = make_split(train=True, limit=50)
    cpu = torch.device("cpu")

    def epoch_labels(loader: TensorLoader) -> list[int]:
        return torch.cat([y for _, y in loader]).tolist()

    a = TensorLoader(images, labels, 16, cpu, shuffle=True, seed=3)
    b = TensorLoader(images, labels, 16, cpu, shuffle=True, seed=3)
    first = epoch_labels(a)
    assert first == epoch_labels(b)
    assert sorted(first) == sorted(labels) and first != labels
    assert epoch_labels(a) != first  # a fresh permutation each epoch
    assert len(a) == 4


def test_tensor_loader_on_another_device_normalises_and_shuffles_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The meta device stands in for a GPU: the values must be computed on the CPU and only moved
    (CUDA's div is one ulp off), and the permutation must come from a CPU generator (a CUDA one gives
    another order for the same seed), the very permutation a CPU loader with that seed makes."""
    import devicebench.data.cifar as cifar

    images, labels = make_split(train=True, limit=40)
    normalised_on: list[str] = []
    real_normalize = cifar.normalize_uint8
    monkeypatch.setattr(
        cifar,
        "normalize_uint8",
        lambda x: normalised_on.append(x.device.type) or real_normalize(x),
    )
    perms: list[tuple[str, torch.Tensor]] = []
    real_randperm = torch.randperm

    def spy_randperm(*args: object, **kwargs: object) -> torch.Tensor:
        out = real_randperm(*args, **kwargs)  # type: ignore[call-overload]
        perms.append((out.device.type, out))
        return out

    monkeypatch.setattr(torch, "randperm", spy_randperm)
    meta = TensorLoader(images, labels, 16, torch.device("meta"), shuffle=True, seed=3)
    assert normalised_on == ["cpu"] and meta.images.device.type == "meta"
    batches = [y.shape[0] for _, y in meta]
    assert batches == [16, 16, 8]
    cpu = TensorLoader(images, labels, 16, torch.device("cpu"), shuffle=True, seed=3)
    list(cpu)
    assert [d for d, _ in perms] == ["cpu", "cpu"]
    assert torch.equal(perms[0][1], perms[1][1])


def test_synthetic_is_deterministic_and_prefix_stable() -> None:
    a_img, a_lab = make_split(train=True, limit=1500)
    b_img, b_lab = make_split(train=True, limit=1200)
    assert a_img.shape == (1500, 32, 32, 3) and a_img.dtype == np.uint8
    assert np.array_equal(a_img[:1200], b_img) and a_lab[:1200] == b_lab
    t_img, _ = make_split(train=False, limit=100)
    assert not np.array_equal(t_img, a_img[:100])  # the test split is not the train split
    assert set(a_lab) == set(range(10))


def test_synthetic_is_learnable_in_one_short_epoch() -> None:
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    train_img, train_lab = make_split(train=True, limit=2000)
    test_img, test_lab = make_split(train=False, limit=500)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    for x, y in TensorLoader(train_img, train_lab, 32, cpu, shuffle=True, seed=0):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    with torch.no_grad():
        correct = sum(
            int((net(x).argmax(1) == y).sum())
            for x, y in TensorLoader(test_img, test_lab, 250, cpu, shuffle=False)
        )
    assert correct / 500 > 0.4  # chance is 0.1; seeds 0-3 give 0.70-0.94 here


def test_the_tutorial_transform_is_torchvisions_bit_for_bit() -> None:
    """The pipeline is written out without torchvision (its import loads torch._dynamo); its values
    and dtype must be torchvision's `Compose([ToTensor(), Normalize(...)])` exactly."""
    from PIL import Image
    from torchvision import transforms

    from devicebench.data.cifar import MEAN, STD

    theirs = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    ours = tutorial_transform()
    images, _ = make_split(train=False, limit=40)
    edge = np.array([[[0, 128, 255]] * 32] * 32, dtype=np.uint8)  # the range's ends and middle
    for image in [*images, edge]:
        a, b = ours(Image.fromarray(image)), theirs(Image.fromarray(image))
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape == (3, 32, 32)
        assert torch.equal(a, b)


def test_a_cifar_or_unet_run_never_imports_torchvision() -> None:
    """Any torchvision import runs its `__init__`: the model zoo and torch._dynamo, 1-2 s of a cold run.
    A fresh interpreter builds what a cifar run (both loaders, real files and synthetic, both models
    but resnet18) and a unet run use, and looks."""
    import subprocess
    import sys

    code = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, "tests")
from test_cifar_data import write_cifar
import torch
from devicebench.workloads import cifar, unet, matmul  # noqa: F401
from devicebench.data.cifar import CIFAR10Files, TensorLoader, tutorial_transform
from devicebench.data.loader import LoaderSettings, data_loader
from devicebench.data.synthetic import SyntheticCIFAR10
from devicebench.models.cifar_net import build_model
from devicebench.models.unet import UNet
folder = tempfile.TemporaryDirectory()  # removed as the process exits
root = Path(folder.name)
write_cifar(root, per_batch=4, test=4)
for ds in (CIFAR10Files(root, False, tutorial_transform(), verify=False), SyntheticCIFAR10(False, tutorial_transform(), 8)):
    x, y = next(iter(data_loader(ds, LoaderSettings(4, torch.device("cpu")), shuffle=True)))
    build_model("tutorial")(x).sum().backward()
    next(iter(TensorLoader(ds.data, ds.targets, 4, torch.device("cpu"), shuffle=True)))
UNet(3, 21, base_channels=4)(torch.zeros(1, 3, 32, 32))
print(sorted(m for m in sys.modules if m.split(".")[0] == "torchvision"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
