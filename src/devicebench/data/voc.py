"""Pascal VOC 2012 segmentation in its real on-disk layout, read from list files of image ids.

The notebook this workload comes from trained on the first 300 ids of `train.txt` and evaluated on the
first 100 of `val.txt`. Those samples are written once, as `devicebench_train300.txt` and
`devicebench_val100.txt` beside VOC's own lists, so a later run (or another machine with the same data)
reads the very same images even if `train.txt` is replaced. Masks are VOC's palette PNGs: the pixel values
are class indices (0 background, 1–20 objects, 255 the void border), so they are resized with nearest
neighbour and never converted to RGB. Anything missing is one line naming the path and the fix; nothing
falls back to synthetic data.

torchvision's `VOCSegmentation` does the download (`download`). It does not do the reading, because
(shown on the tests' VOC layout, torchvision 0.29.1) it reads the same pixels as `load` (all 6 images and
masks equal after the same resize) but:
- `image_set` must be train, trainval or val (`ValueError` for `devicebench_train300`), so neither the
  frozen sample nor a `train_list`/`val_list` file can be read through it, and it needs `train.txt`
  even when both lists are given;
- it builds paths without looking: a missing listed JPEG is a `FileNotFoundError` at its first
  `__getitem__` (mid-epoch, in a DataLoader worker), and a blank line in a list becomes `JPEGImages/.jpg`;
- it leaves each mask file open (6 ResourceWarnings for 6 items read) and reports a missing directory
  as "Dataset not found or corrupted", without the path or the fix.
What remains here is the path convention (`JPEGImages/<id>.jpg`, `SegmentationClass/<id>.png`), which
is what it would have given, and the checks above.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from devicebench.data import IGNORE_INDEX
from devicebench.errors import DataUnavailable

CLASSES = (
    "background",
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "car",
    "cat",
    "chair",
    "cow",
    "diningtable",
    "dog",
    "horse",
    "motorbike",
    "person",
    "pottedplant",
    "sheep",
    "sofa",
    "train",
    "tvmonitor",
)
NUM_CLASSES = len(CLASSES)
BASE_DIR = Path("VOCdevkit") / "VOC2012"
LIST_DIR = Path("ImageSets") / "Segmentation"
DEFAULT_SAMPLES = {"train": 300, "val": 100}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def voc_palette() -> list[int]:
    """VOC's 256-colour palette (class k's colour from the bits of k; 255 → the cream void colour)."""
    palette = []
    for k in range(256):
        r = g = b = 0
        c = k
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def voc_root(data_dir: Path) -> Path:
    return Path(data_dir) / BASE_DIR


def fix_hint(data_dir: Path) -> str:
    return f"download=true (needs network), put VOCdevkit/VOC2012 in {data_dir}, or data=synthetic"


def download(data_dir: Path) -> None:
    """torchvision's VOC 2012 download (~2 GB, md5-checked) into `data_dir`; any failure is one line."""
    # lazy: torchvision, a second import on top of torch's, is needed by a unet run only to download VOC
    from torchvision.datasets.voc import DATASET_YEAR_DICT, VOCSegmentation

    url = DATASET_YEAR_DICT["2012"]["url"]
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        VOCSegmentation(str(data_dir), year="2012", image_set="train", download=True)
    except Exception as e:  # URLError, OSError, md5 RuntimeError: all mean "no usable download"
        reason = " ".join(str(getattr(e, "reason", e)).split()) or type(e).__name__
        raise DataUnavailable(
            f"could not download Pascal VOC 2012 from {url} into {data_dir} ({reason}); "
            f"put VOCdevkit/VOC2012 in {data_dir} by hand, or use data=synthetic"
        ) from None


def ensure_data(data_dir: Path, allow_download: bool) -> Path:
    """The VOC2012 directory, downloaded first when asked and missing; DataUnavailable when absent."""
    root = voc_root(data_dir)
    if not root.is_dir() and allow_download:
        download(data_dir)
    if not root.is_dir():
        raise DataUnavailable(f"Pascal VOC 2012 not found: {root} is missing; use {fix_hint(data_dir)}")
    for sub in ("JPEGImages", "SegmentationClass", str(LIST_DIR)):
        if not (root / sub).is_dir():
            raise DataUnavailable(
                f"Pascal VOC 2012 is incomplete: {root / sub} is missing; use {fix_hint(data_dir)}"
            )
    return root


def read_list(path: Path, data_dir: Path) -> list[str]:
    """Image ids, one a line (VOC's own list format; blank lines skipped)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise DataUnavailable(
            f"cannot read list file {path} ({e.strerror or type(e).__name__}); use {fix_hint(data_dir)}"
        ) from None
    ids = [line.split()[0] for line in text.splitlines() if line.strip()]
    if not ids:
        raise DataUnavailable(f"list file {path} names no images")
    return ids


def default_list(root: Path, split: str, data_dir: Path) -> Path:
    """`devicebench_<split><n>.txt`: the first n ids of VOC's `<split>.txt`, written once and then reused.

    Where the data directory is read-only nothing is written and the caller takes the first n ids of
    `<split>.txt` itself each run: the same sample as long as that list does not change.
    """
    n = DEFAULT_SAMPLES[split]
    sample = root / LIST_DIR / f"devicebench_{split}{n}.txt"
    if sample.is_file():
        return sample
    ids = read_list(root / LIST_DIR / f"{split}.txt", data_dir)[:n]
    try:
        tmp = sample.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text("\n".join(ids) + "\n")
        tmp.replace(sample)  # atomic: two runs starting together both see a whole file
    except OSError:
        return root / LIST_DIR / f"{split}.txt"
    return sample


def resolve_lists(
    data_dir: Path, train_list: str, val_list: str, allow_download: bool
) -> tuple[Path, list[str], list[str]]:
    """(VOC2012 directory, training ids, validation ids): the given list files, else the default sample."""
    root = ensure_data(data_dir, allow_download)
    lists = []
    for split, given in (("train", train_list), ("val", val_list)):
        if given.strip():
            lists.append(read_list(Path(os.path.expanduser(given)), data_dir))
        else:
            path = default_list(root, split, data_dir)
            ids = read_list(path, data_dir)
            lists.append(ids[: DEFAULT_SAMPLES[split]])
    return root, lists[0], lists[1]


def normalize(image: np.ndarray) -> torch.Tensor:
    """H×W×3 uint8 → 3×H×W float, ImageNet mean/std (what pretrained encoders and the notebook used)."""
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (x - mean) / std


def denormalize(x: torch.Tensor) -> np.ndarray:
    """The inverse of `normalize`, for pictures: 3×H×W float → H×W×3 float in [0, 1]."""
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (x.detach().cpu().float() * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()


# A VOC image is ~500×375 pixels. PIL refuses (DecompressionBombError, not an OSError) images over
# twice its MAX_IMAGE_PIXELS, decoding a few-kB file into gigabytes otherwise: a bad file, one line.


def _check_mode(mask: Image.Image, path: Path) -> None:
    if mask.mode != "P":
        raise DataUnavailable(
            f"{path} is a {mask.mode!r} image, not a palette ('P') PNG of class indices; "
            "use VOC's SegmentationClass PNGs as distributed (RGB colour masks are not class indices)"
        )


def check_mask(path: Path) -> None:
    """A mask must be a palette PNG: its pixel values are the class indices (an RGB one would need a
    colour lookup and silently loses the 255 void label), so anything else is an error naming the file."""
    try:
        with Image.open(path) as m:
            _check_mode(m, path)
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
        raise DataUnavailable(f"cannot read {path} ({' '.join(str(e).split())})") from None


class VOCSegmentationSample(torch.utils.data.Dataset):
    """The listed VOC images and masks at `image_size`²: (normalised 3×S×S float, S×S int64 mask, 255 void).

    Files are opened per item (in DataLoader workers), as torchvision's VOCSegmentation does, so the
    decode cost lands in the measured data-wait time, where it belongs.
    """

    classes: ClassVar[list[str]] = list(CLASSES)

    def __init__(self, root: Path, ids: Sequence[str], image_size: int, limit: int = 0) -> None:
        self.root = Path(root)
        self.ids = list(ids[:limit] if limit else ids)
        self.image_size = image_size
        missing = [i for i in self.ids if not (self.root / "JPEGImages" / f"{i}.jpg").is_file()]
        missing += [i for i in self.ids if not (self.root / "SegmentationClass" / f"{i}.png").is_file()]
        if missing:
            i = missing[0]
            path = self.root / "JPEGImages" / f"{i}.jpg"
            if path.is_file():
                path = self.root / "SegmentationClass" / f"{i}.png"
            raise DataUnavailable(
                f"{path} is missing ({len(set(missing))} listed image(s) incomplete); "
                f"use {fix_hint(self.root.parent.parent)}"
            )
        for i in self.ids:  # headers only, cheap: a wrong mask format fails before any training
            check_mask(self.root / "SegmentationClass" / f"{i}.png")

    def __len__(self) -> int:
        return len(self.ids)

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(S×S×3 uint8 image, S×S uint8 mask) for item `index`."""
        i = self.ids[index]
        size = (self.image_size, self.image_size)
        image_path = self.root / "JPEGImages" / f"{i}.jpg"
        mask_path = self.root / "SegmentationClass" / f"{i}.png"
        try:
            with Image.open(image_path) as im:
                image = np.array(im.convert("RGB").resize(size, Image.Resampling.BILINEAR))
        except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
            raise DataUnavailable(f"cannot read {image_path} ({' '.join(str(e).split())})") from None
        try:
            with Image.open(mask_path) as m:
                _check_mode(m, mask_path)
                mask = np.array(m.resize(size, Image.Resampling.NEAREST))
        except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
            raise DataUnavailable(f"cannot read {mask_path} ({' '.join(str(e).split())})") from None
        bad = (mask >= NUM_CLASSES) & (mask != IGNORE_INDEX)
        if bad.any():
            raise DataUnavailable(
                f"{mask_path} has label {int(mask[bad][0])}; VOC masks hold 0–20 and 255 (void) only"
            )
        return image, mask

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.load(index)
        return normalize(image), torch.from_numpy(mask.astype(np.int64))
