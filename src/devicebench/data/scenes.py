"""Learnable segmentation scenes: a VOC look-alike for offline runs and tests, fixed by a data seed.

Each scene is a textured background (class 0) with one to four shapes (ellipses, rectangles, triangles)
drawn on it, later ones occluding earlier ones. A shape's class (1–20) fixes its colour and its texture
(stripes of a class-specific angle and period), so a network must look at a neighbourhood, not one
pixel, to be sure, and a small UNet learns it within a few hundred images. As in VOC, a band of void
pixels (255) runs along every object boundary and is ignored by the loss and the metrics.

Scene k of a split is drawn from its own generator (data seed, split, k), so the first N scenes are
the same whatever the limit, on every device and for every run seed. Runs on it are tagged
`devicebench.data=synthetic`; nothing switches to it silently.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from devicebench.data import IGNORE_INDEX
from devicebench.data.voc import CLASSES, NUM_CLASSES, normalize

DATA_SEED = 20_240_611
DEFAULT_SIZES = {"train": 300, "val": 100}
NOISE = 12.0


def class_styles(seed: int = DATA_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class: an RGB colour (0–255), a stripe angle (radians) and a stripe period (fraction of side).

    Colours are spread over the RGB cube so that neighbouring classes differ in at least one channel by
    a visible amount; the background is a dim grey-green so objects stand out from it.
    """
    rng = np.random.default_rng([seed, 0])
    levels = np.array([40.0, 120.0, 200.0])
    cube = np.array([(r, g, b) for r in levels for g in levels for b in levels])  # 27 distinct colours
    picks = rng.permutation(len(cube))[: NUM_CLASSES - 1]
    colours = np.vstack([[90.0, 100.0, 80.0], cube[picks]])
    angles = rng.uniform(0, np.pi, size=NUM_CLASSES)
    periods = rng.uniform(0.04, 0.12, size=NUM_CLASSES)
    return colours, angles, periods


def _shape_mask(rng: np.random.Generator, yy: np.ndarray, xx: np.ndarray, size: int) -> np.ndarray:
    """A random ellipse, rectangle or triangle covering roughly 3–25 % of the image."""
    kind = int(rng.integers(0, 3))
    cy, cx = rng.uniform(0.15, 0.85, size=2) * size
    ry, rx = rng.uniform(0.1, 0.28, size=2) * size
    if kind == 0:
        return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
    if kind == 1:
        return (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
    # triangle: three corners around the centre; inside = on the inner side of all three edges
    angles = rng.uniform(0, 2 * np.pi) + np.array([0.0, 2.1, 4.2])
    py, px = cy + ry * 1.3 * np.sin(angles), cx + rx * 1.3 * np.cos(angles)
    turn = np.sign((px[1] - px[0]) * (py[2] - py[0]) - (py[1] - py[0]) * (px[2] - px[0]))
    inside = np.ones_like(yy, dtype=bool)
    for a in range(3):
        b = (a + 1) % 3
        inside &= ((px[b] - px[a]) * (yy - py[a]) - (py[b] - py[a]) * (xx - px[a])) * turn >= 0
    return inside


def void_border(labels: np.ndarray, width: int) -> np.ndarray:
    """Pixels within `width` of a pixel of another label: VOC's void band along object outlines."""
    h, w = labels.shape
    padded = np.pad(labels, width, mode="edge")
    border = np.zeros_like(labels, dtype=bool)
    for dy in range(-width, width + 1):
        for dx in range(-width, width + 1):
            if dy or dx:
                border |= padded[width + dy : width + dy + h, width + dx : width + dx + w] != labels
    return border


def make_scene(index: int, split: str, size: int, seed: int = DATA_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Scene `index` of `split` at `size`²: (H×W×3 uint8 image, H×W uint8 mask with 255 borders)."""
    rng = np.random.default_rng([seed, 1 if split == "train" else 2, index])
    colours, angles, periods = class_styles(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    labels = np.zeros((size, size), dtype=np.uint8)
    for _ in range(int(rng.integers(1, 5))):
        labels[_shape_mask(rng, yy, xx, size)] = int(rng.integers(1, NUM_CLASSES))
    # Colour and texture come from each pixel's class: stripes at the class's angle and period.
    phase = rng.uniform(0, 2 * np.pi)
    along = (xx * np.cos(angles[labels]) + yy * np.sin(angles[labels])) / (periods[labels] * size)
    stripes = np.sin(2 * np.pi * along + phase)[..., None]
    image = colours[labels] * (1.0 + 0.25 * stripes) + rng.normal(0.0, NOISE, size=(size, size, 3))
    mask = labels.copy()
    mask[void_border(labels, max(1, size // 64))] = IGNORE_INDEX
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), mask


class SyntheticScenes(torch.utils.data.Dataset):
    """`n` scenes of a split, drawn per item (in DataLoader workers, like JPEG decoding for VOC), with
    VOCSegmentationSample's interface: (normalised 3×S×S float, S×S int64 mask)."""

    classes: ClassVar[list[str]] = list(CLASSES)

    def __init__(self, split: str, image_size: int, limit: int = 0, seed: int = DATA_SEED) -> None:
        if split not in DEFAULT_SIZES:
            raise ValueError(f"split must be train or val, not {split!r}")
        self.split, self.image_size, self.seed = split, image_size, seed
        self.n = limit or DEFAULT_SIZES[split]  # more than the default is fine: scenes are unbounded

    def __len__(self) -> int:
        return self.n

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < self.n:
            raise IndexError(index)
        return make_scene(index, self.split, self.image_size, self.seed)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.load(index)
        return normalize(image), torch.from_numpy(mask.astype(np.int64))
