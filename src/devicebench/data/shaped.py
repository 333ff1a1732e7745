"""Data of any shape for the `model` workload: synthetic images held on the device, or a folder of images
in torchvision's `ImageFolder` layout read through a real DataLoader.

Synthetic data answers "how fast does this model train here" with no loader in the way: a pool of
`POOL` distinct seeded images (and labels, or masks for a segmentation model) on the device, repeated to
the split's length and shuffled per epoch with a CPU generator, so every device sees the same batches in
the same order. The folder answers the other question, whether the loader keeps up: decoding and
resizing JPEGs in worker processes is what starves a fast GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from devicebench.errors import DataUnavailable

POOL = 64  # distinct synthetic samples per split: enough that no batch is one image repeated
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 512, 128  # a split's length where its limit is 0
TRAIN_SEED, TEST_SEED = 1, 2


class SyntheticSplit:
    """`n` samples of `shape` on `device`: `POOL` distinct ones, sample i is pool entry i % POOL."""

    def __init__(
        self, n: int, shape: tuple[int, int, int], num_classes: int, *, segmentation: bool, train: bool
    ) -> None:
        g = torch.Generator().manual_seed(TRAIN_SEED if train else TEST_SEED)
        pool = min(n, POOL)
        self.images = torch.randn((pool, *shape), generator=g)
        target_shape = (pool, *shape[1:]) if segmentation else (pool,)
        self.targets = torch.randint(0, num_classes, target_shape, generator=g)
        self.n = n
        self.classes = [f"class_{i}" for i in range(num_classes)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index % len(self.images)], self.targets[index % len(self.images)]


class PoolLoader:
    """Batches of a `SyntheticSplit` gathered on the device: one `index_select` per batch, no workers."""

    def __init__(
        self,
        split: SyntheticSplit,
        batch_size: int,
        device: torch.device,
        *,
        shuffle: bool,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.images, self.targets = split.images.to(device), split.targets.to(device)
        self.n, self.batch_size, self.device, self.shuffle = len(split), batch_size, device, shuffle
        self.generator = torch.Generator().manual_seed(seed) if shuffle else None
        self.drop_last = drop_last  # as a DataLoader's: a shorter last batch is left out

    def __len__(self) -> int:
        return (
            self.n // self.batch_size if self.drop_last else (self.n + self.batch_size - 1) // self.batch_size
        )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(self.n, generator=self.generator) if self.shuffle else torch.arange(self.n)
        pool = (order % len(self.images)).to(self.device)
        for i in range(0, len(self) * self.batch_size, self.batch_size):
            idx = pool[i : i + self.batch_size]
            yield self.images.index_select(0, idx), self.targets.index_select(0, idx)


def synthetic_splits(
    shape: tuple[int, int, int],
    num_classes: int,
    train_limit: int,
    test_limit: int,
    *,
    segmentation: bool,
) -> tuple[SyntheticSplit, SyntheticSplit]:
    train = SyntheticSplit(
        train_limit or SYNTHETIC_TRAIN, shape, num_classes, segmentation=segmentation, train=True
    )
    test = SyntheticSplit(
        test_limit or SYNTHETIC_TEST, shape, num_classes, segmentation=segmentation, train=False
    )
    return train, test


def folder_transform(shape: tuple[int, int, int]) -> Any:
    """Decode, resize to H×W, to C channels, normalise: ImageNet's mean and spread for 3 channels."""
    from torchvision import transforms  # lazy: only a folder of images needs it

    c, h, w = shape
    steps: list[Any] = [transforms.Resize((h, w))]
    if c == 1:
        steps.append(transforms.Grayscale(1))
    steps.append(transforms.ToTensor())
    if c == 3:
        steps.append(transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
    elif c == 1:
        steps.append(transforms.Normalize((0.5,), (0.5,)))
    return transforms.Compose(steps)


def image_folders(
    root: Path, shape: tuple[int, int, int], train_limit: int, test_limit: int
) -> tuple[Any, Any]:
    """(train, val) from `root/train` and `root/val`, each a folder per class (the same classes in
    both); the first `limit` images of each (0 = all), in ImageFolder's sorted order."""
    if shape[0] not in (1, 3):
        raise DataUnavailable(
            f"a folder of images gives 1 or 3 channels, not {shape[0]}; use input 3xHxW or 1xHxW",
            param="input",
        )
    from devicebench.data.image_folder import WalkedImageFolder  # lazy: torchvision, see folder_transform

    splits = []
    for name, limit in (("train", train_limit), ("val", test_limit)):
        folder = root / name
        if not folder.is_dir():
            raise DataUnavailable(
                f"{folder} not found; data=imagefolder needs {root}/train and {root}/val, each with one "
                "subfolder of images per class",
                param="data_dir",
            )
        try:
            ds = WalkedImageFolder(os.fspath(folder), transform=folder_transform(shape))
        except (FileNotFoundError, OSError) as e:  # no class folders, or no image in them
            raise DataUnavailable(f"{folder}: {' '.join(str(e).split())}", param="data_dir") from None
        if limit and limit < len(ds.samples):
            ds.samples = ds.imgs = ds.samples[:limit]
            ds.targets = ds.targets[:limit]
        splits.append(ds)
    train, val = splits
    if train.classes != val.classes:
        raise DataUnavailable(
            f"{root}/train and {root}/val hold different classes ({len(train.classes)} and {len(val.classes)}); "
            "give both the same class folders",
            param="data_dir",
        )
    return train, val
