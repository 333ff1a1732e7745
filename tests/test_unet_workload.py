"""The unet workload end to end in memory (MemoryTracker): what it logs, that it learns, and that bad
input is one line before any work. Real MLflow runs are in test_unet_mlflow.py."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_unet_data import write_voc

from devicebench.config.fields import build_config, field_names
from devicebench.data.voc import CLASSES, voc_palette
from devicebench.errors import DataUnavailable, UsageError
from devicebench.host.context import Context
from devicebench.tracking.artifacts import portable_model
from devicebench.tracking.protocol import MemoryTracker
from devicebench.train import figures, loop, seeding, step
from devicebench.workloads.unet import (
    NUM_CLASSES,
    Config,
    build_unet,
    load_datasets,
    make_loaders,
    run,
    segmentation_loss,
)
from servers import devicebench_env, run_cli

CPU = torch.device("cpu")
TINY = {"data": "synthetic", "base_channels": 4, "image_size": 32, "num_workers": 0}


# One torch thread for this module (conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(cfg: Config, tmp_path: Path, tracker: MemoryTracker | None = None) -> tuple:
    tracker = tracker or MemoryTracker()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        result = run(cfg, Context(CPU, tmp_path, False), tracker)
    return result, tracker, out.getvalue()


def test_config_matches_the_mlproject_entry_point(repo_root: Path) -> None:
    import yaml

    entry = yaml.safe_load((repo_root / "MLproject").read_text())["entry_points"]["unet"]["parameters"]
    assert field_names(Config) == list(entry)  # in the order a user sees them (config_fields)
    # each default spelled as the CLI logs it, so `mlflow run` and the CLI log the same params
    from devicebench.config.fields import to_params

    assert {k: str(v["default"]) for k, v in entry.items()} == to_params(Config())


def test_a_run_logs_the_schema(tmp_path: Path) -> None:
    cfg = Config(**TINY, epochs=2, batch_size=4, train_limit=16, val_limit=6, log_every=2)
    result, tr, out = _run(cfg, tmp_path)
    names = {k for k, _, _ in tr.metrics}
    for key in (
        "train/loss",
        "train/epoch_loss",
        "time/epoch_s",
        "time/warmup_s",
        "time/train_s",
        "time/data_wait_s",
        "time/eval_s",
        "throughput/train_samples_per_s",
        "throughput/eval_samples_per_s",
        "eval/loss",
        "eval/miou",
        "eval/dice",
        "eval/pixel_accuracy",
        "memory/peak_rss_bytes",
    ):
        assert key in names, key
    assert "memory/peak_bytes" not in names  # no device memory figure on the CPU (it repeated the RSS)
    steps = {k: [s for n, _, s in tr.metrics if n == k] for k in ("train/loss", "time/epoch_s", "eval/miou")}
    assert steps["train/loss"] == [2, 4, 6, 8]  # 4 steps an epoch, a mean every 2 steps, steps continue
    assert steps["time/epoch_s"] == [1, 2] and steps["eval/miou"] == [2]
    iou_keys = {n for n in names if n.startswith("eval/iou/")}
    assert iou_keys and iou_keys <= {f"eval/iou/{c}" for c in CLASSES}
    # classes with no IoU are left out, not logged as 0 or 1
    assert {f"eval/iou/{c}" for c, v in result.iou.items() if not math.isnan(v)} == iou_keys
    assert all(0.0 <= v <= 1.0 for k, v, _ in tr.metrics if k.startswith("eval/") and k != "eval/loss")
    assert tr.values("throughput/train_samples_per_s")[0] == pytest.approx(32 / result.train_s)
    assert tr.tags["devicebench.init_weights"] == seeding.weights_fingerprint(build_unet(cfg))

    assert set(tr.artifacts) >= {"per_class.json", "timings.json", "confusion_matrix.png", "predictions.png"}
    assert tr.tables == {"per_class.json", "confusion_matrix.json"}
    table = json.loads(json.dumps(tr.artifacts["per_class.json"], allow_nan=False))  # valid JSON: no NaN
    assert list(table) == ["class", "iou", "dice", "accuracy", "truth_pixels", "predicted_pixels"]
    assert table["class"] == list(CLASSES)
    assert [v for v in table["iou"] if v is not None] == [
        pytest.approx(v) for v in result.iou.values() if v == v
    ]
    confusion = tr.artifacts["confusion_matrix.json"]
    assert confusion["true class"] == list(CLASSES)
    pixels = sum(sum(confusion[c]) for c in CLASSES)
    assert sum(table["truth_pixels"]) == sum(table["predicted_pixels"]) == pixels > 0
    pic = tr.artifacts["predictions.png"]  # 4 images × (image, truth, prediction), masks in VOC colours
    assert pic.mode == "RGB" and pic.width == 3 * (figures.PANEL_PX + figures.PAD) + figures.PAD
    palette = {tuple(c) for c in np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3).tolist()}
    for column in (1, 2):  # below the titles: mask pixels, never smoothed into colours between classes
        x = figures.PAD + column * (figures.PANEL_PX + figures.PAD)
        masks = np.asarray(pic)[pic.height // 4 :, x : x + figures.PANEL_PX].reshape(-1, 3)
        colours = {tuple(c) for c in masks.tolist()} - {figures.PAPER}
        assert len(colours) >= 2 and colours <= palette
    assert tr.artifacts["timings.json"]["eval"]["samples"] == 6
    assert "Training time on cpu" in out and "Evaluation time on cpu" in out and "mIoU" in out

    assert list(tr.models) == ["unet"]  # named for what it is, with its quality metrics linked
    linked = tr.model_metrics["unet"]
    assert linked["eval/miou"] == pytest.approx(result.miou) and linked["eval/loss"] == result.eval_loss
    assert {"eval/dice", "eval/pixel_accuracy"} <= set(linked)
    model, example = tr.models["unet"]
    assert example.shape == (2, 3, 32, 32)
    logged, _, signature = portable_model(model, example)  # what MlflowTracker logs
    assert signature.inputs.to_dict()[0]["tensor-spec"]["shape"] in ([-1, 3, 32, 32], (-1, 3, 32, 32))
    for n in (1, 3):
        with torch.no_grad():
            masks = logged(torch.randn(n, 3, 32, 32)).argmax(dim=1)
        assert masks.shape == (n, 32, 32) and int(masks.max()) < NUM_CLASSES


def test_synthetic_scenes_are_learnable(tmp_path: Path) -> None:
    """A short run lifts mIoU far above what the same initial weights score (bound with ~2× margin)."""
    cfg = Config(
        **{**TINY, "base_channels": 16},
        lr=0.01,
        epochs=4,
        batch_size=8,
        train_limit=128,
        val_limit=32,
    )
    _, val = load_datasets(cfg, tmp_path)
    _, val_loader = make_loaders(cfg, val, val, CPU)
    before = loop.evaluate(
        build_unet(cfg), val_loader, segmentation_loss, step.StepSettings(CPU), NUM_CLASSES
    )
    from devicebench.train.metrics import iou_per_class, nanmean

    miou_before = nanmean(iou_per_class(before.confusion))
    result, _, _ = _run(cfg, tmp_path)
    assert result.epoch_losses[-1] < 0.6 * result.epoch_losses[0]
    assert result.pixel_accuracy > 0.85
    assert result.miou > max(0.15, 3 * miou_before), (miou_before, result.miou)


def test_same_seed_same_start_and_order_validation_never_shuffled(tmp_path: Path) -> None:
    cfg = Config(**TINY, batch_size=4, train_limit=12, val_limit=8)
    train, val = load_datasets(cfg, tmp_path)

    def first_batches(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        tl, vl = make_loaders(Config(**TINY, batch_size=4, seed=seed), train, val, CPU)
        return next(iter(tl))[1], torch.cat([y for _, y in vl])

    t0, v0 = first_batches(0)
    t0b, v0b = first_batches(0)
    t1, v1 = first_batches(1)
    assert torch.equal(t0, t0b) and not torch.equal(t0, t1)
    expected = torch.stack([val[i][1] for i in range(len(val))])
    assert torch.equal(v0, expected) and torch.equal(v0b, expected) and torch.equal(v1, expected)


def test_a_run_on_voc_files_with_worker_processes(tmp_path: Path) -> None:
    write_voc(tmp_path, n_train=8, n_val=4)
    cfg = Config(image_size=32, base_channels=4, batch_size=4, num_workers=2, data_dir=str(tmp_path))
    result, tr, out = _run(cfg, tmp_path / "elsewhere")  # data_dir wins over the context's data root
    assert "8 train / 4 val images of 32² (voc2012)" in out
    assert not math.isnan(result.miou) and result.iou["background"] >= 0
    assert tr.values("time/data_wait_s")[0] > 0


def test_a_bad_mask_met_in_a_worker_is_still_one_line(tmp_path: Path) -> None:
    from PIL import Image

    root = write_voc(tmp_path, n_train=4, n_val=2)
    path = root / "SegmentationClass" / "2007_000001.png"
    png = Image.open(path)
    png.putpixel((20, 20), 99)
    png.save(path)
    cfg = Config(image_size=48, base_channels=2, batch_size=2, num_workers=1, data_dir=str(tmp_path))
    with pytest.raises(DataUnavailable) as e:
        _run(cfg, tmp_path)
    assert "\n" not in str(e.value) and str(path) in str(e.value) and "label 99" in str(e.value)


@pytest.mark.parametrize(
    ("values", "param"),
    [
        ({"image_size": "15"}, "image_size"),
        ({"image_size": "33"}, "image_size"),
        ({"image_size": "64.5"}, "image_size"),
        ({"base_channels": "0"}, "base_channels"),
        ({"lr": "0"}, "lr"),
        ({"batch_size": "1", "image_size": "16"}, "batch_size"),
        ({"data": "coco"}, "data"),
        ({"precision": "fp8"}, "precision"),
    ],
)
def test_bad_values_name_their_parameter(values: dict[str, str], param: str) -> None:
    with pytest.raises(UsageError) as e:
        build_config(Config, values)
    assert str(e.value).startswith(f"--{param}: ")


def test_sizes_that_are_even_but_not_multiples_of_16_work(tmp_path: Path) -> None:
    cfg = build_config(Config, {**TINY, "image_size": "40", "train_limit": "4", "val_limit": "4"})
    result, tr, _ = _run(cfg, tmp_path)
    assert tr.models["unet"][1].shape[-2:] == (40, 40)
    assert not math.isnan(result.pixel_accuracy)


def test_fp16_is_refused_on_the_cpu(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--precision: fp16"):
        _run(Config(**TINY, precision="fp16"), tmp_path)


def test_bf16_autocast_and_channels_last_on_the_cpu(tmp_path: Path) -> None:
    cfg = Config(**TINY, precision="bf16", channels_last=True, batch_size=4, train_limit=4, val_limit=4)
    result, _, _ = _run(cfg, tmp_path)
    assert math.isfinite(result.eval_loss)


@pytest.mark.parametrize(
    "args",
    [
        ["--image_size", "15"],
        ["--base_channels", "0"],
        ["--train_list", "/nonexistent/devicebench/train.txt"],
    ],
    ids=["odd-image-size-below-16", "base-channels-0", "missing-list-file"],
)
def test_cli_bad_input_exits_2_with_one_line(args: list[str], tmp_path: Path) -> None:
    env = devicebench_env(f"sqlite:///{tmp_path / 'never-created.db'}")
    proc = run_cli(["unet", "--device", "cpu", *args], env, timeout_s=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"devicebench: error: {args[0]}:")
    assert not (tmp_path / "never-created.db").exists()  # refused before touching the store


@pytest.mark.gpu
@pytest.mark.parametrize(
    "extra",
    [{}, {"precision": "bf16", "channels_last": True}, {"precision": "fp16"}],
    ids=["fp32", "bf16-channels-last", "fp16"],
)
def test_a_small_run_on_cuda(extra: dict, tmp_path: Path) -> None:
    cfg = Config(**{**TINY, "device": "cuda", "image_size": 64, "base_channels": 8}, train_limit=32, **extra)
    cpu_start = seeding.weights_fingerprint(build_unet(cfg))
    tracker = MemoryTracker()
    with contextlib.redirect_stdout(io.StringIO()):
        result = run(cfg, Context(torch.device("cuda"), tmp_path, False), tracker)
    assert tracker.tags["devicebench.init_weights"] == cpu_start
    assert math.isfinite(result.eval_loss) and 0 <= result.miou <= 1
    assert tracker.values("memory/peak_bytes")[0] > 0
