"""The pictures a training run logs beside its tables, drawn with Pillow.

A confusion matrix and a row of predicted masks are pictures, not charts: Pillow draws them in a few
milliseconds, and a training run no longer imports matplotlib, whose figure stack (its projections,
mplot3d among them) was the largest part of a cold run's fixed cost that a run could shed
(docs/measured.md). Charts with axes (matmul's, infer's, the report's) stay matplotlib's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

# ColorBrewer's nine Blues, the stops matplotlib's "Blues" interpolates between: white is 0, navy 1.
BLUES = (
    (247, 251, 255),
    (222, 235, 247),
    (198, 219, 239),
    (158, 202, 225),
    (107, 174, 214),
    (66, 146, 198),
    (33, 113, 181),
    (8, 81, 156),
    (8, 48, 107),
)
HEAT_PX = 440  # the matrix's side when its classes fit; never under one pixel a cell
MAX_CELL_PX = 44
SCALE_PX = 12  # the colour scale's width
LABEL_MIN_CELL_PX = 12  # class names where a cell is at least this tall; below, they would overlap
COUNTS_MAX_CLASSES = 12  # counts in the cells up to this many classes
PAD = 8
PANEL_PX = 160  # a panel's width in a grid of pictures
NEAREST = Image.Resampling.NEAREST
INK = (0, 0, 0)
PAPER = (255, 255, 255)


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's own font at `size` px (its bitmap font where Pillow was built without FreeType)."""
    return ImageFont.load_default(size=size)


def text_size(text: str, face: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> tuple[int, int]:
    left, top, right, bottom = face.getbbox(text)
    return int(right - left), int(bottom - top)


def draw_text(
    draw: ImageDraw.ImageDraw,
    xy: tuple[float, float],
    text: str,
    face: ImageFont.FreeTypeFont | ImageFont.ImageFont,
    fill: tuple[int, int, int] = INK,
    align: str = "center",
) -> None:
    """`text` centred on `xy` (or, with align="right", ending at x), whichever kind of font."""
    left, top, right, bottom = face.getbbox(text)
    x = xy[0] - right if align == "right" else xy[0] - (left + right) / 2
    draw.text((x, xy[1] - (top + bottom) / 2), text, font=face, fill=fill)


def vertical(text: str, face: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> Image.Image:
    """`text` read from the bottom up, on its own white strip."""
    w, h = text_size(text, face)
    strip = Image.new("RGB", (w + 2, h + 4), PAPER)
    draw_text(ImageDraw.Draw(strip), ((w + 2) / 2, (h + 4) / 2), text, face)
    return strip.rotate(90, expand=True)


def blues(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] as RGB (uint8, a last axis of 3) on the Blues scale."""
    stops = np.asarray(BLUES, dtype=np.float64)
    pos = np.clip(values, 0.0, 1.0) * (len(BLUES) - 1)
    low = np.minimum(pos.astype(np.int64), len(BLUES) - 2)
    frac = (pos - low)[..., None]
    return np.rint(stops[low] * (1 - frac) + stops[low + 1] * frac).astype(np.uint8)


def _scale(height: int, face: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> Image.Image:
    """The colour scale beside a matrix: a bar from 0 (bottom) to 1 (top) of a true class's samples."""
    bar = Image.fromarray(blues(np.linspace(1.0, 0.0, max(height, 2))[:, None].repeat(SCALE_PX, 1)))
    img = Image.new("RGB", (SCALE_PX + PAD // 2 + text_size("100%", face)[0], bar.height), PAPER)
    img.paste(bar, (0, 0))
    draw = ImageDraw.Draw(img)
    draw_text(draw, (img.width, text_size("100%", face)[1] / 2 + 1), "100%", face, align="right")
    draw_text(draw, (img.width, bar.height - text_size("0", face)[1] / 2 - 1), "0%", face, align="right")
    return img


def confusion_image(cm: torch.Tensor, class_names: Sequence[str], title: str) -> Image.Image:
    """A row-normalised confusion matrix (recall per true class): true classes down, predictions across,
    each cell's count written in it where there are at most COUNTS_MAX_CLASSES classes."""
    m = cm.double()
    norm = (m / m.sum(dim=1, keepdim=True).clamp(min=1)).numpy()
    n = len(class_names)
    cell = max(1, min(MAX_CELL_PX, HEAT_PX // n))
    heat = Image.fromarray(blues(norm)).resize((n * cell, n * cell), NEAREST)
    labels = cell >= LABEL_MIN_CELL_PX
    label_face, axis_face, title_face = font(max(1, min(13, cell - 1))), font(13), font(15)
    label_w = max(text_size(c, label_face)[0] for c in class_names) + PAD if labels else 0
    axis_h = text_size("predicted", axis_face)[1] + 2 * PAD
    title_w, title_h = text_size(title, title_face)
    left, top = axis_h + label_w, title_h + 2 * PAD
    scale = _scale(n * cell, label_face if labels else axis_face)
    width = max(left + n * cell + PAD + scale.width + PAD, title_w + 2 * PAD)
    img = Image.new("RGB", (width, top + n * cell + label_w + axis_h), PAPER)
    img.paste(heat, (left, top))
    img.paste(scale, (left + n * cell + PAD, top))
    draw = ImageDraw.Draw(img)
    draw_text(draw, (width / 2, top / 2), title, title_face)
    middle = left + n * cell / 2
    draw_text(draw, (middle, img.height - axis_h / 2), "predicted", axis_face)
    true = vertical("true", axis_face)
    img.paste(true, ((axis_h - true.width) // 2, top + (n * cell - true.height) // 2))
    for i, name in enumerate(class_names if labels else ()):
        centre = i * cell + cell / 2
        draw_text(draw, (left - PAD / 2, top + centre), name, label_face, align="right")
        strip = vertical(name, label_face)
        img.paste(strip, (left + int(centre - strip.width / 2), top + n * cell + PAD // 2))
    if n <= COUNTS_MAX_CLASSES:
        count_face = font(11)
        for i in range(n):
            for j in range(n):
                ink = PAPER if norm[i, j] > 0.5 else INK
                xy = (left + j * cell + cell / 2, top + i * cell + cell / 2)
                draw_text(draw, xy, str(int(m[i, j])), count_face, fill=ink)
    return img


def panel_grid(
    rows: Sequence[Sequence[np.ndarray]], titles: Sequence[str], panel_px: int = PANEL_PX
) -> Image.Image:
    """Rows of H×W×3 pictures (uint8), each scaled to `panel_px` wide without smoothing (a mask's
    classes stay its own colours), under one title per column."""
    face = font(14)
    title_h = text_size("Ag", face)[1] + 2 * PAD
    panels = [
        [
            Image.fromarray(p).resize((panel_px, max(1, round(p.shape[0] * panel_px / p.shape[1]))), NEAREST)
            for p in row
        ]
        for row in rows
    ]
    heights = [max(p.height for p in row) for row in panels]
    columns = len(titles)
    img = Image.new(
        "RGB", (columns * (panel_px + PAD) + PAD, title_h + sum(heights) + PAD * len(rows)), PAPER
    )
    draw = ImageDraw.Draw(img)
    for j, name in enumerate(titles):
        draw_text(draw, (PAD + j * (panel_px + PAD) + panel_px / 2, title_h / 2), name, face)
    y = title_h
    for row, height in zip(panels, heights, strict=True):
        for j, panel in enumerate(row):
            img.paste(panel, (PAD + j * (panel_px + PAD), y))
        y += height + PAD
    return img
