"""What a training run is given before its loop starts: the options resolved from its config and context,
the workload's task (model, loss, metrics) and data, and the batch sizes a pass over the data yields.
Seeding is `train.seeding`'s, a loop's progress bar `train.progress`'s, one step `train.step`'s,
autocast `host.precision`'s and peak memory `host.memory`'s.

A data-parallel job (torchrun, DDP) runs the same code on every rank, with its `World`
(host/distributed.py) answering what differs: only rank 0 logs (the others get a tracker that keeps
nothing), the train loader takes its shard from `Options.sampler_for`, and the model is wrapped in DDP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch

from devicebench.host import precision
from devicebench.host.context import Context
from devicebench.host.distributed import World
from devicebench.host.timing import Timer
from devicebench.schema import tag
from devicebench.tracking.protocol import Tracker, null_tracker
from devicebench.train.records import EpochResult, EvalResult, LossLog
from devicebench.train.step import LossFn, StepSettings


def batch_sizes(n: int, batch_size: int, drop_last: bool = False) -> list[int]:
    """The distinct batch sizes one pass over `n` samples yields: the full one and the last, shorter one."""
    sizes = [min(batch_size, n)] if n else []
    tail = n % batch_size if n > batch_size else 0
    if tail and not drop_last:
        sizes.append(tail)
    return sizes


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
    compile_mode: str = "default"  # torch.compile's mode: reduce-overhead captures CUDA graphs
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
    def step(self) -> StepSettings:
        """What every loop and the warm-up do beside the model, from these options."""
        graphs = self.compile and self.compile_mode == "reduce-overhead" and self.device.type == "cuda"
        return StepSettings(self.device, self.amp_dtype, self.channels_last, self.fp16, graphs)


def setup(
    cfg: TrainingConfig,
    ctx: Context,
    tracker: Tracker,
    *,
    compile: bool = False,
    compile_mode: str = "default",
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
        compile_mode=compile_mode,
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
    eval_metrics: Callable[[EvalResult], Mapping[str, float]]  # logged at step=epoch
    log_every: int = 1
    eval_every_epoch: bool = False  # else once, after the last epoch
    # The LossLog for an epoch, given the tracker, the epoch and its first step; None: one for the run.
    loss_log: Callable[[Tracker, int, int], LossLog] | None = None
    # Called after each epoch's metrics and each evaluation's, with the training seconds so far.
    on_epoch: Callable[[int, EpochResult, float], None] = _nothing
    on_eval: Callable[[Tracker, int, EvalResult, float], None] = _nothing
    guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext  # around data reads
