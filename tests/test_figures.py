"""The pictures a training run logs (train/figures.py), drawn with Pillow: their colours, their layout at
a few classes and at a thousand, and a training run that no longer imports matplotlib."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch
from PIL import Image

from devicebench.train import figures

CIFAR = ["plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _find(picture: Image.Image, block: np.ndarray) -> list[tuple[int, int]]:
    """Where `block` (H×W×3) sits in `picture`, pixel for pixel."""
    pic = np.asarray(picture)
    h, w = block.shape[:2]
    ys, xs = np.nonzero((pic == block[0, 0]).all(axis=2))
    return [
        (int(y), int(x))
        for y, x in zip(ys, xs, strict=True)
        if np.array_equal(pic[y : y + h, x : x + w], block)
    ]


def test_the_scale_runs_from_white_to_navy_and_darkens() -> None:
    rgb = figures.blues(np.linspace(0, 1, 101)).astype(int)
    assert tuple(rgb[0]) == figures.BLUES[0] and tuple(rgb[-1]) == figures.BLUES[-1]
    assert (np.diff(rgb.sum(axis=1)) <= 0).all()  # each step as dark or darker
    assert tuple(figures.blues(np.array([-1.0, 2.0]))[1]) == figures.BLUES[-1]  # clipped, not wrapped


def test_each_cell_is_coloured_by_its_share_of_the_true_class() -> None:
    g = torch.Generator().manual_seed(0)
    cm = torch.randint(0, 9, (20, 20), generator=g) + torch.diag(torch.full((20,), 40))
    cm[3] = 0  # a class never seen: its row is white, not a division by zero
    picture = figures.confusion_image(cm, [f"class {i}" for i in range(20)], "20 classes")
    cell = figures.HEAT_PX // 20
    norm = (cm.double() / cm.sum(dim=1, keepdim=True).clamp(min=1)).numpy()
    heat = figures.blues(norm).repeat(cell, axis=0).repeat(cell, axis=1)  # no counts drawn over 12 classes
    assert len(_find(picture, heat)) == 1
    assert tuple(heat[3 * cell, 0]) == figures.BLUES[0]


def test_ten_classes_carry_their_counts_and_names() -> None:
    cm = torch.eye(10, dtype=torch.long) * 100 + 3
    picture = figures.confusion_image(cm, CIFAR, "CIFAR-10 tutorial (synthetic): test confusion")
    cell = figures.MAX_CELL_PX
    pic = np.asarray(picture)
    corner = figures.blues(np.array([[103 / 130]])).repeat(cell // 4, 0).repeat(cell // 4, 1)
    top, left = _find(picture, corner)[0]  # the first in reading order: cell (0, 0)'s top left
    assert top > 0 and left > 0  # the title above, the names to the left
    heat = pic[top : top + 10 * cell, left : left + 10 * cell]
    dark = heat[cell // 2 - 6 : cell // 2 + 6, cell // 2 - 10 : cell // 2 + 10]  # the diagonal's count, white
    assert (dark.min(axis=2) > 200).any()
    names = pic[top + 10 * cell :, left : left + 10 * cell]  # the names under the matrix
    assert (names.max(axis=2) < 100).any()
    assert picture.width < 700 and picture.height < 700


def test_a_thousand_classes_give_a_pixel_a_cell_and_no_names() -> None:
    cm = torch.eye(1000, dtype=torch.long) * 5
    picture = figures.confusion_image(cm, [f"n{i:05d}" for i in range(1000)], "resnet18 (synthetic)")
    navy = np.asarray(figures.BLUES[-1], dtype=np.uint8)
    diagonal = _find(picture, np.broadcast_to(navy, (1, 1, 3)))
    assert len(diagonal) >= 1000
    assert 1000 < picture.width < 1200 and 1000 < picture.height < 1200  # no 1000 names overlapping


def test_a_panel_grid_scales_masks_without_smoothing() -> None:
    mask = np.zeros((2, 2, 3), dtype=np.uint8)
    mask[0, 1] = (128, 0, 0)
    mask[1, 0] = (0, 128, 0)
    picture = figures.panel_grid([[mask, mask], [mask, mask]], ("truth", "prediction"), panel_px=40)
    colours = {tuple(c) for c in np.asarray(picture).reshape(-1, 3).tolist()}
    assert {(0, 0, 0), (128, 0, 0), (0, 128, 0)} <= colours
    block = np.asarray(Image.fromarray(mask).resize((40, 40), figures.NEAREST))
    assert len(_find(picture, block)) == 4
    assert picture.size == (2 * (40 + figures.PAD) + figures.PAD, picture.height)


def test_a_training_run_does_not_import_matplotlib() -> None:
    code = (
        "import sys, importlib\n"
        "for name in ('run.workload', 'workloads.cifar', 'workloads.unet', 'workloads.model'):\n"
        "    importlib.import_module('devicebench.' + name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
