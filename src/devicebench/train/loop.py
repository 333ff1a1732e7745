"""The one training loop of cifar, unet and model (infer serves, matmul times products; neither trains):
the epoch loop (`fit`) and the step loop (`train_epoch`,
`evaluate`) together, then the summary every report reads (`log_summary`).

What the loop owns is what must not differ between workloads for their timings to compare: the seeding
before the model is built, the device placement, the untimed warm-up, the per-epoch metrics, the
evaluation, the summary metrics and `timings.json`. It measures what a report needs to say *why* a GPU
gained little: the time the step loop spent waiting for the next batch (`data_wait`) apart from the rest
(compute, launches, optimizer), with one device synchronisation per epoch rather than per step. In a
data-parallel job losses are averaged over ranks and the summary carries every rank's figures; every rank
evaluates the whole eval set on its own copy of the (identical) weights, so no rank waits for another.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from devicebench.errors import Diverged
from devicebench.host import gpu_state, peaks
from devicebench.host.memory import peak_memory, reset_peak_memory
from devicebench.host.precision import autocast
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
from devicebench.tracking.protocol import Tracker
from devicebench.train.metrics import confusion_matrix
from devicebench.train.progress import ProgressBar, progress
from devicebench.train.records import EpochResult, EvalResult, LossLog
from devicebench.train.seeding import seed_everything, weights_fingerprint
from devicebench.train.setup import Data, Options, Task, batch_sizes
from devicebench.train.step import Learner, LossFn, StepSettings, on_device, train_step
from devicebench.train.summary import (
    Totals,
    dist_metrics,
    peak_devices,
    train_flops_per_sample,
    utilization_metrics,
)
from devicebench.util.collector import paused_for_imports

NO_BAR = ProgressBar()


@dataclass
class Fitted:
    """What `fit` did: the model as trained (compiled where asked) and its records."""

    model: torch.nn.Module
    module: torch.nn.Module  # the model itself, not its compiled wrapper: its state_dict is the weights
    init_weights: str
    warmup: dict[str, float]
    epochs: list[EpochResult] = field(default_factory=list)
    evals: list[EvalResult] = field(default_factory=list)
    # The last evaluation's metrics as logged: what measures the trained model, linked to it when logged.
    eval_metrics: dict[str, float] = field(default_factory=dict)
    allreduce_s: float | None = None  # a job of several processes: one gradient all-reduce, measured alone
    flops_per_sample: float | None = None  # forward + backward, counted once (summary.py)
    ranks: list[dict[str, float]] = field(default_factory=list)  # every rank's training figures, by rank
    gpu: dict[str, float] = field(default_factory=dict)  # what the GPU did over the epochs (gpu_state)

    def totals(self) -> Totals:
        """The run's figures: the job's, in a job of several processes (`Totals.of_job`)."""
        return Totals.of(self.epochs, self.evals).of_job(self.ranks)

    def dist_metrics(self) -> dict[str, float]:
        """What a job of several processes adds to the summary (dist_metrics)."""
        steps = sum(e.steps for e in self.epochs)
        return dist_metrics(self.ranks, self.allreduce_s, steps, self.totals().train_s)


def fit(opts: Options, data: Data, task: Task, tracker: Tracker) -> Fitted:
    """Seed, build, place and warm up the model, then train `opts.epochs` epochs and evaluate."""
    seed_everything(opts.seed)
    built = task.build()
    init_weights = weights_fingerprint(built)
    tracker.set_tags({tag("init_weights"): init_weights, tag("model.params"): str(count_parameters(built))})
    model, module = _place(built, opts)
    # The process's first torch.optim optimizer imports torch._dynamo (~150,000 objects); paused and frozen
    # that once only, so a tuning search's later trials leave their models to the collector.
    first = "torch._dynamo" not in sys.modules
    with paused_for_imports() if first else contextlib.nullcontext():
        optimizer = task.optimizer(model.parameters())
    scaler = torch.amp.GradScaler(opts.device.type) if opts.fp16 else None
    learner = Learner(model, optimizer, task.loss_fn, scaler)
    done = Fitted(model, module, init_weights, _warm_up(model, data, task, opts, tracker))
    with task.guard():
        x, y = next(iter(data.eval_loader))  # one batch's shapes: the FLOPs are counted on the meta device
    done.flops_per_sample = train_flops_per_sample(task.build, x, y, task.loss_fn)
    done.allreduce_s = opts.world.allreduce_seconds(module, opts.device)
    reset_peak_memory(opts.device)
    with gpu_state.watching(opts.device) as watch:  # NVML's own samples, read once at the end
        _train_epochs(done, learner, opts, data, task, tracker)
        done.gpu = watch.read() if watch is not None else {}
    own = Totals.of(done.epochs, done.evals)
    figures = {"train_s": own.train_s, "data_wait_s": own.data_wait_s, "train_samples": own.train_samples}
    done.ranks = opts.world.gather(figures) if opts.world.distributed else []
    return done


def _train_epochs(
    done: Fitted, learner: Learner, opts: Options, data: Data, task: Task, tracker: Tracker
) -> None:
    """The timed epochs, each evaluated where the task asks, recorded into `done` as they end."""
    shared = LossLog(tracker, task.log_every)
    step = 0
    for epoch in range(1, opts.epochs + 1):
        loss_log = shared if task.loss_log is None else task.loss_log(tracker, epoch, step)
        loss_log.reduce = opts.world.mean  # the job's losses, epoch mean included: the mean over ranks
        _new_epoch(data.train_loader, epoch)
        with task.guard():
            bar = ProgressBar(
                opts.progress, f"epoch {epoch}/{opts.epochs}", len(cast(Sized, data.train_loader))
            )
            res = train_epoch(
                learner, data.train_loader, opts.step, loss_log=loss_log, first_step=step, bar=bar
            )
        done.epochs.append(res)
        step += res.steps
        tracker.log_metrics({EPOCH_LOSS: res.mean_loss, EPOCH_S: res.seconds}, step=epoch)
        task.on_epoch(epoch, res, done.totals().train_s)
        if task.eval_every_epoch or epoch == opts.epochs:
            ev, done.eval_metrics = _evaluate(
                learner.model, data, task, opts, tracker, epoch, done.totals().train_s
            )
            done.evals.append(ev)


def _new_epoch(loader: Iterable, epoch: int) -> None:
    """A sampler from `Options.sampler_for` that reshuffles per epoch (DistributedSampler) is told which
    epoch this is; the DataLoader's own shuffle needs nothing."""
    set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)


def train_epoch(
    learner: Learner,
    loader: Iterable,
    step: StepSettings,
    *,
    loss_log: LossLog,
    first_step: int,
    bar: ProgressBar = NO_BAR,
) -> EpochResult:
    """One epoch; the clock is read after a device synchronisation at both ends.

    Per step the loop does what a bare training loop does, plus only host bookkeeping: two clock reads
    around the batch fetch (the data-wait split), a list append for the loss, and a tqdm tick where a
    terminal shows one. No kernel and no sync of its own: on a launch-bound GPU step (the tutorial Net at
    batch 256 takes about a millisecond on an H100-class GPU) any device work added here would show.
    """
    learner.model.train()
    timer = Timer(step.device)
    wait = [0.0]
    steps = samples = 0
    loss_log.begin_epoch()
    start = timer.now()
    batches = progress(_timed_batches(loader, step, wait), bar)
    try:
        for x, y in batches:
            loss = train_step(learner, x, y, step)
            steps += 1
            samples += x.shape[0]
            loss_log.add(loss, first_step + steps)
    except BaseException:  # SIGTERM, Ctrl-C, a failure: the points measured so far are kept, not dropped
        with contextlib.suppress(Exception):  # a broken device must not hide the original error
            loss_log.flush(collective=False)
        raise
    seconds = timer.now() - start
    loss_log.flush()
    mean = loss_log.epoch_mean() if steps else 0.0
    if not math.isfinite(mean):  # a window LossLog has not closed (fewer than `every` steps)
        raise Diverged(first_step + steps)
    return EpochResult(seconds=seconds, data_wait_s=wait[0], samples=samples, steps=steps, mean_loss=mean)


def _timed_batches(loader: Iterable, step: StepSettings, wait: list[float]) -> Iterator:
    """Yield batches on the device, adding the time spent waiting for each to `wait[0]`."""
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            return
        x, y = on_device(x, y, step)
        wait[0] += time.perf_counter() - t0
        yield x, y


def _rows(x: torch.Tensor, y: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` rows of a batch, repeated when it has fewer (a short eval set, a bigger train batch)."""
    reps = -(-n // x.shape[0])
    return torch.cat([x] * reps)[:n], torch.cat([y] * reps)[:n]


def _evaluate(
    model: torch.nn.Module,
    data: Data,
    task: Task,
    opts: Options,
    tracker: Tracker,
    epoch: int,
    train_s: float,
) -> tuple[EvalResult, dict[str, float]]:
    with task.guard():
        bar = ProgressBar(opts.progress, "eval", len(cast(Sized, data.eval_loader)))
        ev = evaluate(model, data.eval_loader, task.loss_fn, opts.step, task.num_classes, bar=bar)
    values = dict(task.eval_metrics(ev))
    tracker.log_metrics(values, step=epoch)
    task.on_eval(tracker, epoch, ev, train_s)
    return ev, values


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module,
    loader: Iterable,
    loss_fn: LossFn,
    step: StepSettings,
    num_classes: int,
    *,
    bar: ProgressBar = NO_BAR,
) -> EvalResult:
    """Loss and a confusion matrix over the whole loader, in its order; restores train mode afterwards."""
    was_training = model.training
    model.eval()
    device = step.device
    timer = Timer(device)
    wait = [0.0]
    cm = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    loss_sum = torch.zeros((), device=device)
    batches = samples = 0
    start = timer.now()
    for x, y in progress(_timed_batches(loader, step, wait), bar):
        with autocast(device, step.amp_dtype):
            logits = model(x)
            loss_sum += loss_fn(logits, y).float()
        cm += confusion_matrix(logits.argmax(dim=1), y, num_classes)
        batches += 1
        samples += x.shape[0]
    seconds = timer.now() - start
    model.train(was_training)
    return EvalResult(
        confusion=cm.cpu(),
        mean_loss=float(loss_sum / max(batches, 1)),
        seconds=seconds,
        data_wait_s=wait[0],
        samples=samples,
    )


def _eval_timings(ev: EvalResult) -> dict[str, float | int]:
    return {"seconds": ev.seconds, "data_wait_s": ev.data_wait_s, "samples": ev.samples}


def _place(model: torch.nn.Module, opts: Options) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(what runs, the module itself): on the device, NHWC where asked, wrapped in DDP in a job of
    several processes, then compiled where asked (DDP first: the compiler splits the graph at DDP's
    buckets so that communication still overlaps backward)."""
    module = model.to(opts.device)
    if opts.channels_last:
        module = module.to(memory_format=torch.channels_last)
    runs = opts.world.wrap(module, opts.device)
    if opts.compile:
        return cast(torch.nn.Module, torch.compile(runs, mode=opts.compile_mode)), module
    return runs, module


def _warm_up(
    model: torch.nn.Module, data: Data, task: Task, opts: Options, tracker: Tracker
) -> dict[str, float]:
    """The untimed warm-up (warm_up says what it absorbs); every batch size when compiling."""
    dropped = bool(getattr(data.train_loader, "drop_last", False))  # its short last batch never trains
    train_sizes = batch_sizes(len(cast(Sized, data.train_set)), opts.batch_size, drop_last=dropped)
    eval_sizes = batch_sizes(len(cast(Sized, data.eval_set)), opts.batch_size)
    with task.guard():
        seconds = warm_up(
            model,
            task.optimizer,
            task.loss_fn,
            data.eval_loader,
            opts.step,
            train_sizes=train_sizes if opts.compile else train_sizes[:1],
            eval_sizes=eval_sizes if opts.compile else eval_sizes[:1],
            in_place=opts.world.distributed,
        )
    warmup = {WARMUP_S: seconds, **({COMPILE_S: seconds} if opts.compile else {})}
    tracker.log_metrics(warmup)
    return warmup


def warm_up(
    model: torch.nn.Module,
    make_optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer],
    loss_fn: LossFn,
    loader: Iterable,
    step: StepSettings,
    *,
    train_sizes: Iterable[int],
    eval_sizes: Iterable[int],
    in_place: bool = False,
) -> float:
    """Untimed training steps and eval forwards on a *copy* of the model, with its own optimizer, on the
    first batch of `loader` (the unshuffled eval loader: the training order is not touched); seconds.

    What a GPU does once per process lands here instead of in `time/train_s` and `time/eval_s`: the
    cuDNN and cuBLAS handles, lazily loaded kernels, the allocator's first blocks and, for a compiled
    model, compiling the train graph and the eval graph (`inference_mode` needs its own) at every batch
    size an epoch will meet (a shorter last batch recompiles). The copy shares the compiled code with the
    real model but not its weights, and the RNG is forked, so the real model, its optimizer and the
    seeded data order are exactly as if no warm-up had run.

    `in_place` warms up the model itself and then restores its weights and buffers: a DDP model (which
    cannot be copied) on every rank at once, so its first all-reduces and buffer broadcasts are warmed too.
    """
    device = step.device
    timer = Timer(device)
    start = timer.now()
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()} if in_place else None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        x_all, y_all = next(iter(loader))  # a DataLoader draws its workers' base seed from the global RNG
        shadow = model if in_place else copy.deepcopy(model)
        optimizer = make_optimizer(shadow.parameters())
        scaler = torch.amp.GradScaler(device.type) if step.fp16_scaler else None
        learner = Learner(shadow, optimizer, loss_fn, scaler)
        shadow.train()
        for size in sorted({s for s in train_sizes if s > 0}, reverse=True):
            x, y = on_device(*_rows(x_all, y_all, size), step)
            train_step(learner, x, y, step)
        shadow.eval()
        with torch.inference_mode():
            for size in sorted({s for s in eval_sizes if s > 0}, reverse=True):
                x, y = on_device(*_rows(x_all, y_all, size), step)
                with autocast(device, step.amp_dtype):
                    logits = shadow(x)
                    loss_fn(logits, y)
                confusion_matrix(logits.argmax(dim=1), y, max(int(logits.shape[1]), 1))
        if saved is not None:
            model.load_state_dict(saved)
        seconds = timer.now() - start
        del shadow, optimizer, learner
    return seconds


def log_summary(tracker: Tracker, done: Fitted, data: Data, opts: Options, *, one_eval: bool = False) -> None:
    """The summary metrics every report reads, and `timings.json` with each epoch and evaluation.

    `one_eval` writes the final evaluation as `"eval": {...}` (the UNet's schema, which evaluates once)
    instead of the list `"evals": [...]`.
    """
    totals = done.totals()
    # rank 0 alone logs, and alone measures a CPU's peak: ranks measuring on every core at once would
    # share the cores and read the peak low (docs/measured.md)
    util, util_tags = (
        utilization_metrics(
            done.flops_per_sample,
            totals.train_samples_per_s,
            opts.device,
            peaks.training_dtype(opts.precision, opts.fp32_math),
            peak_devices(opts.device, opts.world.size, opts.world.local_size),
        )
        if opts.world.is_main
        else ({}, {})
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
            **peak_memory(opts.device),
            **done.gpu,
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
