"""A learnable CIFAR-10 look-alike for offline runs and tests: same shape, same classes, fixed seed.

Each class has a fixed smooth colour pattern (a random 4×4×3 grid, upsampled); an image is its class's
pattern at a random contrast and shift plus per-pixel noise. A small network learns it within an epoch,
so a short run shows real learning (accuracy far above 10 %), yet it is not trivially separable by one
pixel. The images are generated in fixed-size chunks with their own seeds, so the first N images are
the same whatever the limit, and every run (any device, any run seed) sees the same data — as with the
real dataset. Runs on it are tagged `devicebench.data=synthetic`; nothing switches to it silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from devicebench.data.cifar import CLASSES, HWCImages

TRAIN_SIZE = 50_000
TEST_SIZE = 10_000
DATA_SEED = 20_240_607
CHUNK = 1000
GRID = 4
NOISE = 40.0
CONTRAST = (50.0, 100.0)
MAX_SHIFT = 3


def class_patterns(seed: int = DATA_SEED) -> np.ndarray:
    """(10, 32, 32, 3) float patterns in [-1, 1]: a coarse random colour grid per class, bilinearly upsampled."""
    rng = np.random.default_rng([seed, 0])
    grids = torch.from_numpy(rng.uniform(-1, 1, size=(len(CLASSES), 3, GRID, GRID)).astype(np.float32))
    up = torch.nn.functional.interpolate(grids, size=(32, 32), mode="bilinear", align_corners=False)
    return up.permute(0, 2, 3, 1).numpy()


def _chunk(index: int, train: bool, patterns: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 1 if train else 2, index])
    labels = rng.integers(0, len(CLASSES), size=CHUNK)
    contrast = rng.uniform(*CONTRAST, size=(CHUNK, 1, 1, 1)).astype(np.float32)
    shifts = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=(CHUNK, 2))
    grid = np.arange(32)
    rows = (grid[None, :] - shifts[:, :1]) % 32  # np.roll of each pattern, for the whole chunk at once
    cols = (grid[None, :] - shifts[:, 1:]) % 32
    images = patterns[labels[:, None, None], rows[:, :, None], cols[:, None, :]] * contrast
    images += 128.0
    images += rng.standard_normal(images.shape, dtype=np.float32) * NOISE
    return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels


def make_split(train: bool, limit: int = 0, seed: int = DATA_SEED) -> tuple[np.ndarray, list[int]]:
    """(N×32×32×3 uint8 images, N labels): the first `limit` (0 = all) of the fixed split."""
    total = TRAIN_SIZE if train else TEST_SIZE
    n = min(limit, total) if limit else total
    patterns = class_patterns(seed)
    parts = [_chunk(k, train, patterns, seed) for k in range((n + CHUNK - 1) // CHUNK)]
    images = np.concatenate([p[0] for p in parts])[:n]
    labels = np.concatenate([p[1] for p in parts])[:n]
    return np.ascontiguousarray(images), [int(v) for v in labels]


class SyntheticCIFAR10(HWCImages):
    """The look-alike with torchvision CIFAR10's attributes (`data` HWC uint8, `targets`, `classes`) and
    its `__getitem__` (a PIL image through `transform`), so both loaders treat it like the real thing."""

    def __init__(
        self, train: bool = True, transform: Callable[[Any], Any] | None = None, limit: int = 0
    ) -> None:
        self.train = train
        self.transform = transform
        self.data, self.targets = make_split(train, limit)
        self.classes = list(CLASSES)
