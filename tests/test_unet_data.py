"""The VOC 2012 reader on a small dataset written here in the real layout, and the synthetic scenes.

`write_voc` writes what the real archive holds: JPEGImages/*.jpg, SegmentationClass/*.png as palette
PNGs in VOC's palette with a 255 void band along each object, ImageSets/Segmentation/{train,val}.txt.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from devicebench.data import IGNORE_INDEX, scenes, voc
from devicebench.errors import DataUnavailable, UsageError
from devicebench.workloads.unet import Config, load_datasets

# VOC's palette as documented by its devkit (VOClabelcolormap): the first classes and the void colour.
KNOWN_COLOURS = {0: (0, 0, 0), 1: (128, 0, 0), 2: (0, 128, 0), 3: (128, 128, 0), 15: (192, 128, 128)}
VOID_COLOUR = (224, 224, 192)


def write_voc(
    data_dir: Path, n_train: int = 6, n_val: int = 4, size: tuple[int, int] = (48, 36), seed: int = 0
) -> Path:
    """A tiny Pascal VOC 2012 in the real layout under `data_dir`; returns the VOC2012 directory."""
    root = data_dir / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w, h = size
    palette = voc.voc_palette()
    ids = {"train": [f"2007_{k:06d}" for k in range(n_train)], "val": [f"2008_{k:06d}" for k in range(n_val)]}
    for split, names in ids.items():
        for k, name in enumerate(names):
            cls = 1 + (k * 7 + (split == "val")) % 20
            mask = np.zeros((h, w), dtype=np.uint8)
            y0, x0 = rng.integers(2, h // 3), rng.integers(2, w // 3)
            y1, x1 = y0 + h // 2, x0 + w // 2
            mask[y0 - 2 : y1 + 2, x0 - 2 : x1 + 2] = IGNORE_INDEX  # the void band VOC draws
            mask[y0:y1, x0:x1] = cls
            colour = np.array(palette[3 * cls : 3 * cls + 3], dtype=np.float64)
            image = np.full((h, w, 3), 110.0) + rng.normal(0, 8, (h, w, 3))
            image[mask == cls] = colour + 20
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), "RGB").save(
                root / "JPEGImages" / f"{name}.jpg", quality=95
            )
            png = Image.new("P", (w, h))
            png.putpalette(palette)
            png.putdata(mask.flatten().tolist())
            png.save(root / "SegmentationClass" / f"{name}.png")
        (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("\n".join(names) + "\n")
    return root


@pytest.fixture
def voc_dir(tmp_path: Path) -> Path:
    write_voc(tmp_path)
    return tmp_path


def test_palette_is_vocs() -> None:
    pal = voc.voc_palette()
    assert len(pal) == 768
    for k, rgb in KNOWN_COLOURS.items():
        assert tuple(pal[3 * k : 3 * k + 3]) == rgb
    assert tuple(pal[3 * 255 :]) == VOID_COLOUR
    assert len(voc.CLASSES) == 21 and voc.CLASSES[15] == "person" and voc.CLASSES[20] == "tvmonitor"


def test_reads_the_real_layout_resized_with_masks_kept_as_indices(voc_dir: Path) -> None:
    train, val = load_datasets(Config(data_dir=str(voc_dir), image_size=32), voc_dir)
    assert (len(train), len(val)) == (6, 4)
    x, y = train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (32, 32) and y.dtype == torch.int64
    values = set(torch.unique(y).tolist())
    assert 0 in values and IGNORE_INDEX in values  # nearest neighbour: no blended labels
    assert values <= {0, 1, IGNORE_INDEX}  # the first training image holds class 1
    assert float(x.min()) > -2.2 and float(x.max()) < 2.7  # ImageNet-normalised
    # the object's pixels have its colour in the image (class 1: (128, 0, 0) + 20): image and mask align
    rgb = voc.denormalize(x)[y.numpy() == 1].mean(axis=0) * 255
    assert np.abs(rgb - (148, 20, 20)).max() < 25
    assert train.ids[0] == "2007_000000"


def test_default_sample_is_written_once_and_then_reused(voc_dir: Path) -> None:
    lists = voc_dir / "VOCdevkit/VOC2012/ImageSets/Segmentation"
    train, val = load_datasets(Config(image_size=32), voc_dir)
    sample = lists / "devicebench_train300.txt"
    assert sample.read_text().split() == [f"2007_{k:06d}" for k in range(6)]
    assert (lists / "devicebench_val100.txt").read_text().split() == val.ids
    (lists / "train.txt").write_text("2007_000005\n2007_000004\n")  # VOC's list changes later...
    again, _ = load_datasets(Config(image_size=32), voc_dir)
    assert again.ids == train.ids  # ...the sample does not


def test_default_sample_takes_the_first_300_and_100(tmp_path: Path) -> None:
    root = write_voc(tmp_path, n_train=1, n_val=1)
    lists = root / "ImageSets/Segmentation"
    (lists / "train.txt").write_text("".join(f"id{k}\n" for k in range(400)))
    (lists / "val.txt").write_text("".join(f"v{k}\n" for k in range(150)))
    _, train_ids, val_ids = voc.resolve_lists(tmp_path, "", "", False)
    assert train_ids == [f"id{k}" for k in range(300)]
    assert val_ids == [f"v{k}" for k in range(100)]


def test_list_files_and_limits(voc_dir: Path, tmp_path: Path) -> None:
    picked = tmp_path / "mine.txt"
    picked.write_text("2007_000003\n\n2007_000001\n")
    cfg = Config(data_dir=str(voc_dir), train_list=str(picked), val_limit=2, image_size=16)
    train, val = load_datasets(cfg, voc_dir)
    assert train.ids == ["2007_000003", "2007_000001"]
    assert val.ids == ["2008_000000", "2008_000001"]


def test_a_non_palette_mask_is_one_line_naming_the_file(voc_dir: Path) -> None:
    bad = voc_dir / "VOCdevkit/VOC2012/SegmentationClass/2007_000002.png"
    Image.open(bad).convert("RGB").save(bad)
    with pytest.raises(DataUnavailable) as e:
        load_datasets(Config(image_size=32), voc_dir)
    msg = str(e.value)
    assert "\n" not in msg and str(bad) in msg and "palette" in msg


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares width×height RGB pixels in a few dozen bytes: what a decompression bomb is."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


def test_a_decompression_bomb_is_one_line_naming_the_file(voc_dir: Path) -> None:
    root = voc_dir / "VOCdevkit" / "VOC2012"
    ids = voc.read_list(root / "ImageSets" / "Segmentation" / "train.txt", voc_dir)
    bomb = root / "JPEGImages" / f"{ids[0]}.jpg"
    bomb.write_bytes(png_header(100_000, 100_000))
    ds = voc.VOCSegmentationSample(root, ids, image_size=32)
    with pytest.raises(DataUnavailable, match=f"cannot read {bomb} .*decompression bomb"):
        ds.load(0)


def test_a_missing_voc_directory_names_the_path_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DataUnavailable) as e:
        load_datasets(Config(), tmp_path)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(tmp_path / "VOCdevkit" / "VOC2012") in msg
    assert "download=true" in msg and "data=synthetic" in msg


def test_a_missing_image_or_split_list_names_the_file(voc_dir: Path) -> None:
    root = voc_dir / "VOCdevkit/VOC2012"
    (root / "ImageSets/Segmentation/val.txt").unlink()
    with pytest.raises(DataUnavailable, match=r"cannot read list file .*Segmentation/val\.txt"):
        load_datasets(Config(), voc_dir)
    (root / "ImageSets/Segmentation/devicebench_val100.txt").write_text("2008_000001\n")
    (root / "JPEGImages/2008_000001.jpg").unlink()
    with pytest.raises(DataUnavailable, match=r"2008_000001\.jpg is missing"):
        load_datasets(Config(), voc_dir)


def test_a_missing_list_file_is_refused_before_any_run(tmp_path: Path) -> None:
    from devicebench.config.fields import build_config

    with pytest.raises(DataUnavailable, match=r"--train_list: list file .*nope\.txt not found"):
        build_config(Config, {"train_list": str(tmp_path / "nope.txt")})
    with pytest.raises(UsageError, match="--val_list: list files apply to data=voc2012 only"):
        build_config(Config, {"data": "synthetic", "val_list": __file__})


def test_a_label_outside_voc_is_refused(voc_dir: Path) -> None:
    path = voc_dir / "VOCdevkit/VOC2012/SegmentationClass/2007_000000.png"
    png = Image.open(path)
    png.putpixel((20, 20), 40)
    png.save(path)
    train, _ = load_datasets(Config(image_size=48), voc_dir)
    with pytest.raises(DataUnavailable, match="has label 40"):
        train[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failed_download_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision's real download code against a port nothing listens on: what no network looks like."""
    from torchvision.datasets.voc import DATASET_YEAR_DICT

    url = f"http://127.0.0.1:{_closed_port()}/VOCtrainval_11-May-2012.tar"
    monkeypatch.setitem(DATASET_YEAR_DICT["2012"], "url", url)
    with pytest.raises(DataUnavailable) as e:
        load_datasets(Config(download=True), tmp_path / "voc")
    msg = str(e.value)
    assert "\n" not in msg and "could not download" in msg and url in msg and "data=synthetic" in msg


# ----------------------------------------------------------------------------------------- synthetic


def test_scenes_are_fixed_by_the_data_seed_not_the_limit() -> None:
    a = scenes.SyntheticScenes("train", 64)
    b = scenes.SyntheticScenes("train", 64, limit=5)
    assert (len(a), len(b), len(scenes.SyntheticScenes("val", 64))) == (300, 5, 100)
    for i in (0, 4):
        assert torch.equal(a[i][0], b[i][0]) and torch.equal(a[i][1], b[i][1])
    assert not torch.equal(a[0][1], a[1][1])
    assert not torch.equal(a[0][0], scenes.SyntheticScenes("val", 64)[0][0])
    with contextlib.suppress(IndexError):
        b[5]
        pytest.fail("index past the limit must raise IndexError")


def test_scenes_have_voc_like_masks() -> None:
    ds = scenes.SyntheticScenes("train", 64, limit=20)
    labels: set[int] = set()
    for i in range(len(ds)):
        image, mask = ds.load(i)
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        values = set(np.unique(mask).tolist())
        assert IGNORE_INDEX in values and 0 in values  # void borders around objects, background
        assert values <= set(range(21)) | {IGNORE_INDEX}
        labels |= values
        void = (mask == IGNORE_INDEX).mean()
        assert 0 < void < 0.3
    assert len(labels - {0, IGNORE_INDEX}) >= 8  # many classes appear


def test_a_class_sets_its_colour() -> None:
    """Pixels of one class look alike across scenes, and unlike another class: learnable by design."""
    means: dict[int, list[np.ndarray]] = {}
    for i in range(40):
        image, mask = scenes.make_scene(i, "train", 64)
        for c in np.unique(mask):
            if c not in (0, IGNORE_INDEX):
                means.setdefault(int(c), []).append(image[mask == c].mean(axis=0))
    spread = max(np.std(v, axis=0).max() for v in means.values() if len(v) > 1)
    centres = np.array([np.mean(v, axis=0) for v in means.values()])
    gaps = [np.abs(a - b).max() for i, a in enumerate(centres) for b in centres[i + 1 :]]
    assert spread < 15 and min(gaps) > 40
