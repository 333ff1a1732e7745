"""How `devicebench tune` chooses: the order of its trials, its budget, and the second look at the leaders.

The trials themselves are real training runs (tests/test_cifar_mlflow.py runs one tuning end to end);
here `run_trial` is replaced by a table of rates and a clock that a trial moves on, so the choice can be
held to exact figures. The case it guards: the top of many short trials is biased upward (on the H100
host the measured run came in at 0.85 of its best trial), so the fastest settings run again and each is
judged by the median of its runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devicebench.errors import UsageError
from devicebench.run import tuning
from devicebench.run.tuning import CONFIRM, CONFIRMATION, Setting, Trial

TWO_TENSOR, ONE_TENSOR = Setting(2, "tensor", 0), Setting(1, "tensor", 0)


class Clock:
    """tuning's `time`: only perf_counter, moved on by each fake trial."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _fake_trials(
    monkeypatch: pytest.MonkeyPatch, rates: dict[Setting, list[float]], seconds: float = 1.0
) -> list[tuple[Setting, int]]:
    """Each call of run_trial takes `seconds` on the clock and returns the setting's next rate (the last
    one again when they run out, 1,000 for a setting not listed); the (setting, steps) of each call."""
    clock, calls = Clock(), []
    monkeypatch.setattr(tuning, "time", clock)

    def run_trial(workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path) -> Trial:
        clock.now += seconds
        calls.append((setting, steps))
        left = rates.get(setting, [1000.0])
        rate = left.pop(0) if len(left) > 1 else left[0]
        return Trial(setting, steps, rate, seconds)

    monkeypatch.setattr(tuning, "run_trial", run_trial)
    return calls


def test_the_fastest_two_run_again_and_the_median_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 threads looked fastest once (3,000) and came in at 2,000 the second time; 1 thread held 2,900
    then 2,950: the median picks 1 thread, and the figure the measured run is held to is its median."""
    rates = {TWO_TENSOR: [9.0, 3000.0, 2000.0], ONE_TENSOR: [2900.0, 2950.0]}  # 9.0: the untimed warm-up
    calls = _fake_trials(monkeypatch, rates)
    said: list[str] = []
    trials = tuning.tune("cifar", object(), 60.0, 2, Path("."), say=said.append)

    assert [t.setting for t in trials[:7]] == tuning.settings("cifar", 2)
    assert [(t.setting, t.note) for t in trials[7:]] == [
        (TWO_TENSOR, CONFIRMATION),
        (ONE_TENSOR, CONFIRMATION),
    ]
    chosen = tuning.best(trials)
    assert chosen.setting == ONE_TENSOR and chosen.samples_per_s == pytest.approx(2925.0)
    # the first trial is the short probe; every other trial, and both second runs, take the probe's share
    # of the budget (60 s over 7 trials and 2 second runs at 1 s per 30 steps: 200 steps)
    assert calls[0][1] == tuning.MIN_STEPS and calls[1] == (TWO_TENSOR, tuning.PROBE_STEPS)
    assert {steps for _, steps in calls[2:]} == {200}
    assert len(said) == 9 and said[-1].startswith("tune cifar: [again 2/2] 1 thread, data in memory: 2,950")
    assert said[-1].endswith("median of its runs 2,925")
    table = tuning.table(trials)
    assert table["note"][7:] == [CONFIRMATION] * CONFIRM and len(table["threads"]) == 9
    tags = tuning.tags(trials, chosen, 60.0)
    assert tags["devicebench.cpu.tuned.setting"] == "1 thread, data in memory"
    assert tags["devicebench.cpu.tuned.best_trial_samples_per_s"] == "2925"
    assert tags["devicebench.cpu.tuned.trials"] == "9"


def test_past_the_budget_the_rest_and_the_second_runs_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 s at 2 s a trial: the warm-up and four trials fit, the other three and both second runs are
    listed as skipped, and the choice is made from the figures there are."""
    rates = {Setting(1, "tensor", 0): [4000.0]}
    _fake_trials(monkeypatch, rates, seconds=2.0)
    said: list[str] = []
    trials = tuning.tune("cifar", object(), 10.0, 2, Path("."), say=said.append)

    ran = [t for t in trials if t.samples_per_s]
    assert len(trials) == 9 and len(ran) == 4
    assert all(t.note.startswith("skipped") for t in trials[4:])
    assert sum(t.seconds for t in trials) <= 10.0
    assert tuning.best(trials).setting == Setting(1, "tensor", 0)
    assert said[-1] == "tune cifar: [again 2/2] 2 threads, data in memory: skipped, 0.0 s of the budget left"


def test_no_figure_at_all_is_a_usage_error_naming_the_budget() -> None:
    with pytest.raises(UsageError, match="raise tune_budget_s"):
        tuning.best([Trial(TWO_TENSOR, note="skipped: past the tuning budget")])
