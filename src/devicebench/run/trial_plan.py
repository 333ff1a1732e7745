"""What a tuning tries, in order: the first stage's feeding (× threads on a CPU) and the second stage's
changes (NHWC, compilation, reduced precision where asked), each a `Setting` of the config it tunes.
The search that runs them within a budget is `run.tuning`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from devicebench.config.parts import Compiled, Fed, LoaderChoice, Numerics, Threaded
from devicebench.config.workloads import REDUCED_PRECISIONS
from devicebench.errors import UsageError
from devicebench.host.precision import check_precision
from devicebench.util.fmt import fmt_setting

T = TypeVar("T")
EAGER = "none"  # a Setting's `compile` when the model is not compiled


@dataclass(frozen=True)
class Setting:
    """How the device is fed, threaded and set up in one trial. `threads` 0: as the config says (a GPU
    side's CPU threads are not tuned); `compile`: EAGER or torch.compile's mode."""

    threads: int
    loader: str
    num_workers: int
    channels_last: bool = False
    compile: str = EAGER
    precision: str = "default"

    def applied(self, cfg: T) -> T:
        """`cfg` set up this way, in the parts it is composed of: a config that does not choose its
        loader is fed as it is, one that is not `Compiled` runs eagerly."""
        if isinstance(cfg, LoaderChoice):
            cfg = dataclasses.replace(cfg, loader=self.loader)
        if isinstance(cfg, Fed):
            cfg = dataclasses.replace(cfg, num_workers=self.num_workers)
        if isinstance(cfg, Numerics):
            cfg = dataclasses.replace(cfg, channels_last=self.channels_last, precision=self.precision)
        if isinstance(cfg, Compiled):
            mode = self.compile if self.compile != EAGER else "default"
            cfg = dataclasses.replace(cfg, compile=self.compile != EAGER, compile_mode=mode)
        if self.threads and isinstance(cfg, Threaded):
            cfg = dataclasses.replace(cfg, cpu_threads=self.threads)
        return cfg

    @property
    def reduced_precision(self) -> bool:
        return self.precision in REDUCED_PRECISIONS

    def __str__(self) -> str:
        return fmt_setting(
            self.threads or None,
            self.loader == "tensor",
            self.num_workers,
            self.channels_last,
            None if self.compile == EAGER else self.compile,
            self.precision if self.reduced_precision else None,
        )


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to `cores`, and `cores` itself, largest first (torch's default comes first)."""
    counts = {cores}
    n = 1
    while n < cores:
        counts.add(n)
        n *= 2
    return sorted(counts, reverse=True)


def settings(has_loader: bool, cores: int, in_memory: bool = False, on_gpu: bool = False) -> list[Setting]:
    """The first stage's trials, in the order they run: feeding (× threads on the CPU), duplicates
    removed. `has_loader`: the config chooses its loader, and `tensor` holds the data in memory (cifar's
    `loader`). `in_memory`: the run's data is already on the device (the `model` workload's synthetic
    data), so only threads vary; on a GPU the threads are left as configured (0)."""
    out: list[Setting] = []
    for threads in [0] if on_gpu else thread_counts(cores):
        feeds = [("tensor", 0)] if has_loader or in_memory else []
        spare = cores if on_gpu else cores - threads  # the loader's workers share the host's cores
        feeds += [] if in_memory else [("dataloader", w) for w in (0, 2, spare) if w >= 0]
        for loader, workers in dict.fromkeys(feeds):
            out.append(Setting(threads, loader, workers))
    return out


Change = tuple[str, Any]  # one field of a Setting and the value a second-stage trial tries


def changes(cfg: Any, device: torch.device, tune_precision: bool = False) -> list[Change]:
    """The second stage: each change tried once, from the leader at that point, in this order. Only what
    the config is composed of (a config that is not `Compiled` is never compiled) and the device can
    run; reduced precision only where asked and where the config does not already ask for it."""
    out: list[Change] = []
    if not isinstance(cfg, Numerics):
        return out
    if not cfg.channels_last:
        out.append(("channels_last", True))
    if isinstance(cfg, Compiled):
        out += [("compile", "default")] + ([("compile", "reduce-overhead")] if device.type == "cuda" else [])
    if tune_precision and cfg.precision not in REDUCED_PRECISIONS:
        out += [("precision", p) for p in REDUCED_PRECISIONS if _can(p, device)]
    return out


def _can(precision: str, device: torch.device) -> bool:
    """Whether `device` runs `precision` natively: a CPU's bf16 without AVX512-BF16 or AMX is emulated,
    so slow that a trial of it would only spend the budget."""
    if device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    try:
        check_precision(precision, device)
    except UsageError:
        return False
    return True


def trial_plan(
    cfg: Any, device: torch.device, cores: int, tune_precision: bool = False
) -> tuple[list[Setting], list[Change]]:
    """(the first stage's settings, the second stage's changes): what a tuning of `cfg` on `device`
    tries, in order, before the leaders run again. A config's own setting (NHWC, compiled, its
    precision) is where every trial starts."""
    has_loader = isinstance(cfg, LoaderChoice)
    # a config without the choice whose data is on the device already (model's synthetic), or that no
    # DataLoader feeds (not `Fed`), tries no loader: only threads
    in_memory = not has_loader and (not isinstance(cfg, Fed) or cfg.in_memory)
    start = Setting(0, "", 0, _compiled(cfg))
    if isinstance(cfg, Numerics):
        start = dataclasses.replace(start, channels_last=cfg.channels_last, precision=cfg.precision)
    first = [
        dataclasses.replace(start, threads=s.threads, loader=s.loader, num_workers=s.num_workers)
        for s in settings(has_loader, cores, in_memory, device.type == "cuda")
    ]
    todo = [c for c in changes(cfg, device, tune_precision) if getattr(start, c[0]) != c[1]]
    return first, todo


def _compiled(cfg: Any) -> str:
    return cfg.compile_mode if isinstance(cfg, Compiled) and cfg.compile else EAGER
