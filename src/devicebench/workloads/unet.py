"""UNet segmentation on Pascal VOC 2012: the notebook's 300/100 sample, trained the same way on any device.

The defaults are the notebook's (the first 300 images of VOC's train list, the first 100 of val, 256²,
batch 16, one epoch, Adam lr 0.001, cross-entropy + Dice loss, the classic 64-channel UNet), so
`-P device=cuda` against `-P device=cpu` is the comparison it printed. Two of its mistakes are not
repeated: its GPU run went on training the model the CPU run had trained, and it shuffled the validation
set. Here every run seeds and builds its model the same way (the initial weights' fingerprint is the tag
`devicebench.init_weights`, so two runs can prove it) and evaluates the same images in the same order.
`data=synthetic` draws learnable scenes for offline runs; `base_channels` and `image_size` shrink the
work for quick runs, `precision` and `channels_last` show what a GPU gains from its tensor cores.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from devicebench import training
from devicebench.config import param
from devicebench.errors import DataUnavailable, UsageError
from devicebench.metrics import (
    IGNORE_INDEX,
    accuracy,
    dice_per_class,
    iou_per_class,
    metric_name,
    nanmean,
    per_class_accuracy,
    soft_dice_loss,
)
from devicebench.timing import Timer
from devicebench.tracking import Tracker
from devicebench.workloads import Context

DATA = "voc2012"
MEMORY_PARAMS = ("batch_size", "image_size", "base_channels")  # what to lower when a run does not fit
NUM_CLASSES = 21
PREDICTION_IMAGES = 4


@dataclass(frozen=True)
class Config:
    device: str = param("cpu", "where the model trains: cpu, cuda, cuda:N, mps or auto")
    epochs: int = param(1, "passes over the training sample (the notebook: 1)", min=1)
    batch_size: int = param(16, "images per optimizer step, train and validation (the notebook: 16)", min=1)
    lr: float = param(0.001, "Adam learning rate", min=0)
    seed: int = param(
        0, "seed for initial weights and shuffle order (same on every device)", min=0, key=False
    )
    image_size: int = param(
        256, "images resized to S×S (bilinear), masks too (nearest); even, multiples of 16 best", min=16
    )
    base_channels: int = param(
        64, "width of the first UNet level, doubled per level (64: the classic 64-…-1024 UNet)", min=1
    )
    bilinear: bool = param(False, "bilinear upsampling instead of transposed convolutions (≈17 M params)")
    precision: str = param(
        "fp32", "autocast precision where the device supports it", choices=training.PRECISIONS
    )
    channels_last: bool = param(False, "NHWC memory format for model and inputs (tensor cores like it)")
    num_workers: int = param(2, "DataLoader worker processes decoding and resizing images", min=0)
    data: str = param(
        "voc2012",
        "voc2012: Pascal VOC 2012 in its standard layout; synthetic: learnable offline scenes",
        choices=("voc2012", "synthetic"),
    )
    data_dir: str = param("", "directory holding VOCdevkit/VOC2012 (empty: DEVICEBENCH_DATA_DIR)", key=False)
    download: bool = param(False, "download VOC 2012 (~2 GB) when it is missing", key=False)
    train_list: str = param(
        "", "file of training image ids, one a line (empty: the first 300 of VOC's train.txt)"
    )
    val_list: str = param(
        "", "file of validation image ids, one a line (empty: the first 100 of VOC's val.txt)"
    )
    train_limit: int = param(0, "train on the first N listed images only (0 = all)", min=0)
    val_limit: int = param(0, "validate on the first N listed images only (0 = all)", min=0)
    log_every: int = param(10, "log the mean training loss every N steps", min=1, key=False)
    system_metrics: bool = param(
        False, "sample CPU, memory and GPU use with MLflow's system metrics", key=False
    )

    def validate(self) -> None:
        """Checks that need more than one field, or the file system, before any run is created."""
        if self.lr <= 0:
            raise UsageError(f"{self.lr!r} is out of range; expected a number > 0", param="lr")
        if self.image_size % 2:
            raise UsageError(
                f"{self.image_size} is odd; expected an even integer >= 16 (multiples of 16 work best)",
                param="image_size",
            )
        if self.image_size < 32 and self.batch_size == 1:
            # the UNet's bottom is 1×1 there: BatchNorm cannot take statistics over a single value
            raise UsageError(
                f"batch_size 1 at image_size {self.image_size} leaves BatchNorm one value per channel; "
                "use batch_size >= 2 or image_size >= 32",
                param="batch_size",
            )
        for name in ("train_list", "val_list"):
            given = getattr(self, name).strip()
            if not given:
                continue
            if self.data != "voc2012":
                raise UsageError(f"list files apply to data=voc2012 only, not data={self.data}", param=name)
            if not Path(os.path.expanduser(given)).is_file():
                raise DataUnavailable(
                    f"list file {given} not found; give a file of VOC image ids, one a line, "
                    "or leave it empty for the default sample",
                    param=name,
                )


@dataclass
class UNetResult:
    """What a run measured, for callers that need numbers back (benchmarks, tests)."""

    miou: float
    dice: float
    pixel_accuracy: float
    eval_loss: float
    train_s: float
    data_wait_s: float
    eval_s: float
    train_samples_per_s: float
    eval_samples_per_s: float
    epoch_losses: list[float]
    iou: dict[str, float]
    init_weights: str


def segmentation_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy + soft Dice, both blind to the 255 void label (Pytorch-UNet's combination).

    The cross-entropy is summed and divided by the valid-pixel count on the device (no host sync), so a
    batch that is all void gives 0 rather than PyTorch's 0/0 = NaN.
    """
    ce = F.cross_entropy(logits.float(), target, ignore_index=IGNORE_INDEX, reduction="sum")
    valid = (target != IGNORE_INDEX).sum().clamp(min=1)
    return ce / valid + soft_dice_loss(logits, target)


def data_root(cfg: Config, ctx: Context) -> Path:
    return Path(os.path.expanduser(cfg.data_dir)) if cfg.data_dir.strip() else Path(ctx.data_root)


def load_datasets(cfg: Config, root: Path) -> tuple[Any, Any]:
    """(train, validation) datasets; `data=voc2012` never falls back to synthetic data."""
    if cfg.data == "synthetic":
        from devicebench.data.scenes import SyntheticScenes

        return (
            SyntheticScenes("train", cfg.image_size, cfg.train_limit),
            SyntheticScenes("val", cfg.image_size, cfg.val_limit),
        )
    from devicebench.data.voc import VOCSegmentationSample, resolve_lists

    voc, train_ids, val_ids = resolve_lists(root, cfg.train_list, cfg.val_list, cfg.download)
    return (
        VOCSegmentationSample(voc, train_ids, cfg.image_size, cfg.train_limit),
        VOCSegmentationSample(voc, val_ids, cfg.image_size, cfg.val_limit),
    )


def make_loaders(
    cfg: Config, train: Any, val: Any, device: torch.device
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """Training batches shuffled by a generator seeded with `seed` (same order on every device);
    validation batches in list order, never shuffled (the notebook shuffled them)."""
    generator = torch.Generator()
    generator.manual_seed(cfg.seed)
    common: dict[str, Any] = {
        "batch_size": cfg.batch_size,
        "num_workers": cfg.num_workers,
        "pin_memory": device.type == "cuda",
    }
    # A lone last image with a 1×1 bottleneck would make BatchNorm fail; drop only that one.
    lone = len(train) % cfg.batch_size == 1 and len(train) > 1 and cfg.image_size < 32
    train_loader = torch.utils.data.DataLoader(
        train,
        shuffle=True,
        generator=generator,
        drop_last=lone,
        persistent_workers=cfg.num_workers > 0 and cfg.epochs > 1,
        **common,
    )
    val_loader = torch.utils.data.DataLoader(val, shuffle=False, **common)
    return train_loader, val_loader


@contextmanager
def _one_line_data_errors() -> Iterator[None]:
    """A DataUnavailable raised in a DataLoader worker comes back with the worker's traceback in its
    message; keep its own last line, so the user still reads one line naming the file."""
    try:
        yield
    except DataUnavailable as e:
        text = str(e)
        if "\n" not in text:
            raise
        lines = [ln for ln in text.splitlines() if "DataUnavailable:" in ln]
        message = lines[-1].split("DataUnavailable:", 1)[1].strip() if lines else " ".join(text.split())
        raise DataUnavailable(message) from None


def build_model(cfg: Config) -> torch.nn.Module:
    """The UNet, seeded first: the same seed gives the same initial weights on every device."""
    from devicebench.models.unet import UNet

    training.seed_everything(cfg.seed)
    return UNet(3, NUM_CLASSES, cfg.base_channels, cfg.bilinear)


def run(cfg: Config, ctx: Context, tracker: Tracker) -> UNetResult:
    """Train, evaluate on the fixed validation images, log metrics, figures, the model and timings."""
    from devicebench.models.unet import count_parameters

    device = ctx.device
    amp_dtype = training.check_precision(cfg.precision, device)
    tracker.set_tags(training.fp32_math(cfg.precision, device))
    load_timer = Timer(device)
    t0 = load_timer.now()
    train_ds, val_ds = load_datasets(cfg, data_root(cfg, ctx))
    train_loader, val_loader = make_loaders(cfg, train_ds, val_ds, device)
    data_load_s = load_timer.now() - t0
    if len(train_loader) == 0 or len(val_ds) == 0:
        raise DataUnavailable("the training or validation sample is empty; check the list files and limits")
    classes = [str(c) for c in train_ds.classes]

    model = build_model(cfg)
    init_weights = training.weights_fingerprint(model)
    tracker.set_tags(
        {"devicebench.init_weights": init_weights, "devicebench.model.params": str(count_parameters(model))}
    )
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    fused = training.optimizer_options(device)

    def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=cfg.lr, **fused)

    optimizer = make_optimizer(model.parameters())
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    common = {"amp_dtype": amp_dtype, "channels_last": cfg.channels_last}
    print(
        f"UNet base {cfg.base_channels}{' bilinear' if cfg.bilinear else ''}, {len(train_ds)} train / "
        f"{len(val_ds)} val images of {cfg.image_size}² ({cfg.data}) on {device}"
    )

    with _one_line_data_errors():
        warmup_s = training.warm_up(
            model,
            make_optimizer,
            segmentation_loss,
            val_loader,
            device,
            fp16_scaler=scaler is not None,
            train_sizes=training.batch_sizes(len(train_ds), cfg.batch_size)[:1],
            eval_sizes=training.batch_sizes(len(val_ds), cfg.batch_size)[:1],
            **common,
        )
    tracker.log_metrics({"time/warmup_s": warmup_s})

    training.reset_peak_memory(device)
    loss_log = training.LossLog(tracker, cfg.log_every)
    epochs: list[training.EpochResult] = []
    step = 0
    for epoch in range(1, cfg.epochs + 1):
        with _one_line_data_errors():
            res = training.train_epoch(
                model,
                train_loader,
                optimizer,
                segmentation_loss,
                device,
                loss_log=loss_log,
                first_step=step,
                show_progress=ctx.progress,
                desc=f"epoch {epoch}/{cfg.epochs}",
                total=len(train_loader),
                scaler=scaler,
                **common,
            )
        epochs.append(res)
        step += res.steps
        tracker.log_metrics({"train/epoch_loss": res.mean_loss, "time/epoch_s": res.seconds}, step=epoch)
        print(
            f"epoch {epoch}/{cfg.epochs}: loss {res.mean_loss:.4f}, {res.seconds:.2f} s "
            f"(waiting for data {res.data_wait_s:.2f} s)"
        )
    train_s = sum(e.seconds for e in epochs)
    print(f"Training time on {device}: {train_s:.2f} s")

    with _one_line_data_errors():
        ev = training.evaluate(
            model,
            val_loader,
            segmentation_loss,
            device,
            NUM_CLASSES,
            show_progress=ctx.progress,
            total=len(val_loader),
            **common,
        )
    print(f"Evaluation time on {device}: {ev.seconds:.2f} s")

    cm = ev.confusion
    iou = dict(zip(classes, iou_per_class(cm), strict=True))
    dice = dice_per_class(cm)
    samples = sum(e.samples for e in epochs)
    data_wait_s = sum(e.data_wait_s for e in epochs)
    result = UNetResult(
        miou=nanmean(list(iou.values())),
        dice=nanmean(dice),
        pixel_accuracy=accuracy(cm),
        eval_loss=ev.mean_loss,
        train_s=train_s,
        data_wait_s=data_wait_s,
        eval_s=ev.seconds,
        train_samples_per_s=samples / train_s if train_s > 0 else math.nan,
        eval_samples_per_s=ev.samples / ev.seconds if ev.seconds > 0 else math.nan,
        epoch_losses=[e.mean_loss for e in epochs],
        iou=iou,
        init_weights=init_weights,
    )
    values = {
        "eval/loss": result.eval_loss,
        "eval/miou": result.miou,
        "eval/dice": result.dice,
        "eval/pixel_accuracy": result.pixel_accuracy,
        **{f"eval/iou/{metric_name(c)}": v for c, v in iou.items() if not math.isnan(v)},
    }
    tracker.log_metrics({k: v for k, v in values.items() if not math.isnan(v)}, step=cfg.epochs)
    tracker.log_metrics(
        {
            "time/train_s": train_s,
            "time/data_wait_s": data_wait_s,
            "time/eval_s": ev.seconds,
            "throughput/train_samples_per_s": result.train_samples_per_s,
            "throughput/eval_samples_per_s": result.eval_samples_per_s,
            **training.peak_memory(device),
        }
    )
    print(
        f"mIoU on the {ev.samples} validation images: {result.miou:.4f} "
        f"(Dice {result.dice:.4f}, pixel accuracy {result.pixel_accuracy:.4f})"
    )
    _log_artifacts(cfg, tracker, model, val_ds, ev, classes, epochs, data_load_s, warmup_s, device, amp_dtype)
    sys.stdout.flush()
    return result


def _json_number(v: float) -> float | None:
    """NaN (a class with no pixels) as JSON null: `NaN` is not JSON, and 0 would claim a result."""
    return None if math.isnan(v) else v


def per_class_report(cm: torch.Tensor, classes: list[str]) -> dict[str, Any]:
    """per_class.json: every class's IoU, Dice, recall and pixel counts, the means and the matrix."""
    iou, dice, recall = iou_per_class(cm), dice_per_class(cm), per_class_accuracy(cm)
    truth, predicted = cm.sum(dim=1).tolist(), cm.sum(dim=0).tolist()
    return {
        "miou": _json_number(nanmean(iou)),
        "dice": _json_number(nanmean(dice)),
        "pixel_accuracy": _json_number(accuracy(cm)),
        "pixels": int(cm.sum()),
        "ignored_label": IGNORE_INDEX,
        "classes": [
            {
                "name": c,
                "iou": _json_number(iou[k]),
                "dice": _json_number(dice[k]),
                "accuracy": _json_number(recall[k]),
                "truth_pixels": int(truth[k]),
                "predicted_pixels": int(predicted[k]),
            }
            for k, c in enumerate(classes)
        ],
        "confusion_matrix": cm.tolist(),
    }


@torch.inference_mode()
def predict_masks(
    model: torch.nn.Module,
    images: torch.Tensor,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
) -> torch.Tensor:
    """N×H×W predicted class indices (on the CPU) for normalised N×3×H×W images."""
    was_training = model.training
    model.eval()
    x = images.to(device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with training.autocast(device, amp_dtype):
        pred = model(x).argmax(dim=1).cpu()
    model.train(was_training)
    return pred


def predictions_figure(images: torch.Tensor, truth: torch.Tensor, pred: torch.Tensor) -> Any:
    """Rows of image / truth / prediction, masks in the VOC palette (void 255 in its cream colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from devicebench.data.voc import denormalize, voc_palette

    palette = np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3)
    n = images.shape[0]
    fig, axes = plt.subplots(n, 3, figsize=(7.5, 2.5 * n), squeeze=False)
    for i in range(n):
        panels = (
            denormalize(images[i]),
            palette[truth[i].numpy().astype(np.uint8)],
            palette[pred[i].numpy().astype(np.uint8)],
        )
        for j, (panel, title) in enumerate(zip(panels, ("image", "truth", "prediction"), strict=True)):
            axes[i][j].imshow(panel, interpolation="nearest")
            axes[i][j].set_axis_off()
            if i == 0:
                axes[i][j].set_title(title)
    fig.tight_layout()
    return fig


def _log_artifacts(
    cfg: Config,
    tracker: Tracker,
    model: torch.nn.Module,
    val_ds: Any,
    ev: training.EvalResult,
    classes: list[str],
    epochs: list[training.EpochResult],
    data_load_s: float,
    warmup_s: float,
    device: torch.device,
    amp_dtype: torch.dtype | None,
) -> None:
    import matplotlib.pyplot as plt

    tracker.log_dict(per_class_report(ev.confusion, classes), "per_class.json")
    tracker.log_dict(
        {
            "data_load_s": data_load_s,
            "warmup_s": warmup_s,
            "epochs": [dataclasses.asdict(e) for e in epochs],
            "train_s": sum(e.seconds for e in epochs),
            "data_wait_s": sum(e.data_wait_s for e in epochs),
            "eval": {"seconds": ev.seconds, "data_wait_s": ev.data_wait_s, "samples": ev.samples},
            "eval_s": ev.seconds,
        },
        "timings.json",
    )
    fig = training.confusion_figure(ev.confusion, classes, f"UNet ({cfg.data}): validation pixels")
    tracker.log_figure(fig, "confusion_matrix.png")
    plt.close(fig)  # type: ignore[arg-type]

    # The first validation images, always the same ones: their pictures compare across runs and devices.
    first = [val_ds[i] for i in range(min(PREDICTION_IMAGES, len(val_ds)))]
    images = torch.stack([x for x, _ in first])
    truth = torch.stack([y for _, y in first])
    pred = predict_masks(model, images, device, amp_dtype, cfg.channels_last)
    fig = predictions_figure(images, truth, pred)
    tracker.log_figure(fig, "predictions.png")
    plt.close(fig)  # type: ignore[arg-type]

    tracker.log_model(model, "model", images[:2])
