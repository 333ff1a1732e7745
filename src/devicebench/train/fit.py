"""The one training driver: a workload supplies data, a model, its loss and its metrics; `fit` trains
and evaluates them the same way for every workload, and `log_summary` logs what every report reads.

What the driver owns is what must not differ between workloads for their timings to compare: the
seeding before the model is built, the device placement, the untimed warm-up, the per-epoch metrics,
the evaluation, the summary metrics and `timings.json`. A data-parallel job (torchrun, DDP) runs the
same code on every rank, with its `World` (distributed.py) answering what differs: only rank 0 logs (the
others get a tracker that keeps nothing), the train loader takes its shard from `Options.sampler_for`,
the model is wrapped in DDP, losses are averaged over ranks, and the summary carries every rank's figures.
Every rank evaluates the whole eval set on its own copy of the (identical) weights: the eval time is what
one process takes, and no rank waits for another there.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch

from devicebench.host import peaks, precision
from devicebench.host.context import Context
from devicebench.host.distributed import World
from devicebench.host.timing import Timer
from devicebench.models import count_parameters
from devicebench.schema import (
    COMPILE_S,
    DATA_WAIT_S,
    EPOCH_LOSS,
    EPOCH_S,
    EVAL_RATE,
    EVAL_S,
    TRAIN_RATE,
    TRAIN_S,
    WARMUP_S,
    tag,
)
from devicebench.tracking.protocol import Tracker, null_tracker
from devicebench.train import training, utilization
from devicebench.train.totals import Totals, dist_metrics

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class TrainingConfig(Protocol):
    """The fields every training workload's config has (devicebench/config/workloads.py)."""

    epochs: int
    batch_size: int
    seed: int
    precision: str
    channels_last: bool


@dataclass(frozen=True)
class Options:
    """How a run trains, whatever the workload: resolved once from its config and context."""

    device: torch.device
    epochs: int
    batch_size: int
    seed: int
    amp_dtype: torch.dtype | None
    fp16: bool  # autocast fp16 needs a GradScaler
    channels_last: bool
    compile: bool = False
    progress: bool = False
    precision: str = "default"
    fp32_math: str = "ieee"  # what fp32 resolved to (precision.fp32_math): which peak the run is held to
    world: World = field(
        default_factory=World
    )  # torchrun: this rank's place in the job; a single process by default

    @property
    def is_main_process(self) -> bool:
        return self.world.is_main  # rank 0 logs, the others train quietly

    def sampler_for(self, dataset: Any, shuffle: bool) -> Any:
        """The loaders' sampler: this rank's shard of the seeded order (the whole order on one process)."""
        return self.world.sampler(dataset, shuffle, self.seed)

    @property
    def amp(self) -> dict[str, Any]:
        """The keyword arguments every loop and the warm-up take."""
        return {"amp_dtype": self.amp_dtype, "channels_last": self.channels_last}


def setup(
    cfg: TrainingConfig,
    ctx: Context,
    tracker: Tracker,
    *,
    compile: bool = False,
) -> tuple[Options, Tracker]:
    """The run's options and the tracker to log to (a null tracker off rank 0); a precision the device
    cannot do is a UsageError here, before any data is read, and fp32 math is set and tagged."""
    amp_dtype = precision.check_precision(cfg.precision, ctx.device)
    world = ctx.world or World()
    log = tracker if world.is_main else null_tracker()
    math = precision.fp32_math(cfg.precision, ctx.device)
    log.set_tags(math)
    opts = Options(
        device=ctx.device,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        amp_dtype=amp_dtype,
        fp16=cfg.precision == "fp16",
        channels_last=cfg.channels_last,
        compile=compile,
        progress=ctx.progress,
        precision=cfg.precision,
        fp32_math=math[tag("fp32_math")],
        world=world,
    )
    return opts, log


@dataclass
class Data:
    """The two splits and their loaders; `load_s` is what reading and preparing them took."""

    train_set: Any
    eval_set: Any
    train_loader: Iterable
    eval_loader: Iterable
    load_s: float = 0.0

    @property
    def classes(self) -> list[str]:
        return [str(c) for c in self.train_set.classes]


def log_batch_used(tracker: Tracker, batch_size: int, train_set: Any) -> None:
    """Say so, and tag the run, when the batch is larger than the training data: every batch then holds
    the whole set. `--batch_size 1000000000000` on 200 images logged a batch of 1e12 and nothing else;
    the param stays as given (MLflow params are immutable), `devicebench.batch_size.used` is the truth."""
    count = len(cast(Sized, train_set))
    if 0 < count < batch_size:
        tracker.set_tags({tag("batch_size.used"): str(count)})
        print(
            f"note: batch_size {batch_size:,} is larger than the {count:,} training images; every batch "
            f"holds {count:,} (tagged devicebench.batch_size.used)"
        )


def load_data(opts: Options, load: Callable[[], tuple[Any, Any, Iterable, Iterable]]) -> Data:
    """`load()`'s (train set, eval set, train loader, eval loader), timed as the data load."""
    timer = Timer(opts.device)
    start = timer.now()
    train_set, eval_set, train_loader, eval_loader = load()
    return Data(train_set, eval_set, train_loader, eval_loader, load_s=timer.now() - start)


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


@dataclass
class Task:
    """What a workload supplies: how to build its model (the driver seeds first), its optimizer, loss
    and eval metrics, and hooks for what it prints. Every field after `eval_metrics` has a default."""

    build: Callable[[], torch.nn.Module]
    optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
    loss_fn: LossFn
    num_classes: int
    eval_metrics: Callable[[training.EvalResult], Mapping[str, float]]  # logged at step=epoch
    log_every: int = 1
    eval_every_epoch: bool = False  # else once, after the last epoch
    # The LossLog for an epoch, given the tracker, the epoch and its first step; None: one for the run.
    loss_log: Callable[[Tracker, int, int], training.LossLog] | None = None
    # Called after each epoch's metrics and each evaluation's, with the training seconds so far.
    on_epoch: Callable[[int, training.EpochResult, float], None] = _nothing
    on_eval: Callable[[Tracker, int, training.EvalResult, float], None] = _nothing
    guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext  # around data reads


@dataclass
class Fitted:
    """What `fit` did: the model as trained (compiled where asked) and its records."""

    model: torch.nn.Module
    module: torch.nn.Module  # the model itself, not its compiled wrapper: its state_dict is the weights
    init_weights: str
    warmup: dict[str, float]
    epochs: list[training.EpochResult] = field(default_factory=list)
    evals: list[training.EvalResult] = field(default_factory=list)
    # The last evaluation's metrics as logged: what measures the trained model, linked to it when logged.
    eval_metrics: dict[str, float] = field(default_factory=dict)
    allreduce_s: float | None = None  # a job of several processes: one gradient all-reduce, measured alone
    flops_per_sample: float | None = None  # forward + backward, counted once (utilization.py)
    ranks: list[dict[str, float]] = field(default_factory=list)  # every rank's training figures, by rank

    def totals(self) -> Totals:
        """The run's figures: the job's, in a job of several processes (`Totals.of_job`)."""
        return Totals.of(self.epochs, self.evals).of_job(self.ranks)

    def dist_metrics(self) -> dict[str, float]:
        """What a job of several processes adds to the summary (totals.dist_metrics)."""
        steps = sum(e.steps for e in self.epochs)
        return dist_metrics(self.ranks, self.allreduce_s, steps, self.totals().train_s)


def _place(model: torch.nn.Module, opts: Options) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(what runs, the module itself): on the device, NHWC where asked, wrapped in DDP in a job of
    several processes, then compiled where asked (DDP first: the compiler splits the graph at DDP's
    buckets so that communication still overlaps backward)."""
    module = model.to(opts.device)
    if opts.channels_last:
        module = module.to(memory_format=torch.channels_last)
    runs = opts.world.wrap(module, opts.device)
    if opts.compile:
        return cast(torch.nn.Module, torch.compile(runs)), module
    return runs, module


def _warm_up(
    model: torch.nn.Module, data: Data, task: Task, opts: Options, tracker: Tracker
) -> dict[str, float]:
    """The untimed warm-up (training.warm_up says what it absorbs); every batch size when compiling."""
    train_sizes = training.batch_sizes(len(cast(Sized, data.train_set)), opts.batch_size)
    eval_sizes = training.batch_sizes(len(cast(Sized, data.eval_set)), opts.batch_size)
    options = {
        "fp16_scaler": opts.fp16,
        "train_sizes": train_sizes if opts.compile else train_sizes[:1],
        "eval_sizes": eval_sizes if opts.compile else eval_sizes[:1],
        **opts.amp,
    }
    with task.guard():
        seconds = training.warm_up(
            model,
            task.optimizer,
            task.loss_fn,
            data.eval_loader,
            opts.device,
            in_place=opts.world.distributed,
            **options,
        )
    warmup = {WARMUP_S: seconds, **({COMPILE_S: seconds} if opts.compile else {})}
    tracker.log_metrics(warmup)
    return warmup


def fit(opts: Options, data: Data, task: Task, tracker: Tracker) -> Fitted:
    """Seed, build, place and warm up the model, then train `opts.epochs` epochs and evaluate."""
    training.seed_everything(opts.seed)
    built = task.build()
    init_weights = training.weights_fingerprint(built)
    tracker.set_tags({tag("init_weights"): init_weights, tag("model.params"): str(count_parameters(built))})
    model, module = _place(built, opts)
    optimizer = task.optimizer(model.parameters())
    scaler = torch.amp.GradScaler(opts.device.type) if opts.fp16 else None
    done = Fitted(model, module, init_weights, _warm_up(model, data, task, opts, tracker))
    with task.guard():
        x, y = next(iter(data.eval_loader))  # one batch's shapes: the FLOPs are counted on the meta device
    done.flops_per_sample = utilization.train_flops_per_sample(task.build, x, y, task.loss_fn)
    done.allreduce_s = opts.world.allreduce_seconds(module, opts.device)
    training.reset_peak_memory(opts.device)
    shared = training.LossLog(tracker, task.log_every)
    step = 0
    for epoch in range(1, opts.epochs + 1):
        loss_log = shared if task.loss_log is None else task.loss_log(tracker, epoch, step)
        loss_log.reduce = opts.world.mean  # the job's losses, epoch mean included: the mean over ranks
        _new_epoch(data.train_loader, epoch)
        with task.guard():
            res = training.train_epoch(
                model,
                data.train_loader,
                optimizer,
                task.loss_fn,
                opts.device,
                loss_log=loss_log,
                first_step=step,
                show_progress=opts.progress,
                desc=f"epoch {epoch}/{opts.epochs}",
                total=len(cast(Sized, data.train_loader)),
                scaler=scaler,
                **opts.amp,
            )
        done.epochs.append(res)
        step += res.steps
        tracker.log_metrics({EPOCH_LOSS: res.mean_loss, EPOCH_S: res.seconds}, step=epoch)
        task.on_epoch(epoch, res, done.totals().train_s)
        if task.eval_every_epoch or epoch == opts.epochs:
            ev, done.eval_metrics = _evaluate(model, data, task, opts, tracker, epoch, done.totals().train_s)
            done.evals.append(ev)
    own = Totals.of(done.epochs, done.evals)
    figures = {"train_s": own.train_s, "data_wait_s": own.data_wait_s, "train_samples": own.train_samples}
    done.ranks = opts.world.gather(figures) if opts.world.distributed else []
    return done


def _new_epoch(loader: Iterable, epoch: int) -> None:
    """A sampler from `Options.sampler_for` that reshuffles per epoch (DistributedSampler) is told which
    epoch this is; the DataLoader's own shuffle needs nothing."""
    set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)


def _evaluate(
    model: torch.nn.Module,
    data: Data,
    task: Task,
    opts: Options,
    tracker: Tracker,
    epoch: int,
    train_s: float,
) -> tuple[training.EvalResult, dict[str, float]]:
    with task.guard():
        ev = training.evaluate(
            model,
            data.eval_loader,
            task.loss_fn,
            opts.device,
            task.num_classes,
            show_progress=opts.progress,
            total=len(cast(Sized, data.eval_loader)),
            **opts.amp,
        )
    values = dict(task.eval_metrics(ev))
    tracker.log_metrics(values, step=epoch)
    task.on_eval(tracker, epoch, ev, train_s)
    return ev, values


def _eval_timings(ev: training.EvalResult) -> dict[str, float | int]:
    return {"seconds": ev.seconds, "data_wait_s": ev.data_wait_s, "samples": ev.samples}


def log_summary(tracker: Tracker, done: Fitted, data: Data, opts: Options, *, one_eval: bool = False) -> None:
    """The summary metrics every report reads, and `timings.json` with each epoch and evaluation.

    `one_eval` writes the final evaluation as `"eval": {...}` (the UNet's schema, which evaluates once)
    instead of the list `"evals": [...]`.
    """
    totals = done.totals()
    util, util_tags = utilization.summary(
        done.flops_per_sample,
        totals.train_samples_per_s,
        opts.device,
        peaks.training_dtype(opts.precision, opts.fp32_math),
        opts.world.size,
    )
    tracker.set_tags(util_tags)
    tracker.log_metrics(
        {
            **util,
            TRAIN_S: totals.train_s,
            DATA_WAIT_S: totals.data_wait_s,
            EVAL_S: totals.eval_s,
            TRAIN_RATE: totals.train_samples_per_s,
            EVAL_RATE: totals.eval_samples_per_s,
            **training.peak_memory(opts.device),
            **done.dist_metrics(),
        }
    )
    evals: dict[str, Any] = (
        {"eval": _eval_timings(done.evals[-1])}
        if one_eval
        else {"evals": [_eval_timings(e) for e in done.evals]}
    )
    timings = {
        "data_load_s": data.load_s,
        **{k.removeprefix("time/"): v for k, v in done.warmup.items()},
        "epochs": [dataclasses.asdict(e) for e in done.epochs],
        "train_s": totals.train_s,
        "data_wait_s": totals.data_wait_s,
        **evals,
        "eval_s": totals.eval_s,
        **({"ranks": done.ranks, "allreduce_s": done.allreduce_s} if done.ranks else {}),
    }
    tracker.log_dict(timings, "timings.json")
