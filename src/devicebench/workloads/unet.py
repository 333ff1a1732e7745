"""UNet segmentation on Pascal VOC 2012: the notebook's 300/100 sample, trained the same way on any device.

The defaults are the notebook's (the first 300 images of VOC's train list, the first 100 of val, 256²,
batch 16, one epoch, Adam lr 0.001, cross-entropy + Dice loss, the classic 64-channel UNet), so
`-P device=cuda` against `-P device=cpu` is the comparison it printed. Two of its mistakes are not
repeated: its GPU run went on training the model the CPU run had trained, and it shuffled the validation
set. Here every run seeds and builds its model the same way (the initial weights' fingerprint is the
`init_weights` tag, so two runs can prove it) and evaluates the same images in the same order.
`data=synthetic` draws learnable scenes for offline runs; `base_channels` and `image_size` shrink the
work for quick runs, `precision` and `channels_last` show what a GPU gains from its tensor cores.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from devicebench.config.workloads import UNetConfig as Config
from devicebench.data import IGNORE_INDEX, resolve_root
from devicebench.data.loader import (
    LoaderSettings,
    SamplerFor,
    data_loader,
    no_sampler,
    one_line_data_errors,
)
from devicebench.data.scenes import SyntheticScenes
from devicebench.data.voc import VOCSegmentationSample, denormalize, resolve_lists, voc_palette
from devicebench.errors import DataUnavailable
from devicebench.host import precision
from devicebench.host.context import Context
from devicebench.models.unet import UNet
from devicebench.schema import DICE, EVAL_LOSS, MIOU, PIXEL_ACCURACY, class_iou_key
from devicebench.tracking.protocol import Tracker
from devicebench.train import figures, loop, records, seeding, setup
from devicebench.train.metrics import (
    accuracy,
    confusion_table,
    dice_per_class,
    iou_per_class,
    metric_name,
    nanmean,
    per_class_accuracy,
    soft_dice_loss,
)

DATA = "voc2012"
MEMORY_PARAMS = ("batch_size", "image_size", "base_channels")  # what to lower when a run does not fit
NUM_CLASSES = 21
PREDICTION_IMAGES = 4
MODEL_NAME = "unet"  # the logged model's name: what it is, not `model`


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
    gpu: dict[str, float] = field(default_factory=dict)  # over the epochs (host/gpu_state.py); {} off CUDA


def segmentation_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy + soft Dice, both blind to the 255 void label (Pytorch-UNet's combination).

    The cross-entropy is summed and divided by the valid-pixel count on the device (no host sync), so a
    batch that is all void gives 0 rather than PyTorch's 0/0 = NaN.
    """
    ce = F.cross_entropy(logits.float(), target, ignore_index=IGNORE_INDEX, reduction="sum")
    valid = (target != IGNORE_INDEX).sum().clamp(min=1)
    return ce / valid + soft_dice_loss(logits, target)


def load_datasets(cfg: Config, root: Path) -> tuple[Any, Any]:
    """(train, validation) datasets; `data=voc2012` never falls back to synthetic data."""
    if cfg.data == "synthetic":
        return (
            SyntheticScenes("train", cfg.image_size, cfg.train_limit),
            SyntheticScenes("val", cfg.image_size, cfg.val_limit),
        )

    voc, train_ids, val_ids = resolve_lists(root, cfg.train_list, cfg.val_list, cfg.download)
    return (
        VOCSegmentationSample(voc, train_ids, cfg.image_size, cfg.train_limit),
        VOCSegmentationSample(voc, val_ids, cfg.image_size, cfg.val_limit),
    )


def make_loaders(
    cfg: Config, train: Any, val: Any, device: torch.device, *, sampler_for: SamplerFor = no_sampler
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """Training batches shuffled by a generator seeded with `seed` (same order on every device);
    validation batches in list order, never shuffled (the notebook shuffled them)."""
    both = LoaderSettings(cfg.batch_size, device, cfg.num_workers, sampler_for)
    # A lone last image with a 1×1 bottleneck would make BatchNorm fail; drop only that one.
    lone = len(train) % cfg.batch_size == 1 and len(train) > 1 and cfg.image_size < 32
    train_loader = data_loader(
        train, both, shuffle=True, seed=cfg.seed, drop_last=lone, persistent=cfg.epochs > 1
    )
    val_loader = data_loader(val, both, shuffle=False, persistent=False)
    return train_loader, val_loader


def build_unet(cfg: Config) -> torch.nn.Module:
    """The UNet, seeded first: the same seed gives the same initial weights on every device."""
    seeding.seed_everything(cfg.seed)
    return UNet(3, NUM_CLASSES, cfg.base_channels, cfg.bilinear)


def eval_metrics(ev: records.EvalResult, classes: list[str]) -> dict[str, float]:
    """Loss, mIoU, Dice and pixel accuracy, and the IoU of every class that met a pixel (no NaN)."""
    cm = ev.confusion
    iou = dict(zip(classes, iou_per_class(cm), strict=True))
    values = {
        EVAL_LOSS: ev.mean_loss,
        MIOU: nanmean(list(iou.values())),
        DICE: nanmean(dice_per_class(cm)),
        PIXEL_ACCURACY: accuracy(cm),
        **{class_iou_key(metric_name(c)): v for c, v in iou.items() if not math.isnan(v)},
    }
    return {k: v for k, v in values.items() if not math.isnan(v)}


def _task(cfg: Config, classes: list[str], device: torch.device) -> setup.Task:
    fused = precision.optimizer_options(device)

    def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=cfg.lr, **fused)

    def on_epoch(epoch: int, res: records.EpochResult, train_s: float) -> None:
        print(
            f"epoch {epoch}/{cfg.epochs}: loss {res.mean_loss:.4f}, {res.seconds:.2f} s "
            f"(waiting for data {res.data_wait_s:.2f} s)"
        )
        if epoch == cfg.epochs:
            print(f"Training time on {device}: {train_s:.2f} s")

    def on_eval(tracker: Tracker, epoch: int, ev: records.EvalResult, train_s: float) -> None:
        print(f"Evaluation time on {device}: {ev.seconds:.2f} s")

    return setup.Task(
        build=lambda: build_unet(cfg),
        optimizer=make_optimizer,
        loss_fn=segmentation_loss,
        num_classes=NUM_CLASSES,
        eval_metrics=lambda ev: eval_metrics(ev, classes),
        log_every=cfg.log_every,
        on_epoch=on_epoch,
        on_eval=on_eval,
        guard=one_line_data_errors,
    )


def run(cfg: Config, ctx: Context, tracker: Tracker) -> UNetResult:
    """Train, evaluate on the fixed validation images, log metrics, figures, the model and timings."""
    opts, tracker = setup.setup(cfg, ctx, tracker)
    root = resolve_root(cfg.data_dir, ctx.data_root)

    def load() -> tuple[Any, Any, Iterable, Iterable]:
        train_ds, val_ds = load_datasets(cfg, root)
        train_loader, val_loader = make_loaders(
            cfg, train_ds, val_ds, ctx.device, sampler_for=opts.sampler_for
        )
        if len(train_loader) == 0 or len(val_ds) == 0:
            raise DataUnavailable(
                "the training or validation sample is empty; check the list files and limits"
            )
        return train_ds, val_ds, train_loader, val_loader

    data = setup.load_data(opts, load)
    setup.log_batch_used(tracker, cfg.batch_size, data.train_set)
    print(
        f"UNet base {cfg.base_channels}{' bilinear' if cfg.bilinear else ''}, {len(data.train_set)} train / "
        f"{len(data.eval_set)} val images of {cfg.image_size}² ({cfg.data}) on {ctx.device}"
    )
    done = loop.fit(opts, data, _task(cfg, data.classes, ctx.device), tracker)
    ev = done.evals[-1]
    loop.log_summary(tracker, done, data, opts, one_eval=True)
    iou = dict(zip(data.classes, iou_per_class(ev.confusion), strict=True))
    result = UNetResult(
        miou=nanmean(list(iou.values())),
        dice=nanmean(dice_per_class(ev.confusion)),
        pixel_accuracy=accuracy(ev.confusion),
        eval_loss=ev.mean_loss,
        **done.totals().timings(),
        epoch_losses=[e.mean_loss for e in done.epochs],
        iou=iou,
        init_weights=done.init_weights,
        gpu=done.gpu,
    )
    print(
        f"mIoU on the {ev.samples} validation images: {result.miou:.4f} "
        f"(Dice {result.dice:.4f}, pixel accuracy {result.pixel_accuracy:.4f})"
    )
    _log_artifacts(cfg, tracker, done, data, opts)
    sys.stdout.flush()
    return result


def _nan_as_none(v: float) -> float | None:
    """NaN (a class with no pixels) as an empty cell: 0 would claim a result."""
    return None if math.isnan(v) else v


def per_class_table(cm: torch.Tensor, classes: list[str]) -> dict[str, list]:
    """per_class.json, a table the MLflow UI renders: each class's IoU, Dice and recall (empty where the
    class met no pixel) and its truth and predicted pixel counts. Void (255) pixels are in no count."""
    iou, dice, recall = iou_per_class(cm), dice_per_class(cm), per_class_accuracy(cm)
    return {
        "class": list(classes),
        "iou": [_nan_as_none(v) for v in iou],
        "dice": [_nan_as_none(v) for v in dice],
        "accuracy": [_nan_as_none(v) for v in recall],
        "truth_pixels": [int(n) for n in cm.sum(dim=1).tolist()],
        "predicted_pixels": [int(n) for n in cm.sum(dim=0).tolist()],
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
    with precision.autocast(device, amp_dtype):
        pred = model(x).argmax(dim=1).cpu()
    model.train(was_training)
    return pred


def predictions_image(images: torch.Tensor, truth: torch.Tensor, pred: torch.Tensor) -> Image.Image:
    """Rows of image / truth / prediction, masks in the VOC palette (void 255 in its cream colour)."""
    palette = np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3)
    rows = [
        (
            np.rint(denormalize(images[i]) * 255).astype(np.uint8),
            palette[truth[i].numpy().astype(np.uint8)],
            palette[pred[i].numpy().astype(np.uint8)],
        )
        for i in range(images.shape[0])
    ]
    return figures.panel_grid(rows, ("image", "truth", "prediction"))


def _log_artifacts(
    cfg: Config, tracker: Tracker, done: loop.Fitted, data: setup.Data, opts: setup.Options
) -> None:
    ev = done.evals[-1]
    tracker.log_table(per_class_table(ev.confusion, data.classes), "per_class.json")
    tracker.log_table(confusion_table(ev.confusion, data.classes), "confusion_matrix.json")
    image = figures.confusion_image(ev.confusion, data.classes, f"UNet ({cfg.data}): validation pixels")
    tracker.log_image(image, "confusion_matrix.png")

    # The first validation images, always the same ones: their pictures compare across runs and devices.
    first = [data.eval_set[i] for i in range(min(PREDICTION_IMAGES, len(data.eval_set)))]
    images = torch.stack([x for x, _ in first])
    truth = torch.stack([y for _, y in first])
    pred = predict_masks(done.model, images, opts.device, opts.amp_dtype, opts.channels_last)
    tracker.log_image(predictions_image(images, truth, pred), "predictions.png")

    tracker.log_model(done.model, MODEL_NAME, images[:2], metrics=list(done.eval_metrics))
