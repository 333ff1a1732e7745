"""`devicebench tune <workload>`: find how this CPU trains a config fastest, then measure it that way.

On the H100 host's 16 vCPUs the tutorial pipeline (16 torch threads + 2 DataLoader workers) trained at
200-250 img/s while the same network with its data in memory did ~2,000: a CPU-vs-GPU pair against the
CPU as configured measures the configuration, not the CPU. Tuning runs short trials of the same config
on the CPU over torch threads (1, 2, 4, ... up to the usable cores) × how the data is fed (`loader=tensor`;
the DataLoader with 0, 2 and cores − threads workers; unet has only the DataLoader), keeps the fastest,
and runs the measured CPU side with it. That run is tagged `devicebench.cpu.tuned` and carries every
trial as an MLflow table (`cpu_tuning.json`); the report holds the GPU against it as "this CPU at its
best" (its `work_key` is the config's own, as loader and workers are how the CPU is fed, not the work).

The whole search is time-boxed (`tune_budget_s`): the first trial sets how many steps the others take,
and trials that would not fit in what is left are skipped and listed as such.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicebench.errors import UsageError
from devicebench.schema import TRAINING_WORKLOADS

TUNABLE = TRAINING_WORKLOADS
PROBE_STEPS = 30  # the first trial's steps: long enough to time a step, short enough for any model
MIN_STEPS, MAX_STEPS = 10, 300  # "a few hundred steps" where the budget allows


@dataclass(frozen=True)
class Setting:
    """How the CPU is fed and threaded in one trial."""

    threads: int
    loader: str
    num_workers: int

    def overrides(self) -> dict[str, Any]:
        return {"cpu_threads": self.threads, "loader": self.loader, "num_workers": self.num_workers}

    def __str__(self) -> str:
        feed = "data in memory" if self.loader == "tensor" else f"DataLoader, {self.num_workers} workers"
        return f"{self.threads} thread{'s' if self.threads > 1 else ''}, {feed}"


@dataclass
class Trial:
    setting: Setting
    steps: int = 0
    samples_per_s: float | None = None
    seconds: float = 0.0
    note: str = ""  # why a trial has no figure: skipped for the budget, or what failed


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to `cores`, and `cores` itself, largest first (torch's default comes first)."""
    counts = {cores}
    n = 1
    while n < cores:
        counts.add(n)
        n *= 2
    return sorted(counts, reverse=True)


def settings(workload: str, cores: int) -> list[Setting]:
    """Every trial, in the order they run: threads × feeding, duplicates removed."""
    out: list[Setting] = []
    for threads in thread_counts(cores):
        feeds = [("tensor", 0)] if workload == "cifar" else []
        feeds += [("dataloader", w) for w in (0, 2, cores - threads) if w >= 0]
        for loader, workers in dict.fromkeys(feeds):
            out.append(Setting(threads, loader, workers))
    return out


def _trial_config(cfg: Any, setting: Setting, steps: int) -> Any:
    """The config for one short trial: the same work, fed this way, for `steps` steps and one tiny eval."""
    return dataclasses.replace(
        cfg,
        **setting.overrides(),
        device="cpu",
        epochs=1,
        train_limit=steps * cfg.batch_size,
        **{_eval_limit(cfg): cfg.batch_size},
    )


def _eval_limit(cfg: Any) -> str:
    return "test_limit" if hasattr(cfg, "test_limit") else "val_limit"


def run_trial(workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path) -> Trial:
    """One trial in this process (torch's threads set for it and put back): train samples/s as logged."""
    import torch

    from devicebench.host.context import Context
    from devicebench.tracking.protocol import null_tracker
    from devicebench.workloads import load

    before = torch.get_num_threads()
    torch.set_num_threads(setting.threads)
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = load(workload).run(
                _trial_config(cfg, setting, steps),
                Context(torch.device("cpu"), data_root, False),
                null_tracker(),
            )
        rate = result.train_samples_per_s
    finally:
        torch.set_num_threads(before)
    return Trial(setting, steps, rate if math.isfinite(rate) else None, time.perf_counter() - started)


def tune(
    workload: str, cfg: Any, budget_s: float, cores: int, data_root: Path, say: Any = print
) -> list[Trial]:
    """Every trial within `budget_s` seconds, in `settings` order; `say` prints each as it ends."""
    if workload not in TUNABLE:
        raise UsageError(f"tuning trains {' and '.join(TUNABLE)}, not {workload}", param="workload")
    todo = settings(workload, cores)
    started = time.perf_counter()
    run_trial(workload, cfg, todo[0], MIN_STEPS, data_root)  # untimed: what a process pays once (imports,
    # first kernels, the allocator) must not make the first setting look slow
    trials: list[Trial] = []
    steps = PROBE_STEPS
    for i, setting in enumerate(todo, start=1):
        left = budget_s - (time.perf_counter() - started)
        if trials and _typical(trials) > left:
            trials.append(Trial(setting, note="skipped: past the tuning budget"))
            say(
                f"tune {workload}: [{i}/{len(todo)}] {setting}: skipped, {max(left, 0):.1f} s of the budget left"
            )
            continue
        trial = run_trial(workload, cfg, setting, steps, data_root)
        trials.append(trial)
        if i == 1 and trial.samples_per_s:  # the probe sets every later trial's length
            per_step = trial.seconds / max(steps, 1)
            share = budget_s / len(todo)
            steps = max(MIN_STEPS, min(MAX_STEPS, int(share / max(per_step, 1e-6))))
        best = max((t.samples_per_s or 0.0) for t in trials)
        rate = f"{trial.samples_per_s:,.0f} samples/s" if trial.samples_per_s else "no figure"
        mark = "  <- best so far" if trial.samples_per_s == best else ""
        say(f"tune {workload}: [{i}/{len(todo)}] {setting}: {rate} ({trial.seconds:.1f} s){mark}")
    return trials


def _typical(trials: list[Trial]) -> float:
    """What the next trial will likely take: the median of those that ran (one slow setting, such as
    every thread spinning against a busy neighbour, must not crowd the rest out)."""
    import statistics

    ran = [t.seconds for t in trials if t.samples_per_s]
    return statistics.median(ran) if ran else 0.0


def best(trials: list[Trial]) -> Trial:
    measured = [t for t in trials if t.samples_per_s]
    if not measured:
        raise UsageError(
            "no tuning trial finished within the budget; raise tune_budget_s", param="tune_budget_s"
        )
    return max(measured, key=lambda t: t.samples_per_s or 0.0)


def table(trials: list[Trial]) -> dict[str, list[Any]]:
    """The trials as an MLflow table (`cpu_tuning.json`): one row per trial, skipped ones included."""
    return {
        "threads": [t.setting.threads for t in trials],
        "loader": [t.setting.loader for t in trials],
        "num_workers": [t.setting.num_workers for t in trials],
        "steps": [t.steps for t in trials],
        "samples_per_s": [t.samples_per_s for t in trials],
        "seconds": [round(t.seconds, 3) for t in trials],
        "note": [t.note for t in trials],
    }


def tags(trials: list[Trial], chosen: Trial, budget_s: float) -> dict[str, str]:
    """What the measured run says about how it was chosen (devicebench.cpu.tuned*)."""
    from devicebench.schema import tag

    ran = [t for t in trials if t.samples_per_s]
    return {
        tag("cpu.tuned"): "true",
        tag("cpu.tuned.setting"): str(chosen.setting),
        tag("cpu.tuned.trials"): str(len(ran)),
        tag("cpu.tuned.best_trial_samples_per_s"): f"{chosen.samples_per_s:.6g}",
        tag("cpu.tuned.budget_s"): f"{budget_s:g}",
    }


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
