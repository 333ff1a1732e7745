"""CIFAR-10 classifier: the PyTorch "Training a classifier" tutorial, measured properly on any device.

The defaults are the tutorial (its `Net`, batch 4, SGD lr 0.001 momentum 0.9, 2 epochs, 2 loader workers,
loss printed every 2,000 mini-batches, accuracy overall and per class), so `-P device=cuda` against
`-P device=cpu` is the comparison its readers made by hand. The tutorial warns that so small a network
and batch gain little on a GPU; `width`, `batch_size`, `model`, `precision`, `channels_last`, `compile`
and `loader=tensor` (data kept on the device, no worker processes) turn that warning into measurements,
and the data-wait time logged apart from compute says whether the GPU was starved or just underused.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from devicebench import training
from devicebench.config import param
from devicebench.errors import UsageError
from devicebench.metrics import accuracy, metric_name, per_class_accuracy
from devicebench.models.cifar_net import MODELS, build_model
from devicebench.timing import Timer
from devicebench.tracking import Tracker
from devicebench.workloads import Context

DATA = "cifar10"
# What to lower when a run does not fit (the CLI names them); loader=tensor holds the whole split.
MEMORY_PARAMS = ("batch_size", "width", "train_limit")
NUM_CLASSES = 10


@dataclass(frozen=True)
class Config:
    device: str = param("cpu", "where the model trains: cpu, cuda, cuda:N, mps or auto")
    epochs: int = param(2, "passes over the training set (the tutorial: 2)", min=1)
    batch_size: int = param(4, "images per optimizer step, train and test (the tutorial: 4)", min=1)
    lr: float = param(0.001, "SGD learning rate (> 0)", min=0)
    momentum: float = param(0.9, "SGD momentum", min=0, max=1)
    seed: int = param(
        0, "seed for initial weights and shuffle order (same on every device)", min=0, key=False
    )
    model: str = param(
        "tutorial",
        "tutorial: the tutorial's Net scaled by width; resnet18: torchvision's, for 32×32",
        choices=MODELS,
    )
    width: int = param(
        1, "multiplies the tutorial Net's channels 6/16 and fc 120/84 (1 = the tutorial)", min=1
    )
    precision: str = param(
        "fp32", "autocast precision where the device supports it", choices=training.PRECISIONS
    )
    channels_last: bool = param(False, "NHWC memory format for model and inputs (tensor cores like it)")
    compile: bool = param(
        False, "wrap the model in torch.compile (compiled before timing, logged as time/compile_s)"
    )
    loader: str = param(
        "dataloader",
        "dataloader: the tutorial's transforms in worker processes; tensor: the dataset on the device",
        choices=("dataloader", "tensor"),
    )
    num_workers: int = param(2, "DataLoader worker processes (loader=dataloader only)", min=0)
    data: str = param(
        "cifar10",
        "cifar10: the real dataset; synthetic: a learnable offline look-alike",
        choices=("cifar10", "synthetic"),
    )
    data_dir: str = param(
        "", "directory holding cifar-10-batches-py (empty: DEVICEBENCH_DATA_DIR)", key=False
    )
    download: bool = param(False, "download CIFAR-10 (~163 MB) when files are missing", key=False)
    verify: bool = param(True, "check the files' md5 sums (torchvision's) before reading them", key=False)
    train_limit: int = param(0, "train on the first N images only (0 = all 50,000)", min=0)
    test_limit: int = param(0, "test on the first N images only (0 = all 10,000)", min=0)
    log_every: int = param(2000, "log and print the mean loss every N mini-batches", min=1, key=False)
    target_accuracy: float = param(
        0.0,
        "evaluate after every epoch and log time/to_target_s when test accuracy reaches this (0 = off)",
        min=0,
        max=1,
    )
    system_metrics: bool = param(
        False, "sample CPU, memory and GPU use with MLflow's system metrics", key=False
    )

    def validate(self) -> None:
        if self.lr <= 0:
            raise UsageError(f"{self.lr!r} is out of range; expected a number > 0", param="lr")
        if self.model != "tutorial" and self.width != 1:
            raise UsageError(
                f"width scales the tutorial Net only; use width=1 with model={self.model}", param="width"
            )


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
    from devicebench.data.cifar import CIFAR10Files
    from devicebench.data.synthetic import SyntheticCIFAR10

    if cfg.data == "synthetic":
        return (
            SyntheticCIFAR10(True, transform, cfg.train_limit),
            SyntheticCIFAR10(False, transform, cfg.test_limit),
        )
    common = {"transform": transform, "download": cfg.download, "verify": cfg.verify}
    train = CIFAR10Files(root, True, limit=cfg.train_limit, **common)
    test = CIFAR10Files(root, False, limit=cfg.test_limit, **common)
    return train, test


def make_loaders(cfg: Config, train: Any, test: Any, device: torch.device) -> tuple[Iterable, Iterable]:
    """The train loader (shuffled, seeded) and the test loader (in file order) for `cfg.loader`."""
    from devicebench.data.cifar import TensorLoader, data_loader

    if cfg.loader == "tensor":
        return (
            TensorLoader(train.data, train.targets, cfg.batch_size, device, shuffle=True, seed=cfg.seed),
            TensorLoader(test.data, test.targets, cfg.batch_size, device, shuffle=False),
        )
    kw = {"batch_size": cfg.batch_size, "device": device, "num_workers": cfg.num_workers}
    return data_loader(train, shuffle=True, seed=cfg.seed, **kw), data_loader(test, shuffle=False, **kw)


def _input_example(test: Any, test_loader: Iterable) -> torch.Tensor:
    """Two normalised test images on the CPU: the tutorial's input (float N×3×32×32)."""
    from devicebench.data.cifar import TensorLoader

    if isinstance(test_loader, TensorLoader):
        return test_loader.images[:2].detach().cpu()
    return torch.stack([test[i][0] for i in range(min(2, len(test)))])


def _log_eval(tracker: Tracker, ev: training.EvalResult, classes: list[str], step: int) -> dict[str, float]:
    per_class = dict(zip(classes, per_class_accuracy(ev.confusion), strict=True))
    values = {"eval/accuracy": accuracy(ev.confusion), "eval/loss": ev.mean_loss}
    values.update({f"eval/acc/{metric_name(c)}": a for c, a in per_class.items() if not math.isnan(a)})
    tracker.log_metrics(values, step=step)
    return per_class


def _print_eval(ev: training.EvalResult, per_class: dict[str, float]) -> None:
    acc = accuracy(ev.confusion)
    print(f"Accuracy of the network on the {ev.samples} test images: {100 * acc:.0f} %")
    for name, a in per_class.items():
        shown = "n/a (no test images)" if math.isnan(a) else f"{100 * a:.1f} %"
        print(f"Accuracy for class: {name:10s} is {shown}")


def run(cfg: Config, ctx: Context, tracker: Tracker) -> CifarResult:
    """Train, evaluate, log; the model, its state_dict, confusion matrix and per-class results as artifacts."""
    # torchvision is imported here, not at module level: the CLI imports every workload to build its
    # parser, and torchvision (which pulls in torch._dynamo) would add seconds to every command.
    from devicebench.data.cifar import default_root, tutorial_transform

    device = ctx.device
    amp_dtype = training.check_precision(cfg.precision, device)
    tracker.set_tags(training.fp32_math(cfg.precision, device))
    root = default_root(cfg.data_dir, ctx.data_root)
    load_timer = Timer(device)
    t0 = load_timer.now()
    transform = tutorial_transform() if cfg.loader == "dataloader" else None
    train_ds, test_ds = load_datasets(cfg, root, transform)
    train_loader, test_loader = make_loaders(cfg, train_ds, test_ds, device)
    data_load_s = load_timer.now() - t0
    classes = [str(c) for c in train_ds.classes]

    training.seed_everything(cfg.seed)
    model = build_model(cfg.model, cfg.width, NUM_CLASSES)
    tracker.set_tags({"devicebench.init_weights": training.weights_fingerprint(model)})
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    module = model
    if cfg.compile:
        model = cast(torch.nn.Module, torch.compile(model))
    fused = training.optimizer_options(device)

    def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, **fused)

    optimizer = make_optimizer(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    common = {"amp_dtype": amp_dtype, "channels_last": cfg.channels_last}

    train_sizes = training.batch_sizes(len(train_ds), cfg.batch_size)
    eval_sizes = training.batch_sizes(len(test_ds), cfg.batch_size)
    warmup_s = training.warm_up(
        model,
        make_optimizer,
        loss_fn,
        test_loader,
        device,
        fp16_scaler=scaler is not None,
        train_sizes=train_sizes if cfg.compile else train_sizes[:1],
        eval_sizes=eval_sizes if cfg.compile else eval_sizes[:1],
        **common,
    )
    warmup = {"time/warmup_s": warmup_s, **({"time/compile_s": warmup_s} if cfg.compile else {})}
    tracker.log_metrics(warmup)

    training.reset_peak_memory(device)
    epochs: list[training.EpochResult] = []
    evals: list[training.EvalResult] = []
    step = 0
    train_s = 0.0
    to_target_s: float | None = None
    per_class: dict[str, float] = {}
    for epoch in range(1, cfg.epochs + 1):
        # A fresh LossLog per epoch: like the tutorial's running_loss, each point covers `log_every`
        # steps of one epoch, and a partial window at the epoch's end is not printed.
        loss_log = training.LossLog(cast(Tracker, _PrintedLoss(tracker, epoch, step)), cfg.log_every)
        res = training.train_epoch(
            model,
            train_loader,
            optimizer,
            loss_fn,
            device,
            loss_log=loss_log,
            first_step=step,
            show_progress=ctx.progress,
            desc=f"epoch {epoch}/{cfg.epochs}",
            total=len(train_loader),  # type: ignore[arg-type]
            scaler=scaler,
            **common,
        )
        epochs.append(res)
        step += res.steps
        train_s += res.seconds
        tracker.log_metrics({"train/epoch_loss": res.mean_loss, "time/epoch_s": res.seconds}, step=epoch)
        if cfg.target_accuracy > 0 or epoch == cfg.epochs:
            ev = training.evaluate(
                model,
                test_loader,
                loss_fn,
                device,
                NUM_CLASSES,
                show_progress=ctx.progress,
                total=len(test_loader),  # type: ignore[arg-type]
                **common,
            )
            evals.append(ev)
            per_class = _log_eval(tracker, ev, classes, epoch)
            if (
                to_target_s is None
                and cfg.target_accuracy > 0
                and accuracy(ev.confusion) >= cfg.target_accuracy
            ):
                to_target_s = train_s
                tracker.log_metrics({"time/to_target_s": to_target_s}, step=epoch)
                print(
                    f"Reached {100 * cfg.target_accuracy:.1f} % test accuracy after {train_s:.1f} s of training"
                )

    final = evals[-1]
    memory = training.peak_memory(device)
    samples = sum(e.samples for e in epochs)
    data_wait_s = sum(e.data_wait_s for e in epochs)
    eval_s = sum(e.seconds for e in evals)
    eval_samples = sum(e.samples for e in evals)
    result = CifarResult(
        accuracy=accuracy(final.confusion),
        eval_loss=final.mean_loss,
        train_s=train_s,
        data_wait_s=data_wait_s,
        eval_s=eval_s,
        train_samples=samples,
        train_samples_per_s=samples / train_s if train_s > 0 else math.nan,
        epoch_samples_per_s=[e.samples / e.seconds if e.seconds > 0 else math.nan for e in epochs],
        eval_samples_per_s=eval_samples / eval_s if eval_s > 0 else math.nan,
        to_target_s=to_target_s,
        per_class=per_class,
    )
    tracker.log_metrics(
        {
            "time/train_s": train_s,
            "time/data_wait_s": data_wait_s,
            "time/eval_s": eval_s,
            "throughput/train_samples_per_s": result.train_samples_per_s,
            "throughput/eval_samples_per_s": result.eval_samples_per_s,
            **memory,
        }
    )
    _print_eval(final, per_class)
    _log_artifacts(
        cfg, tracker, module, model, final, classes, test_ds, test_loader, epochs, evals, data_load_s, warmup
    )
    return result


def _log_artifacts(
    cfg: Config,
    tracker: Tracker,
    module: torch.nn.Module,
    model: torch.nn.Module,
    final: training.EvalResult,
    classes: list[str],
    test_ds: Any,
    test_loader: Iterable,
    epochs: list[training.EpochResult],
    evals: list[training.EvalResult],
    data_load_s: float,
    warmup: dict[str, float],
) -> None:
    cm = final.confusion
    support = cm.sum(dim=1).tolist()
    correct = cm.diag().tolist()
    tracker.log_dict(
        {
            "accuracy": accuracy(cm),
            "samples": int(cm.sum()),
            "classes": [
                {"name": c, "accuracy": (k / s if s else None), "correct": int(k), "support": int(s)}
                for c, k, s in zip(classes, correct, support, strict=True)
            ],
            "confusion_matrix": cm.tolist(),
        },
        "per_class.json",
    )
    tracker.log_dict(
        {
            "data_load_s": data_load_s,
            **{k.removeprefix("time/"): v for k, v in warmup.items()},
            "epochs": [dataclasses.asdict(e) for e in epochs],
            "train_s": sum(e.seconds for e in epochs),
            "data_wait_s": sum(e.data_wait_s for e in epochs),
            "evals": [
                {"seconds": e.seconds, "data_wait_s": e.data_wait_s, "samples": e.samples} for e in evals
            ],
            "eval_s": sum(e.seconds for e in evals),
        },
        "timings.json",
    )
    fig = training.confusion_figure(cm, classes, f"CIFAR-10 {cfg.model} ({cfg.data}): test confusion")
    tracker.log_figure(fig, "confusion_matrix.png")
    import matplotlib.pyplot as plt

    plt.close(fig)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cifar_net.pth"  # the tutorial's file: torch.save(net.state_dict(), PATH)
        torch.save({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, path)
        tracker.log_artifact(path)
    tracker.log_model(model, "model", _input_example(test_ds, test_loader))
    sys.stdout.flush()
