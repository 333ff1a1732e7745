"""CIFAR-10 classifier: the PyTorch "Training a classifier" tutorial, measured properly on any device.

The defaults are the tutorial (its `Net`, batch 4, SGD lr 0.001 momentum 0.9, 2 epochs, 2 loader workers,
loss printed every 2,000 mini-batches, accuracy overall and per class), so `-P device=cuda` against
`-P device=cpu` is the comparison its readers made by hand. The tutorial warns that so small a network
and batch gain little on a GPU; `width`, `batch_size`, `model`, `precision`, `channels_last`, `compile`
and `loader=tensor` (data kept on the device, no worker processes) turn that warning into measurements,
and the data-wait time logged apart from compute says whether the GPU was starved or just underused.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from devicebench.config.workloads import CifarConfig as Config
from devicebench.data import resolve_root
from devicebench.data.cifar import CIFAR10Files, TensorLoader, tutorial_transform
from devicebench.data.loader import LoaderSettings, SamplerFor, data_loader, no_sampler
from devicebench.data.synthetic import SyntheticCIFAR10
from devicebench.host import precision
from devicebench.host.context import Context
from devicebench.models.cifar_net import build_model
from devicebench.schema import ACCURACY, EVAL_LOSS, TO_TARGET_S, class_accuracy_key
from devicebench.tracking.protocol import Tracker
from devicebench.train import figures, loop, records, setup
from devicebench.train.metrics import accuracy, confusion_table, metric_name, per_class_accuracy

DATA = "cifar10"
# What to lower when a run does not fit (the CLI names them); loader=tensor holds the whole split.
MEMORY_PARAMS = ("batch_size", "width", "train_limit")
NUM_CLASSES = 10


@dataclass
class CifarResult:
    """What a run measured, for callers that need numbers back (the benchmark, tests)."""

    accuracy: float
    eval_loss: float
    train_s: float
    data_wait_s: float
    eval_s: float
    train_samples: int
    train_samples_per_s: float
    epoch_samples_per_s: list[float]
    eval_samples_per_s: float
    to_target_s: float | None
    per_class: dict[str, float]
    gpu: dict[str, float] = field(default_factory=dict)  # over the epochs (host/gpu_state.py); {} off CUDA


class _PrintedLoss:
    """Forwards LossLog's batched points to the tracker and prints them the tutorial's way
    (`[epoch, step] loss: x.xxx`) from the values already on the host: no extra synchronisation."""

    def __init__(self, tracker: Tracker, epoch: int, first_step: int) -> None:
        self.tracker, self.epoch, self.first_step = tracker, epoch, first_step

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.tracker.log_metrics(metrics, step=step)
        for value in metrics.values():
            print(f"[{self.epoch}, {(step or 0) - self.first_step:5d}] loss: {value:.3f}")


def load_datasets(cfg: Config, root: Path, transform: Any) -> tuple[Any, Any]:
    """(train, test) datasets with torchvision CIFAR10's interface; never falls back to synthetic data."""
    if cfg.data == "synthetic":
        return (
            SyntheticCIFAR10(True, transform, cfg.train_limit),
            SyntheticCIFAR10(False, transform, cfg.test_limit),
        )
    common = {"transform": transform, "download": cfg.download, "verify": cfg.verify}
    train = CIFAR10Files(root, True, limit=cfg.train_limit, **common)
    test = CIFAR10Files(root, False, limit=cfg.test_limit, **common)
    return train, test


def make_loaders(
    cfg: Config, train: Any, test: Any, device: torch.device, *, sampler_for: SamplerFor = no_sampler
) -> tuple[Iterable, Iterable]:
    """The train loader (shuffled, seeded) and the test loader (in file order) for `cfg.loader`.
    loader=tensor holds the whole split on the device and takes no sampler."""
    if cfg.loader == "tensor":
        return (
            TensorLoader(train.data, train.targets, cfg.batch_size, device, shuffle=True, seed=cfg.seed),
            TensorLoader(test.data, test.targets, cfg.batch_size, device, shuffle=False),
        )
    both = LoaderSettings(cfg.batch_size, device, cfg.num_workers, sampler_for)
    return data_loader(train, both, shuffle=True, seed=cfg.seed), data_loader(test, both, shuffle=False)


def _input_example(test: Any, test_loader: Iterable) -> torch.Tensor:
    """Two normalised test images on the CPU: the tutorial's input (float N×3×32×32)."""
    if isinstance(test_loader, TensorLoader):
        return test_loader.images[:2].detach().cpu()
    return torch.stack([test[i][0] for i in range(min(2, len(test)))])


def eval_metrics(ev: records.EvalResult, classes: list[str]) -> dict[str, float]:
    """Accuracy and loss, and the accuracy of every class that had test images."""
    values = {ACCURACY: accuracy(ev.confusion), EVAL_LOSS: ev.mean_loss}
    per_class = zip(classes, per_class_accuracy(ev.confusion), strict=True)
    values.update({class_accuracy_key(metric_name(c)): a for c, a in per_class if not math.isnan(a)})
    return values


def _print_eval(ev: records.EvalResult, classes: list[str]) -> dict[str, float]:
    """The tutorial's lines: overall accuracy, then each class's; the per-class accuracies."""
    per_class = dict(zip(classes, per_class_accuracy(ev.confusion), strict=True))
    print(f"Accuracy of the network on the {ev.samples} test images: {100 * accuracy(ev.confusion):.0f} %")
    for name, a in per_class.items():
        shown = "n/a (no test images)" if math.isnan(a) else f"{100 * a:.1f} %"
        print(f"Accuracy for class: {name:10s} is {shown}")
    return per_class


class _Target:
    """`time/to_target_s`: the training seconds until test accuracy first reached `target` (0 = off)."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.seconds: float | None = None

    def __call__(self, tracker: Tracker, epoch: int, ev: records.EvalResult, train_s: float) -> None:
        if self.seconds is None and self.target > 0 and accuracy(ev.confusion) >= self.target:
            self.seconds = train_s
            tracker.log_metrics({TO_TARGET_S: train_s}, step=epoch)
            print(f"Reached {100 * self.target:.1f} % test accuracy after {train_s:.1f} s of training")


def _task(cfg: Config, classes: list[str], fused: dict[str, bool], target: _Target) -> setup.Task:
    def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, **fused)

    def loss_log(tracker: Tracker, epoch: int, step: int) -> records.LossLog:
        # A fresh LossLog per epoch: like the tutorial's running_loss, each point covers `log_every`
        # steps of one epoch, and a partial window at the epoch's end is not printed.
        return records.LossLog(cast(Tracker, _PrintedLoss(tracker, epoch, step)), cfg.log_every)

    return setup.Task(
        build=lambda: build_model(cfg.model, cfg.width, NUM_CLASSES),
        optimizer=make_optimizer,
        loss_fn=torch.nn.CrossEntropyLoss(),
        num_classes=NUM_CLASSES,
        eval_metrics=lambda ev: eval_metrics(ev, classes),
        log_every=cfg.log_every,
        eval_every_epoch=cfg.target_accuracy > 0,
        loss_log=loss_log,
        on_eval=target,
    )


def run(cfg: Config, ctx: Context, tracker: Tracker) -> CifarResult:
    """Train, evaluate, log; the model, confusion matrix and per-class results as artifacts."""
    opts, tracker = setup.setup(cfg, ctx, tracker, compile=cfg.compile, compile_mode=cfg.compile_mode)
    root = resolve_root(cfg.data_dir, ctx.data_root)

    def load() -> tuple[Any, Any, Iterable, Iterable]:
        transform = tutorial_transform() if cfg.loader == "dataloader" else None
        train_ds, test_ds = load_datasets(cfg, root, transform)
        loaders = make_loaders(cfg, train_ds, test_ds, ctx.device, sampler_for=opts.sampler_for)
        return (train_ds, test_ds, *loaders)

    data = setup.load_data(opts, load)
    setup.log_batch_used(tracker, cfg.batch_size, data.train_set)
    target = _Target(cfg.target_accuracy)
    task = _task(cfg, data.classes, precision.optimizer_options(ctx.device), target)
    done = loop.fit(opts, data, task, tracker)
    loop.log_summary(tracker, done, data, opts)
    final = done.evals[-1]
    per_class = _print_eval(final, data.classes)
    _log_artifacts(cfg, tracker, done, data)
    return CifarResult(
        accuracy=accuracy(final.confusion),
        eval_loss=final.mean_loss,
        train_samples=done.totals().train_samples,
        epoch_samples_per_s=[e.samples / e.seconds if e.seconds > 0 else math.nan for e in done.epochs],
        **done.totals().timings(),
        to_target_s=target.seconds,
        per_class=per_class,
        gpu=done.gpu,
    )


def per_class_table(cm: torch.Tensor, classes: list[str]) -> dict[str, list]:
    """per_class.json, a table the MLflow UI renders: each class's accuracy (recall; empty without test
    images), and the correct and total counts it comes from."""
    total = [int(s) for s in cm.sum(dim=1).tolist()]
    correct = [int(k) for k in cm.diag().tolist()]
    return {
        "class": list(classes),
        "accuracy": [k / s if s else None for k, s in zip(correct, total, strict=True)],
        "correct": correct,
        "total": total,
    }


def _log_artifacts(cfg: Config, tracker: Tracker, done: loop.Fitted, data: setup.Data) -> None:
    """Per-class results and the confusion matrix as tables and a figure, and the model, named for its
    architecture, with the final evaluation's metrics linked to it. Its weights are in the logged model
    (`mlflow.pytorch.load_model(...).state_dict()` loads into the tutorial's `Net`): no separate .pth."""
    cm = done.evals[-1].confusion
    tracker.log_table(per_class_table(cm, data.classes), "per_class.json")
    tracker.log_table(confusion_table(cm, data.classes), "confusion_matrix.json")
    image = figures.confusion_image(cm, data.classes, f"CIFAR-10 {cfg.model} ({cfg.data}): test confusion")
    tracker.log_image(image, "confusion_matrix.png")
    example = _input_example(data.eval_set, data.eval_loader)
    tracker.log_model(done.model, model_name(cfg), example, metrics=list(done.eval_metrics))
    sys.stdout.flush()


def model_name(cfg: Config) -> str:
    """The logged model's name: what it is (`cifar-tutorial`, `cifar-resnet18`), not `model`."""
    return f"cifar-{cfg.model}"
