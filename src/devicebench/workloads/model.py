"""Your model: any torchvision model by name, or your own `module:factory`, trained as cifar trains.

The same loop (train/loop.py: seeding, warm-up apart, one synchronisation per epoch, data wait apart),
the same precisions, CPU tuning, FLOPs per sample and share of peak, on data of the input's shape:
synthetic images held on the device by default (the model alone), or a folder of images through a
DataLoader (`data=imagefolder`), where a fast GPU shows whether the loader keeps up. A classifier learns
cross-entropy over its classes; a segmentation model (its output N×K×H×W, a dict's `out` for
torchvision's) per pixel. Every run also logs `flops/forward_per_sample`, what one served prediction
costs: the x of the report's "speedup against the model's size" chart.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from devicebench.config.naming import model_label
from devicebench.config.workloads import ModelConfig as Config
from devicebench.data import resolve_root
from devicebench.data.loader import LoaderSettings, data_loader, one_line_data_errors
from devicebench.data.shaped import PoolLoader, image_folders, synthetic_splits
from devicebench.errors import UsageError
from devicebench.host import precision
from devicebench.host.context import Context
from devicebench.models import zoo
from devicebench.schema import ACCURACY, EVAL_LOSS, FORWARD_FLOPS, MIOU, PIXEL_ACCURACY
from devicebench.tracking.protocol import Tracker
from devicebench.train import loop, setup
from devicebench.train.metrics import accuracy, confusion_table, iou_per_class, nanmean
from devicebench.train.records import EvalResult
from devicebench.train.summary import forward_flops_per_sample, meta_model
from devicebench.util.fmt import fmt_quality

DATA = "synthetic"
MEMORY_PARAMS = ("batch_size", "input", "train_limit")
MAX_CLASS_TABLE = 100  # a confusion table of ImageNet's 1,000 classes is a million cells nobody reads
IGNORE = 255  # a segmentation mask's void label, as VOC's (never drawn by the synthetic masks)


@dataclass
class ModelResult:
    """What a run measured, for the run line, the costs and tests (the timings are `Totals.timings()`)."""

    accuracy: float
    eval_loss: float
    forward_flops: float | None
    task: str
    train_s: float
    data_wait_s: float
    eval_s: float
    train_samples_per_s: float
    eval_samples_per_s: float
    gpu: dict[str, float] = field(default_factory=dict)  # over the epochs (host/gpu_state.py); {} off CUDA
    chance_accuracy: float = math.nan  # a classifier's accuracy by guessing: 1 / classes


def check(cfg: Config) -> zoo.Spec:
    """Before the run exists: the model resolves, builds and takes the input (models/zoo.py), and trains
    on batches of `batch_size` (BatchNorm cannot train on one sample)."""
    spec = zoo.checked(cfg.model, cfg.shape, cfg.num_classes)
    if cfg.batch_size == 1 and not spec.trains_on_one:
        raise UsageError(
            f"{spec.name} cannot train on a batch of one sample (BatchNorm at {cfg.input}); use batch_size >= 2",
            param="batch_size",
        )
    return spec


def _data(
    cfg: Config, ctx: Context, opts: setup.Options, spec: zoo.Spec
) -> tuple[Any, Any, Iterable, Iterable]:
    if cfg.data == "imagefolder":
        if spec.task != "classification":
            raise UsageError(
                f"{spec.name} is a segmentation model; data=imagefolder holds classes, not masks: use "
                "data=synthetic",
                param="data",
            )
        root = resolve_root(cfg.data_dir, ctx.data_root)
        train, test = image_folders(root, cfg.shape, cfg.train_limit, cfg.test_limit)
        head = zoo.checked(cfg.model, cfg.shape, cfg.num_classes or len(train.classes)).classes
        if head != len(train.classes):
            raise UsageError(
                f"{spec.name} predicts {head} classes and {root}/train holds {len(train.classes)}; set "
                f"num_classes {len(train.classes)} (or 0) or give a folder of {head} classes",
                param="num_classes",
            )
        both = LoaderSettings(cfg.batch_size, ctx.device, cfg.num_workers, opts.sampler_for)
        lone = _drops_a_lone_last(spec, len(train), cfg.batch_size)
        return (
            train,
            test,
            data_loader(train, both, shuffle=True, seed=cfg.seed, drop_last=lone),
            data_loader(test, both, shuffle=False),
        )
    seg = spec.task == "segmentation"
    train, test = synthetic_splits(cfg.shape, spec.classes, cfg.train_limit, cfg.test_limit, segmentation=seg)
    lone = _drops_a_lone_last(spec, len(train), cfg.batch_size)
    return (
        train,
        test,
        PoolLoader(train, cfg.batch_size, ctx.device, shuffle=True, seed=cfg.seed, drop_last=lone),
        PoolLoader(test, cfg.batch_size, ctx.device, shuffle=False),
    )


def _drops_a_lone_last(spec: zoo.Spec, samples: int, batch_size: int) -> bool:
    """Whether the training loader leaves out its last batch: only where it would hold one sample and
    the model cannot train on one (BatchNorm: zoo.checked asks). One sample in all is refused."""
    if spec.trains_on_one or samples % batch_size != 1:
        return False
    if samples == 1:
        raise UsageError(
            f"{spec.name} cannot train on a batch of one sample (BatchNorm) and the training set holds one; "
            "give train_limit >= 2",
            param="train_limit",
        )
    print(f"note: {spec.name} cannot train on one sample (BatchNorm); the last batch of one is left out")
    return True


def eval_metrics(ev: EvalResult, task: str) -> dict[str, float]:
    """Loss and accuracy; a segmentation model's pixel accuracy and mIoU."""
    if task == "segmentation":
        values = {EVAL_LOSS: ev.mean_loss, PIXEL_ACCURACY: accuracy(ev.confusion)}
        values[MIOU] = nanmean(iou_per_class(ev.confusion))
        return {k: v for k, v in values.items() if not math.isnan(v)}
    return {EVAL_LOSS: ev.mean_loss, ACCURACY: accuracy(ev.confusion)}


def _task(cfg: Config, spec: zoo.Spec, classes: int, device: torch.device) -> setup.Task:
    fused = precision.optimizer_options(device)

    def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, **fused)

    return setup.Task(
        build=lambda: spec.build(cfg.num_classes or classes),
        optimizer=make_optimizer,
        loss_fn=torch.nn.CrossEntropyLoss(ignore_index=IGNORE),
        num_classes=classes,
        eval_metrics=lambda ev: eval_metrics(ev, spec.task),
        log_every=cfg.log_every,
        guard=one_line_data_errors,  # a worker's undecodable image: its own line, naming the file
    )


def run(cfg: Config, ctx: Context, tracker: Tracker) -> ModelResult:
    """Train, evaluate, log the FLOPs and the model."""
    spec = check(cfg)
    opts, tracker = setup.setup(cfg, ctx, tracker, compile=cfg.compile, compile_mode=cfg.compile_mode)
    data = setup.load_data(opts, lambda: _data(cfg, ctx, opts, spec))
    setup.log_batch_used(tracker, cfg.batch_size, data.train_set)
    classes = len(data.classes)
    task = _task(cfg, spec, classes, ctx.device)
    done = loop.fit(opts, data, task, tracker)
    loop.log_summary(tracker, done, data, opts)
    forward = forward_flops_per_sample(meta_model(task.build), cfg.shape)
    if forward:
        tracker.log_metrics({FORWARD_FLOPS: forward})
    final = done.evals[-1]
    chance = 1 / classes if spec.task == "classification" and classes else math.nan
    print(_accuracy_line(spec, cfg, accuracy(final.confusion), final.samples, classes))
    _log_artifacts(cfg, tracker, done, data)
    return ModelResult(
        accuracy=accuracy(final.confusion),
        eval_loss=final.mean_loss,
        forward_flops=forward,
        task=spec.task,
        **done.totals().timings(),
        gpu=done.gpu,
        chance_accuracy=chance,
    )


def _accuracy_line(spec: zoo.Spec, cfg: Config, acc: float, samples: int, classes: int) -> str:
    """The accuracy beside what it is against: a default classifier on synthetic data has a 1,000-class
    head and a few hundred images, so 0.000 is what it should score, and says so."""
    against = (
        f"{classes} classes, chance {fmt_quality(1 / classes)}"
        if spec.task == "classification"
        else spec.task
    )
    said = f"{spec.name}: accuracy {fmt_quality(acc)} on {samples} {cfg.data} test images ({against})"
    if cfg.data == "synthetic":
        said += "; synthetic data times the model, it does not teach it: read the time, not the accuracy"
    return said


def _log_artifacts(cfg: Config, tracker: Tracker, done: loop.Fitted, data: setup.Data) -> None:
    """The confusion table where the classes are few enough to read, and the trained model (a factory's
    class pickled by value: it loads where the factory's file is not)."""
    cm = done.evals[-1].confusion
    if len(data.classes) <= MAX_CLASS_TABLE:
        tracker.log_table(confusion_table(cm, data.classes), "confusion_matrix.json")
    x, _ = next(iter(data.eval_loader))
    uri = tracker.log_model(
        done.model, model_name(cfg), x[:2].detach().cpu(), metrics=list(done.eval_metrics)
    )
    if uri:  # what `infer` takes next (the README's next command)
        print(f"logged model {uri}; serve it: devicebench infer --model_uri {uri} --device {cfg.device}")
    sys.stdout.flush()


def model_name(cfg: Config) -> str:
    """The logged model's name: the torchvision name, or the factory's module (or file) and function
    (`my_models-build`: a factory's function alone, `build`, says nothing of what was built)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in model_label(cfg.model))[:100]
