"""`devicebench tune <workload>`: find how this device trains a config fastest, then measure it that way.

How a device is fed and set up can matter more than the device: the tutorial pipeline (every core a torch
thread, 2 DataLoader workers) trained eight to ten times slower on a 16-vCPU host than the same network
with its data in memory, and a launch-bound GPU step loses to its own Python unless CUDA graphs take the
launches away. A pair of each side as configured measures the configurations, not the devices. So tuning
runs short trials of the same work on the run's device, in two stages:

1. how the data is fed (`loader=tensor`; the DataLoader with 0, 2 and cores − threads workers; unet has
   only the DataLoader), on the CPU crossed with torch threads (1, 2, 4, ... up to the usable cores);
2. from the leader so far, one change at a time, each kept only if it is faster: NHWC (`channels_last`),
   `torch.compile` (default mode, and on a GPU `reduce-overhead`, i.e. CUDA graphs), and, only where
   asked (`tune_precision`), autocast in reduced precision (bf16; fp16 on a GPU), which changes the
   numerics and is said wherever the setting is shown.

The batch size is the work and is never tuned. A compiled trial runs in a child process bounded by the
time it may take (compiling can take minutes and cannot be stopped in the middle of a process). The
measured run is tagged `devicebench.tuned` and carries every trial as an MLflow table (`tuning.json`);
the report holds each device at its best against the other (its `work_key` is the config's own, as the
setting is how the device ran the work, not the work).

The whole search is time-boxed (`tune_budget_s`), warm-up included: each trial gets an equal share of
what is left, 2 to 300 steps and never more than the run itself, sized by what the trials fed the same
way cost before it (a step, and the rest: building the model and data, the one-batch eval). A warm-up
of two steps sizes the first trial; a setting with fewer threads is costed as that much slower; a feed
not yet tried (the DataLoader with so many workers) first runs 3 steps to cost its own, listed in the
table but not counted, as a short run pays the workers' start. A trial that would not fit in what is
left is skipped and listed as such, and a model too slow for its shares (a full UNet on a small CPU)
gets the warm-up and one trial, and the line that says the budget was too small.

The fastest two settings then run once more, and the choice is made among the settings that ran twice,
by the median of their runs: the fastest of many short, noisy trials is biased upward, and a second
figure taken after the choice is not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from devicebench.config.fields import work_key
from devicebench.config.parts import Training
from devicebench.config.workloads import TRAINING_WORKLOADS
from devicebench.errors import UsageError
from devicebench.host.context import Context
from devicebench.run.trial_plan import EAGER, Change, Setting, trial_plan
from devicebench.schema import tag
from devicebench.tracking.protocol import null_tracker
from devicebench.util.children import death_signal, python_argv
from devicebench.util.fmt import fmt_count, fmt_s
from devicebench.workloads import load

WARMUP_STEPS = 2  # untimed: what a process pays once (imports, first kernels, the allocator)
PROBE_STEPS = 30  # the most the first trial takes: enough to time a step
NEW_FEED_STEPS = 3  # a feed not yet tried first runs this many steps, to cost its own (not counted)
MIN_STEPS, MAX_STEPS = 2, 300  # "a few hundred steps" where the budget allows, two where it does not
CONFIRM = 2  # the fastest settings that run a second time, each then judged by the median of its runs
CONFIRMATION = "confirmation"  # the note on a second run's row
SIZING = "sized its feed; not counted"  # the note on a new feed's short first run, run again at length
NO_RATE = "its steps gave no finite rate"  # a trial that ran to its end without a figure


@dataclass
class Trial:
    setting: Setting
    steps: int = 0
    samples_per_s: float | None = None
    seconds: float = 0.0
    note: str = ""  # why a trial has no figure: skipped for the budget, or what failed


def _trial_config(cfg: Training, setting: Setting, steps: int) -> Training:
    """The config for one short trial: the same work, set up this way, for `steps` steps (never more
    images than the run itself trains on) and one tiny eval."""
    return setting.applied(cfg).shortened(steps * cfg.batch_size, cfg.batch_size)


def run_trial(workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path) -> Trial:
    """One trial in this process on `cfg.device` (a resolved device; torch's threads set for it and put
    back): train samples/s as logged."""
    before = torch.get_num_threads()
    if setting.threads:
        torch.set_num_threads(setting.threads)
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = load(workload).run(
                _trial_config(cfg, setting, steps),
                Context(torch.device(cfg.device), data_root, False),
                null_tracker(),
            )
        rate = result.train_samples_per_s
    finally:
        torch.set_num_threads(before)
    return Trial(setting, steps, rate if math.isfinite(rate) else None, time.perf_counter() - started)


def run_isolated(
    workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path, limit_s: float
) -> Trial:
    """`run_trial` in a child process that is ended at `limit_s`: compiling cannot be stopped inside a
    process, and a compile that outlasts what is left of the budget must not take the rest with it."""
    if limit_s <= 0:
        return Trial(setting, note="skipped: past the tuning budget")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="devicebench-trial-") as tmp:
        given, back = Path(tmp, "trial.pkl"), Path(tmp, "result.json")
        given.write_bytes(pickle.dumps((workload, cfg, setting, steps, data_root)))
        argv = python_argv("-m", "devicebench.run.tuning", str(given), str(back))
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=limit_s, preexec_fn=death_signal()
            )
        except subprocess.TimeoutExpired:
            return Trial(
                setting, 0, None, time.perf_counter() - started, f"cut: not done in {fmt_s(limit_s)}"
            )
        if done.returncode or not back.is_file():
            said = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            return Trial(setting, 0, None, time.perf_counter() - started, f"failed: {said}")
        steps, rate = json.loads(back.read_text())
    # the child's start and compile included in its seconds: what the trial cost the budget
    return Trial(setting, steps, rate, time.perf_counter() - started)


def tune(
    workload: str,
    cfg: Any,
    budget_s: float,
    cores: int,
    data_root: Path,
    say: Any = print,
    tune_precision: bool = False,
) -> list[Trial]:
    """Every trial within `budget_s` seconds on `cfg.device`, in `trial_plan` order, then the leaders once
    more; `say` prints each as it ends."""
    if workload not in TRAINING_WORKLOADS:
        raise UsageError(
            f"tuning trains {' and '.join(TRAINING_WORKLOADS)}, not {workload}", param="workload"
        )
    first, todo = trial_plan(cfg, torch.device(cfg.device), cores, tune_precision)
    search = _Search(workload, cfg, data_root, budget_s)
    total = len(first) + len(todo)
    for i in range(1, total + 1):
        setting = first[i - 1] if i <= len(first) else _changed(search.trials, todo[i - len(first) - 1])
        slots = total - i + 1 + CONFIRM  # the trials still to run, this one and the second runs included
        trial = search.first(setting, slots) if i == 1 else search.next(setting, slots)
        best_rate = max((t.samples_per_s or 0.0 for t in search.trials if _counted(t)), default=0.0)
        mark = "  <- best so far" if trial.samples_per_s and trial.samples_per_s == best_rate else ""
        say(f"tune {workload}: [{i}/{total}] {setting}: {_said(trial, search.left())}{mark}")
    leaders = sorted(_scores(search.trials).items(), key=lambda kv: kv[1], reverse=True)[:CONFIRM]
    for i, (setting, _) in enumerate(leaders, start=1):
        trial = search.next(setting, len(leaders) - i + 1, note=CONFIRMATION)
        median = _scores(search.trials).get(setting)
        of = f"; median of its runs {fmt_count(median)}" if median and trial.samples_per_s else ""
        say(f"tune {workload}: [again {i}/{len(leaders)}] {setting}: {_said(trial, search.left())}{of}")
    _say_skipped(workload, search.trials, budget_s, budget_s - search.left(), say)
    return search.trials


def _changed(trials: list[Trial], change: Change) -> Setting:
    """The leader so far with one more change: each change is kept only where its trial was faster."""
    scores = _scores(trials)
    leader = max(scores, key=lambda s: scores[s]) if scores else trials[0].setting
    return dataclasses.replace(leader, **{change[0]: change[1]})


class _Search:
    """One tuning's trials, in the order they ran, and the budget they share."""

    def __init__(self, workload: str, cfg: Any, data_root: Path, budget_s: float) -> None:
        self.workload, self.cfg, self.data_root, self.budget_s = workload, cfg, data_root, budget_s
        run_steps = math.ceil(cfg.train_limit / cfg.batch_size) if cfg.train_limit else MAX_STEPS
        self.most = min(MAX_STEPS, run_steps)  # no trial trains more than the run itself
        self.started = time.perf_counter()
        self.trials: list[Trial] = []

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def first(self, setting: Setting, slots: int) -> Trial:
        """The first setting's trial, after a warm-up that is not kept: a process's first steps pay for
        imports, first kernels and the allocator, which would make the first setting look slow. The
        warm-up times a step; its time outside the steps is those first-time costs, which no trial pays
        again, so it is left out of the sizing."""
        warm = self._call(setting, min(WARMUP_STEPS, self.most), slots)
        per_step = _cost(warm, self.cfg.batch_size)[1]
        steps = _steps_in(self.budget_s / slots, (0.0, per_step), min(PROBE_STEPS, self.most))
        return self._keep(self._run(setting, steps, slots))

    def next(self, setting: Setting, slots: int, note: str = "") -> Trial:
        """`setting`'s trial in its share of what is left (`slots` trials still to run, this one
        included). A feed not yet tried runs a few steps first to cost its own; where a longer trial then
        fits, that short run is listed but not counted (it paid the DataLoader workers' start on few
        steps, which reads the feed as slow) and the trial runs at its length."""
        share = self.left() / slots
        new_feed = not _same_feed(setting, self.trials)
        trial = self._run(setting, self._steps(setting, share), slots)
        if new_feed and trial.samples_per_s and self._steps(setting, share, [trial]) > trial.steps:
            trial.note = SIZING
            self._keep(trial)
            trial = self._run(setting, self._steps(setting, self.left() / slots), slots)
        trial.note = trial.note or note
        return self._keep(trial)

    def _steps(self, setting: Setting, share_s: float, also: list[Trial] | None = None) -> int:
        return _sized(setting, [*self.trials, *(also or [])], share_s, self.cfg.batch_size, self.most)

    def _run(self, setting: Setting, steps: int, slots: int) -> Trial:
        """The trial of `setting`, or a skipped one when a typical trial would not fit in what is left."""
        if self.trials and _typical(self.trials) > self.left():
            return Trial(setting, note="skipped: past the tuning budget")
        return self._call(setting, steps, slots)

    def _call(self, setting: Setting, steps: int, slots: int) -> Trial:
        """A compiled setting in a child bounded by what is left once the other trials have their share."""
        if setting.compile == EAGER:
            return run_trial(self.workload, self.cfg, setting, steps, self.data_root)
        reserve = _typical(self.trials) * (slots - 1)
        return run_isolated(self.workload, self.cfg, setting, steps, self.data_root, self.left() - reserve)

    def _keep(self, trial: Trial) -> Trial:
        self.trials.append(trial)
        return trial


def _say_skipped(workload: str, trials: list[Trial], budget_s: float, spent_s: float, say: Any) -> None:
    """The one line that says the budget was too small, where it was."""
    skipped = sum(t.note.startswith("skipped") for t in trials)
    if skipped:
        slots = sum(t.note != SIZING for t in trials)
        say(
            f"tune {workload}: {skipped} of {slots} trials skipped, as they did not fit in "
            f"tune_budget_s={budget_s:g} ({spent_s:.0f} s spent); raise it to run them all"
        )


def _steps_in(share_s: float, cost: tuple[float, float], most: int) -> int:
    """How many steps fit in `share_s` seconds at `cost` (seconds outside the steps, seconds a step), at
    least MIN_STEPS and at most `most`."""
    overhead, per_step = cost
    return min(most, max(MIN_STEPS, int((share_s - overhead) / max(per_step, 1e-6))))


def _cost(trial: Trial, batch_size: int) -> tuple[float, float]:
    """(seconds `trial` spent outside its steps, seconds a step took): a step from the trial's own
    training rate, the rest from its wall time (the wall time over the steps would count building the
    model and data as stepping)."""
    if trial.samples_per_s and trial.steps:
        per_step = batch_size / trial.samples_per_s
        return max(trial.seconds - per_step * trial.steps, 0.0), per_step
    return 0.0, trial.seconds / max(trial.steps, 1)


def _sized(setting: Setting, trials: list[Trial], share_s: float, batch_size: int, most: int) -> int:
    """Steps for `setting`'s trial in `share_s` seconds, costed from the nearest trial there is: its own
    first run, for a second run; else the last trial fed the same way (loader and workers set a step's
    cost more than threads do), as if a step took as many times longer as it has fewer threads; else,
    for a feed not yet tried, at the dearest cost so far and at most NEW_FEED_STEPS steps, which cost
    the feed itself."""
    ran = [t for t in trials if t.samples_per_s and t.steps]
    own = [t for t in ran if t.setting == setting and t.note != SIZING]
    if own:
        return _steps_in(share_s, _cost(own[-1], batch_size), most)
    same = _same_feed(setting, ran)
    if same:
        overhead, per_step = _cost(same[-1], batch_size)
        slower = max(same[-1].setting.threads / setting.threads, 1.0) if setting.threads else 1.0
        return _steps_in(share_s, (overhead, per_step * slower), most)
    costs = [_cost(t, batch_size) for t in ran] or [(0.0, 0.0)]
    dearest = (max(c[0] for c in costs), max(c[1] for c in costs))
    return _steps_in(share_s, dearest, min(NEW_FEED_STEPS, most))


def _said(trial: Trial, left: float) -> str:
    """A trial's line: its rate, or why it has none (`no figure: cut: not done in 40.0 s`)."""
    if trial.note.startswith("skipped"):
        return f"skipped, {fmt_s(max(left, 0))} of the budget left"
    why = trial.note if trial.note and trial.note != CONFIRMATION else NO_RATE
    rate = f"{fmt_count(trial.samples_per_s)} samples/s" if trial.samples_per_s else f"no figure: {why}"
    return f"{rate} ({fmt_s(trial.seconds)})"


def tuned_home(tracking_uri: str, workload: str, cfg: Any) -> str | None:
    """The experiment of the newest stored run of the same work as `cfg` (its work key: any setting),
    where the tuned run belongs: the report of those runs then finds it beside them. None where the
    store holds no run of that work (or cannot be read: the run that follows says why)."""
    from mlflow.exceptions import MlflowException  # deferred: the trials need no MLflow
    from mlflow.tracking import MlflowClient  # deferred: the trials need no MLflow

    try:
        client = MlflowClient(tracking_uri)
        ids = [e.experiment_id for e in client.search_experiments()]
        same = f"tags.`{tag('work_key')}` = '{work_key(workload, cfg)}' and tags.`{tag('workload')}` = '{workload}'"
        found = (
            client.search_runs(ids, same, max_results=1, order_by=["attributes.start_time DESC"])
            if ids
            else []
        )
        return client.get_experiment(found[0].info.experiment_id).name if found else None
    except (MlflowException, OSError):
        return None


def _same_feed(setting: Setting, trials: list[Trial]) -> list[Trial]:
    """The trials that ran fed as `setting` is (loader and workers)."""
    feed = (setting.loader, setting.num_workers)
    return [
        t for t in trials if t.samples_per_s and t.steps and (t.setting.loader, t.setting.num_workers) == feed
    ]


def _counted(t: Trial) -> bool:
    return bool(t.samples_per_s) and t.note != SIZING


def _rates(trials: list[Trial]) -> dict[Setting, list[float]]:
    """Each measured setting's samples/s, one per counted run, in the order the settings first ran."""
    rates: dict[Setting, list[float]] = {}
    for t in trials:
        if _counted(t):
            rates.setdefault(t.setting, []).append(t.samples_per_s or 0.0)
    return rates


def _scores(trials: list[Trial]) -> dict[Setting, float]:
    """Each measured setting's median samples/s over its counted runs, in the order they first ran."""
    return {setting: statistics.median(r) for setting, r in _rates(trials).items()}


def _typical(trials: list[Trial]) -> float:
    """What the next trial will likely take: the median of those that ran (one slow setting, such as
    every thread spinning against a busy neighbour, must not crowd the rest out)."""
    ran = [t.seconds for t in trials if _counted(t)]
    return statistics.median(ran) if ran else 0.0


def best(trials: list[Trial]) -> Trial:
    """The setting with the highest median over its runs, as one trial whose figure is that median;
    among the settings that ran twice where any did, as a single figure is the upward-biased kind the
    second runs are there to temper."""
    scores = _scores(trials)
    if not scores:
        raise UsageError(
            "no tuning trial finished within the budget; raise tune_budget_s", param="tune_budget_s"
        )
    twice = {s for s, r in _rates(trials).items() if len(r) > 1}
    if twice:
        scores = {s: v for s, v in scores.items() if s in twice}
    setting = max(scores, key=lambda s: scores[s])
    runs = [t for t in trials if t.setting == setting and _counted(t)]
    return Trial(setting, sum(t.steps for t in runs), scores[setting], sum(t.seconds for t in runs))


def trials_table(trials: list[Trial]) -> dict[str, list[Any]]:
    """The trials as an MLflow table (`tuning.json`): one row per trial, skipped ones included."""
    return {
        "threads": [t.setting.threads for t in trials],
        "loader": [t.setting.loader for t in trials],
        "num_workers": [t.setting.num_workers for t in trials],
        "channels_last": [t.setting.channels_last for t in trials],
        "compile": [t.setting.compile for t in trials],
        "precision": [t.setting.precision for t in trials],
        "steps": [t.steps for t in trials],
        "samples_per_s": [t.samples_per_s for t in trials],
        "seconds": [round(t.seconds, 3) for t in trials],
        "note": [t.note for t in trials],
    }


def tags(trials: list[Trial], chosen: Trial, budget_s: float) -> dict[str, str]:
    """What the measured run says about how it was chosen (devicebench.tuned*). `trials` counts the
    second runs too, not the short runs that sized a feed; `chosen_median_samples_per_s` is the chosen
    setting's median over its runs, the figure the measured run is held to. A compiled choice also says
    how fast the same setting ran uncompiled, where a trial measured it, so its compile time can be
    weighed against what it saves (`eager_median_samples_per_s`)."""
    ran = [t for t in trials if _counted(t)]
    out = {
        tag("tuned"): "true",
        tag("tuned.setting"): str(chosen.setting),
        tag("tuned.trials"): str(len(ran)),
        tag("tuned.chosen_median_samples_per_s"): f"{chosen.samples_per_s:.6g}",
        tag("tuned.budget_s"): f"{budget_s:g}",
        tag("tuned.reduced_precision"): str(chosen.setting.reduced_precision).lower(),
    }
    eager = _scores(trials).get(dataclasses.replace(chosen.setting, compile=EAGER))
    if chosen.setting.compile != EAGER and eager:
        out[tag("tuned.eager_median_samples_per_s")] = f"{eager:.6g}"
    return out


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _trial_child(given: str, back: str) -> None:
    """`run_isolated`'s child: one trial from the pickled arguments, its steps and rate back as JSON."""
    workload, cfg, setting, steps, data_root = pickle.loads(Path(given).read_bytes())
    trial = run_trial(workload, cfg, setting, steps, data_root)
    Path(back).write_text(json.dumps([trial.steps, trial.samples_per_s]))


if __name__ == "__main__":
    _trial_child(*sys.argv[1:3])
