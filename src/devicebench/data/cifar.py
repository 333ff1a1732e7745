"""CIFAR-10 in its real python-pickle format, and the two ways a run feeds it to the model.

`CIFAR10Files` reads what torchvision's `CIFAR10` reads (same files, same checksums, same download, same
`__getitem__`), with the failures made one line that names the file and the fix: torchvision's own
"Dataset not found or corrupted" does not say which of seven files is wrong, and a stack trace from
`pickle` says nothing about the dataset at all. It also reads batches written with bytes keys
(`b"data"`, as `pickle.load(f, encoding="bytes")` shows them and as a Python 3 writer produces them),
and can skip the checksums when asked.

Neither it nor the tutorial's transform imports torchvision: any torchvision import runs its package
`__init__`, which loads the model zoo and through `torchvision.ops` `torch._dynamo` (seconds of every
cold run's start: docs/measured.md) although a cifar run compiles nothing. So the
constants, `__getitem__` and the two transforms are written out here with torchvision's exact tensor
operations (a test holds them equal to torchvision's, bit for bit); only a download imports torchvision.

Two loaders give the model the same normalised values for the same image:

* `dataloader`: the tutorial's pipeline — PIL image → `ToTensor` → `Normalize((0.5,)*3, (0.5,)*3)` in a
  `DataLoader` with worker processes. Per-image Python work is what a small network on a GPU waits for.
* `tensor`: airbench's `CifarLoader` idea — the whole split normalised once and held on the device,
  shuffled each epoch by a seeded `randperm` made on the CPU and moved; a batch is an index slice.
"""

from __future__ import annotations

import hashlib
import pickle
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from PIL import Image

from devicebench.errors import DataUnavailable

CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)
IMAGE_SHAPE = (32, 32, 3)  # HWC, as torchvision's CIFAR10 keeps `data`


class TutorialTransform:
    """The tutorial's `Compose([ToTensor(), Normalize(MEAN, STD)])` on a PIL image, with the tensor
    operations torchvision's `to_tensor` and `normalize` run on an 8-bit image, in their order (copy
    out of PIL, HWC → CHW, `float().div(255)`, clone, `sub_`/`div_` by per-channel tensors, and their
    check that no std is 0): the per-image work the tutorial's pipeline measures, without torchvision."""

    def __call__(self, pic: Image.Image) -> torch.Tensor:
        img = torch.from_numpy(np.array(pic, np.uint8, copy=True))
        img = img.view(pic.size[1], pic.size[0], len(pic.getbands())).permute((2, 0, 1)).contiguous()
        x = img.to(dtype=torch.get_default_dtype()).div(255).clone()
        mean = torch.as_tensor(MEAN, dtype=x.dtype, device=x.device)
        std = torch.as_tensor(STD, dtype=x.dtype, device=x.device)
        if (std == 0).any():
            raise ValueError(f"std evaluated to zero after conversion to {x.dtype}")
        return x.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))


def tutorial_transform() -> Callable[[Any], torch.Tensor]:
    """The tutorial's transform: `ToTensor()` then `Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))`."""
    return TutorialTransform()


def normalize_uint8(images: torch.Tensor) -> torch.Tensor:
    """NCHW uint8 → the tutorial's normalised float32, with the same float operations as
    `ToTensor` (`x.float().div(255)`) and `Normalize` (`sub_(mean).div_(std)`), so values match exactly."""
    x = images.to(torch.float32).div(255)
    mean = torch.tensor(MEAN, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    std = torch.tensor(STD, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return x.sub_(mean).div_(std)


def _fix_hint(root: Path) -> str:
    return (
        f"run with download=true (needs network), put the extracted cifar-10-batches-py in {root}, "
        "or use data=synthetic"
    )


def _str_keys(obj: Any) -> Any:
    """Bytes keys (and bytes label names) as str: CIFAR's Python 2 pickles and Python 3 writers differ."""
    if isinstance(obj, dict):
        return {(k.decode("latin1") if isinstance(k, bytes) else k): _str_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [v.decode("latin1") if isinstance(v, bytes) else v for v in obj]
    return obj


# Every global a CIFAR-10 python batch may name: a NumPy array (the Python 2 originals name
# `numpy.core.multiarray`, NumPy 2 writers `numpy._core`; protocol 5 writes `_frombuffer`) and, in a
# protocol 0-2 pickle written by Python 3, `_codecs.encode` for bytes. Anything else -- `os.system`,
# `builtins.eval`, any class with a `__reduce__` -- is how a crafted pickle runs code, so it is refused
# before it is called, whether or not the checksums were checked (verify=false exists for data a user
# made, not for data a user trusts blindly).
PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle names a global no CIFAR batch needs: refused, never imported or called."""


class _BatchUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only `PICKLE_GLOBALS`: plain containers, bytes, ints and arrays."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in PICKLE_GLOBALS:
            raise ForbiddenGlobal(f"{module}.{name}")
        return super().find_class(module, name)


def read_batch(path: Path) -> dict[str, Any]:
    """One pickled CIFAR batch (or `batches.meta`) as a dict with str keys; a bad file is one line."""
    try:
        with open(path, "rb") as f:
            entry = _BatchUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DataUnavailable(f"CIFAR-10 file {path} is missing; {_fix_hint(path.parent.parent)}") from None
    except PermissionError as e:
        raise DataUnavailable(
            f"CIFAR-10 file {path} cannot be read ({e.strerror}); fix its permissions"
        ) from None
    except ForbiddenGlobal as e:
        raise DataUnavailable(
            f"CIFAR-10 file {path} is not a CIFAR batch: it names {e}, which the format never uses; "
            "refused without loading it -- delete it and run with download=true"
        ) from None
    except Exception as e:  # UnpicklingError, EOFError, ValueError... all mean the same to a user
        raise DataUnavailable(
            f"CIFAR-10 file {path} is corrupt or truncated ({type(e).__name__}: {' '.join(str(e).split())}); "
            "delete it and run with download=true, or copy it again"
        ) from None
    if not isinstance(entry, dict):
        raise DataUnavailable(
            f"CIFAR-10 file {path} is not a CIFAR batch (a {type(entry).__name__}, not a dict)"
        )
    return _str_keys(entry)


def file_md5(path: Path) -> str:
    """torchvision's `calculate_md5`, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


class HWCImages(torch.utils.data.Dataset):
    """torchvision CIFAR10's item: `data[i]` (HWC uint8) as a PIL image through `transform`, and
    `targets[i]`; the real files and the look-alike both serve images this way."""

    data: np.ndarray
    targets: list[int]
    transform: Callable[[Any], Any] | None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img: Any = Image.fromarray(self.data[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, self.targets[index]


class CIFAR10Files(HWCImages):
    """torchvision's CIFAR10 (its files, checksums and `__getitem__`) with one-line failures, optional
    checksums and an optional first-N limit."""

    # torchvision.datasets.CIFAR10's own constants (torchvision 0.29)
    base_folder = "cifar-10-batches-py"
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    filename = "cifar-10-python.tar.gz"
    tgz_md5 = "c58f30108f718f92721af3b95e74349a"
    train_list = (
        ("data_batch_1", "c99cafc152244af753f735de768cd75f"),
        ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
        ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
        ("data_batch_4", "634d18415352ddfa80567beed471001a"),
        ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
    )
    test_list = (("test_batch", "40351d587109b95175f43aff81a1287e"),)
    meta: ClassVar[dict[str, str]] = {
        "filename": "batches.meta",
        "key": "label_names",
        "md5": "5ff9c542aee3614f3951f8cda6e48888",
    }

    def __init__(
        self,
        root: str | Path,
        train: bool = True,
        transform: Callable[[Any], Any] | None = None,
        download: bool = False,
        verify: bool = True,
        limit: int = 0,
    ) -> None:
        self.root = str(root)
        self.transform = transform
        self.train = train
        self.verify = verify
        folder = Path(self.root) / self.base_folder
        files = [name for name, _ in (self.train_list if train else self.test_list)]
        needed = [*files, self.meta["filename"]]
        if download and any(not (folder / f).is_file() for f in needed):
            self._download()
        for name in needed:
            if not (folder / name).is_file():
                raise DataUnavailable(
                    f"CIFAR-10 file {folder / name} is missing; {_fix_hint(Path(self.root))}"
                )
        if verify:
            self._verify(folder, needed)
        data, targets = [], []
        for name in files:
            path = folder / name
            entry = read_batch(path)
            data.append(_batch_images(entry, path))
            labels = entry.get("labels", entry.get("fine_labels"))
            if not isinstance(labels, list | tuple | np.ndarray) or len(labels) != data[-1].shape[0]:
                got = len(labels) if isinstance(labels, list | tuple | np.ndarray) else "no list of"
                raise DataUnavailable(
                    f"CIFAR-10 file {path} is corrupt: {data[-1].shape[0]} images but "
                    f"{got} labels; delete it and run with download=true"
                )
            targets.extend(_labels(labels, path))
        images = np.vstack(data).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))  # HWC, as torchvision
        if limit:
            images, targets = images[:limit], targets[:limit]
        self.data = np.ascontiguousarray(images)
        self.targets = targets
        self._load_meta()

    def _download(self) -> None:
        host = urllib.parse.urlsplit(self.url).hostname
        try:
            self.download()
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise DataUnavailable(
                f"cannot download CIFAR-10 from {host} ({' '.join(str(reason).split())}); without network, "
                f"fetch {self.url} elsewhere and extract it into {self.root}, or use data=synthetic"
            ) from None
        except RuntimeError as e:  # torchvision: "File not found or corrupted." for the archive's md5
            raise DataUnavailable(
                f"CIFAR-10 archive {Path(self.root) / self.filename} from {host} failed its checksum "
                f"({' '.join(str(e).split())}); delete it and run again with download=true"
            ) from None

    def _verify(self, folder: Path, names: list[str]) -> None:
        """torchvision's md5 checks, one file at a time, so the message can say which file failed."""
        expected = {**dict(self.train_list + self.test_list), self.meta["filename"]: self.meta["md5"]}
        for name in names:
            actual = file_md5(folder / name)
            if actual != expected[name]:
                raise DataUnavailable(
                    f"CIFAR-10 file {folder / name} failed its checksum (md5 {actual}, expected "
                    f"{expected[name]}): dataset not found or corrupted; delete it and run with "
                    "download=true to fetch it again"
                )

    def _load_meta(self) -> None:
        path = Path(self.root) / self.base_folder / self.meta["filename"]
        names = read_batch(path).get(self.meta["key"])
        if not names or len(names) != 10:
            raise DataUnavailable(f"CIFAR-10 file {path} has no list of 10 {self.meta['key']}; copy it again")
        self.classes = [str(n) for n in names]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    def download(self) -> None:
        """torchvision's download and extraction of the archive, md5-checked."""
        # lazy: torchvision loads torch._dynamo (module doc); only a download needs its downloader
        from torchvision.datasets.utils import download_and_extract_archive

        download_and_extract_archive(self.url, self.root, filename=self.filename, md5=self.tgz_md5)


def _labels(labels: Any, path: Path) -> list[int]:
    """The batch's labels as ints 0-9; anything else (50, -3, "x") is a corrupt file, not a crash later
    in a loss or a confusion matrix."""
    out = []
    for i, t in enumerate(labels):
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < len(CLASSES):
            raise DataUnavailable(
                f"CIFAR-10 file {path} is corrupt: label {i} is {t!r}, not a class 0-{len(CLASSES) - 1}; "
                "delete it and run with download=true"
            )
        out.append(int(t))
    return out


def _batch_images(entry: dict[str, Any], path: Path) -> np.ndarray:
    data = entry.get("data")
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataUnavailable(
            f"CIFAR-10 file {path} is corrupt: 'data' is {got}, not uint8 N×3072; "
            "delete it and run with download=true"
        )
    return data


# Shuffled images are gathered this many at a time (25 MB of CIFAR images) and batches are views of the
# gathered block: a step then costs no kernel of the loader's own, as in a bare loop over data in memory
# (a gather per step is a visible share of a small step: docs/measured.md).
GATHER_SAMPLES = 2048


def gather_block(batch_size: int) -> int:
    """How many shuffled images are gathered at once for `batch_size`: whole batches, so batch edges stay
    put (benchmarks/bench_overhead's bare loop gathers the same blocks, so both time the same work)."""
    return max(batch_size, GATHER_SAMPLES // batch_size * batch_size)


class TensorLoader:
    """A split held on the device as normalised float32; each epoch is a fresh slice of a `randperm`.

    No worker processes and no per-image Python: a batch is a view of a block gathered once per
    `GATHER_SAMPLES` images. The image
    values equal the tutorial pipeline's (`normalize_uint8`), so the two loaders train the same model.

    Two things are done on the CPU and only then moved, so a GPU run does exactly the CPU run's work:
    the normalisation (CUDA's `div(255)` multiplies by the reciprocal, one ulp off for 111 of the 256
    values) and each epoch's permutation (a CUDA generator gives a different order for the same seed).
    """

    def __init__(
        self,
        images_hwc: np.ndarray,
        targets: list[int] | np.ndarray,
        batch_size: int,
        device: torch.device,
        *,
        shuffle: bool,
        seed: int = 0,
    ) -> None:
        raw = torch.from_numpy(np.ascontiguousarray(images_hwc))  # uint8 on the CPU
        self.images = normalize_uint8(raw.permute(0, 3, 1, 2).contiguous()).to(device)
        del raw
        self.labels = torch.as_tensor(np.asarray(targets), dtype=torch.long).to(device)
        self.batch_size = batch_size
        self.device = device
        self.shuffle = shuffle
        self.generator: torch.Generator | None = None
        if shuffle:
            self.generator = torch.Generator()  # on the CPU whatever the device: same order everywhere
            self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n, step = len(self.labels), self.batch_size
        if not self.shuffle:
            for i in range(0, n, step):
                yield self.images[i : i + step], self.labels[i : i + step]
            return
        order = torch.randperm(n, generator=self.generator).to(self.device)
        chunk = gather_block(step)
        for start in range(0, n, chunk):
            idx = order[start : start + chunk]
            images, labels = self.images.index_select(0, idx), self.labels.index_select(0, idx)
            for i in range(0, len(idx), step):
                yield images[i : i + step], labels[i : i + step]
