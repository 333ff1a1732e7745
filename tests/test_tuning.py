"""How `devicebench tune` chooses: the order of its trials, its budget, and the second look at the leaders.

The trials themselves are real training runs (tests/test_cifar_mlflow.py runs one tuning end to end);
here `run_trial` is replaced by a table of rates and a clock that a trial moves on, so the choice can be
held to exact figures. The case it guards: the top of many short trials is biased upward (on the H100
host the measured run came in at 0.85 of its best trial), so the fastest settings run again and each is
judged by the median of its runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from devicebench.config.parts import Numerics, Threaded, Training
from devicebench.config.workloads import CifarConfig, UNetConfig
from devicebench.errors import UsageError
from devicebench.run import trial_plan, tuning
from devicebench.run.trial_plan import Setting
from devicebench.run.tuning import CONFIRM, CONFIRMATION, SIZING, Trial

TWO_TENSOR, ONE_TENSOR = Setting(2, "tensor", 0), Setting(1, "tensor", 0)
TWO_LOADER = Setting(2, "dataloader", 0)  # unet's first setting: it has no loader=tensor
CHANGES = 2  # cifar's second stage on a CPU: NHWC, then compiled


class Clock:
    """tuning's `time`: only perf_counter, moved on by each fake trial."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _fake_trials(
    monkeypatch: pytest.MonkeyPatch,
    rates: dict[Setting, list[float]],
    step_s: float | Callable[[Setting], float],
    setup_s: float = 0.0,
) -> list[tuple[Setting, int]]:
    """Each call of run_trial takes `setup_s` + `step_s` a step on the clock and returns the setting's next
    rate (the last one again when they run out; for a setting not listed, a batch per step); the (setting, steps) of
    each call, the warm-up first."""
    clock, calls = Clock(), []
    monkeypatch.setattr(tuning, "time", clock)

    def run_trial(workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path) -> Trial:
        step = step_s(setting) if callable(step_s) else step_s
        took = setup_s + step * steps
        clock.now += took
        calls.append((setting, steps))
        left = rates.get(setting, [cfg.batch_size / step])  # a setting not listed trains at its step time
        rate = left.pop(0) if len(left) > 1 else left[0]
        return Trial(setting, steps, rate, took)

    def run_isolated(
        workload: str, cfg: Any, setting: Setting, steps: int, data_root: Path, limit_s: float
    ) -> Trial:
        return run_trial(workload, cfg, setting, steps, data_root)

    monkeypatch.setattr(tuning, "run_trial", run_trial)
    monkeypatch.setattr(tuning, "run_isolated", run_isolated)
    return calls


def test_the_fastest_two_run_again_and_the_median_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 threads looked fastest once (3,000) and came in at 2,000 the second time; 1 thread held 2,900
    then 2,950: the median picks 1 thread, and the figure the measured run is held to is its median.
    Between the two stages' trials, NHWC and compiling are each tried from the leader (2 threads) and
    kept out (400 a second: slower)."""
    rates = {TWO_TENSOR: [400.0, 3000.0, 2000.0], ONE_TENSOR: [2900.0, 2950.0]}  # 400: the warm-up
    calls = _fake_trials(monkeypatch, rates, step_s=0.01)
    said: list[str] = []
    every = tuning.tune("cifar", CifarConfig(device="cpu"), 60.0, 2, Path("."), say=said.append)
    trials = [t for t in every if t.note != SIZING]

    assert [t.setting for t in trials[:7]] == trial_plan.settings(True, 2)
    nhwc = dataclasses.replace(TWO_TENSOR, channels_last=True)
    assert [(t.setting, t.note) for t in trials[7:]] == [
        (nhwc, ""),
        (dataclasses.replace(TWO_TENSOR, compile="default"), ""),
        (TWO_TENSOR, CONFIRMATION),
        (ONE_TENSOR, CONFIRMATION),
    ]
    chosen = tuning.best(trials)
    assert chosen.setting == ONE_TENSOR and chosen.samples_per_s == pytest.approx(2925.0)
    # 60 s over 9 trials and 2 second runs: 5.45 s each, so at 0.01 s a step the first trial takes its
    # most (30 steps), each other feed (DataLoader with 0, 2, 1 workers) first runs 3 steps to cost its
    # own (not counted: a short run pays the DataLoader's start) and then, like the rest and the second
    # runs, the most there is (300)
    assert calls[0] == (TWO_TENSOR, tuning.WARMUP_STEPS) and calls[1] == (TWO_TENSOR, tuning.PROBE_STEPS)
    assert [steps for _, steps in calls[2:]] == [3, 300, 3, 300, 300, 300, 300, 3, 300, 300, 300, 300, 300]
    assert [t.setting.num_workers for t in every if t.note == SIZING] == [0, 2, 1]
    assert len(said) == 11 and said[-1].startswith("tune cifar: [again 2/2] 1 thread, data in memory: 2,950")
    assert said[7].startswith("tune cifar: [8/9] 2 threads, data in memory, NHWC: 400 samples/s")
    assert said[-1].endswith("median of its runs 2,925")
    table = tuning.trials_table(every)
    assert table["note"][-CONFIRM:] == [CONFIRMATION] * CONFIRM and len(table["threads"]) == 14
    assert table["compile"][-3:] == ["default", "none", "none"] and table["channels_last"][-4] is True
    tags = tuning.tags(every, chosen, 60.0)
    assert tags["devicebench.tuned.setting"] == "1 thread, data in memory"
    assert tags["devicebench.tuned.chosen_median_samples_per_s"] == "2925"
    assert tags["devicebench.tuned.trials"] == "11"
    assert tags["devicebench.tuned.reduced_precision"] == "false"


def test_past_the_budget_the_rest_and_the_second_runs_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 10 s budget is 0.9 s a trial: at 0.5 s a step and 0.5 s of setup every trial takes 2 steps (no
    fewer), 1.5 s; the warm-up and five trials fit, the other two, the two changes of the second stage
    and both second runs are listed as skipped, the choice is made from the figures there are, and the
    last line says what to raise."""
    rates = {ONE_TENSOR: [4000.0]}
    calls = _fake_trials(monkeypatch, rates, step_s=0.5, setup_s=0.5)
    said: list[str] = []
    trials = tuning.tune("cifar", CifarConfig(device="cpu"), 10.0, 2, Path("."), say=said.append)

    assert {steps for _, steps in calls} == {tuning.MIN_STEPS}
    ran = [t for t in trials if t.samples_per_s]
    assert len(trials) == 11 and len(ran) == 5 and all(t.note.startswith("skipped") for t in trials[5:])
    assert sum(t.seconds for t in trials) == 5 * 1.5  # five trials of 1.5 s ran; a skipped one took no time
    assert tuning.best(trials).setting == ONE_TENSOR
    assert said[-2] == "tune cifar: [again 2/2] 2 threads, data in memory: skipped, 1.00 s of the budget left"
    assert said[-1] == (
        "tune cifar: 6 of 11 trials skipped, as they did not fit in tune_budget_s=10 (9 s spent); "
        "raise it to run them all"
    )


def test_a_model_slower_than_its_share_runs_the_warm_up_and_one_short_trial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full UNet on this 2-core VM takes ~25 s a step: with 60 s the warm-up (2 steps) and one trial
    of 2 steps run, about 100 s, and nothing more (its one second run is skipped too); before, a 10-step
    warm-up and a 30-step first trial took some 1,000 s of a 60 s budget."""
    calls = _fake_trials(monkeypatch, {}, step_s=25.0)
    said: list[str] = []
    trials = tuning.tune("unet", UNetConfig(device="cpu"), 60.0, 2, Path("."), say=said.append)

    assert calls == [(TWO_LOADER, 2), (TWO_LOADER, 2)]
    assert [t.samples_per_s is not None for t in trials] == [True] + [False] * 6  # NHWC too; never compiled
    assert said[-1].startswith("tune unet: 6 of 7 trials skipped, as they did not fit in tune_budget_s=60")


def test_slow_settings_shorten_the_trials_after_them_so_the_second_runs_still_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 cores: 19 settings and two changes, the first (16 threads) the fastest per step, one thread 16x
    slower. Sized
    by the first trial alone, the slow settings overran their shares and the budget cut the second runs,
    the one thing they are there for; sized by what is left and the median step, every trial and both
    second runs fit, and the budget holds to within one trial."""
    calls = _fake_trials(monkeypatch, {}, step_s=lambda s: 0.002 * 16 / s.threads, setup_s=0.05)
    every = tuning.tune("cifar", CifarConfig(device="cpu"), 60.0, 16, Path("."), say=lambda _: None)
    trials = [t for t in every if t.note != SIZING]

    assert len(trials) == 19 + CHANGES + CONFIRM and all(t.samples_per_s for t in trials), [
        t.note for t in trials
    ]
    assert [t.note for t in trials[-CONFIRM:]] == [CONFIRMATION] * CONFIRM
    assert sum(t.seconds for t in every) + 0.05 + 2 * 0.002 <= 60.0 + max(t.seconds for t in every)
    assert len({steps for _, steps in calls[2:]}) > 1, "trial lengths follow what is left"


def test_a_feed_not_yet_tried_is_not_sized_at_the_last_feeds_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 cores, batch 64: data in memory at ~2,000 img/s, the DataLoader at ~250 (the H100 host's
    figures). Costed from the in-memory trial before it, the first DataLoader trial ran 19 s of a 2.9 s
    share and the second runs were cut; now a new feed first runs 3 steps to cost its own."""

    def step(s: Setting) -> float:
        return 64 / (2000.0 if s.loader == "tensor" else 250.0)

    _fake_trials(monkeypatch, {}, step_s=step, setup_s=0.5)
    trials = tuning.tune(
        "cifar", CifarConfig(device="cpu", batch_size=64), 60.0, 16, Path("."), say=lambda _: None
    )

    first_loader = next(t for t in trials if t.setting.loader == "dataloader")
    assert first_loader.steps == tuning.NEW_FEED_STEPS and first_loader.seconds < 3.2
    share = 60.0 / (
        19 + CHANGES + CONFIRM
    )  # 2.9 s: no trial takes twice that (what is left late is shared by fewer)
    assert first_loader.note == SIZING and max(t.seconds for t in trials) < 2 * share
    counted = [t for t in trials if t.note != SIZING]
    assert all(t.samples_per_s for t in counted[:19]), "every setting ran"
    assert (
        CONFIRMATION in [t.note for t in counted[19 + CHANGES :]] and sum(t.seconds for t in trials) <= 60.0
    )


def test_fewer_threads_are_costed_as_slower_and_a_second_run_as_its_own_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 cores, batch 64, a step in memory 0.032 s at 16 threads and 16x that at 1 (the DataLoader at
    ~250 img/s whatever the threads, as a review's simulation had it): costed from the
    last trial fed the same way without its threads, the 8-, 4- and 2-thread trials ran 10-12 s of a
    6.7 s share and both second runs were cut; and a leader's second run, costed from the 1-thread
    trial, got 34 steps where its first had 300."""

    def step(s: Setting) -> float:
        return 0.032 * 16 / s.threads if s.loader == "tensor" else 64 / 250  # the DataLoader: its own pace

    _fake_trials(monkeypatch, {}, step_s=step, setup_s=0.5)
    trials = tuning.tune(
        "cifar", CifarConfig(device="cpu", batch_size=64), 60.0, 16, Path("."), say=lambda _: None
    )

    counted = [t for t in trials if t.note != SIZING]
    assert [t.note for t in counted[19 + CHANGES :]] == [CONFIRMATION] * CONFIRM
    first, again = (
        next(t for t in counted if t.setting == counted[19 + CHANGES].setting and t.note == n)
        for n in ("", CONFIRMATION)
    )
    assert again.steps >= first.steps, "sized as its own first run"
    assert (
        max(t.seconds for t in trials) < 2 * 60.0 / (19 + CHANGES + CONFIRM)
        and sum(t.seconds for t in trials) <= 60.0
    )


def test_the_choice_is_made_among_the_settings_that_ran_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ran 100 then 90, B 99 then 93, C once at 98: C's single figure is as biased as A's first was,
    so B (median 96) is chosen, with its median as the figure the measured run is held to."""
    a, b, c = Setting(2, "tensor", 0), Setting(2, "dataloader", 0), Setting(1, "tensor", 0)
    trials = [
        Trial(a, 100, 100.0, 1.0),
        Trial(b, 100, 99.0, 1.0),
        Trial(c, 100, 98.0, 1.0),
        Trial(a, 100, 90.0, 1.0, CONFIRMATION),
        Trial(b, 100, 93.0, 1.0, CONFIRMATION),
    ]
    chosen = tuning.best(trials)
    assert chosen.setting == b and chosen.samples_per_s == 96.0
    assert tuning.best(trials[:3]).setting == a, "with no second runs, the single figures are all there is"


def test_no_figure_at_all_is_a_usage_error_naming_the_budget() -> None:
    with pytest.raises(UsageError, match="raise tune_budget_s"):
        tuning.best([Trial(TWO_TENSOR, note="skipped: past the tuning budget")])


@pytest.mark.e2e
def test_unet_tunes_for_real_with_the_dataloader_only(tmp_path: Path) -> None:
    """Real trials of a tiny UNet (no replaced parts): unet has no `loader` parameter, and the tuning
    once set it on every trial, so `devicebench tune unet` failed before its first step."""
    from devicebench.config.fields import build_config

    params = {"data": "synthetic", "base_channels": "4", "image_size": "32", "batch_size": "4", "epochs": "1"}
    cfg = build_config(UNetConfig, {**params, "train_limit": "16", "val_limit": "4", "device": "cpu"})
    said: list[str] = []
    every = tuning.tune("unet", cfg, 90.0, 2, tmp_path, say=said.append)  # 8 trials of ~1-5 s each
    trials = [t for t in every if t.note != SIZING]

    assert {t.setting.loader for t in trials} == {"dataloader"} and len(trials) == 5 + 1 + CONFIRM  # NHWC
    # how many fit the budget is the machine's to say (a trial took ~12 s at load 8); each that ran has
    # its figure, and the first always runs: the fault was a tune that failed before its first step
    ran = [t for t in trials if not t.note.startswith("skipped")]
    assert ran and ran[0] is trials[0] and all(t.samples_per_s for t in ran), said
    assert max(t.steps for t in trials) <= 4, "a trial trains no more than the run: 16 images, 4 a step"
    chosen = tuning.best(trials)
    measured = chosen.setting.applied(cfg)
    assert (measured.cpu_threads, measured.num_workers) == (
        chosen.setting.threads,
        chosen.setting.num_workers,
    )
    assert not hasattr(measured, "loader")


def test_a_setting_is_said_in_plain_words() -> None:
    assert str(Setting(1, "dataloader", 1)) == "1 thread, DataLoader, 1 worker"  # was "1 workers"
    assert str(Setting(2, "dataloader", 0)) == "2 threads, DataLoader, 0 workers"
    assert str(Setting(4, "tensor", 0)) == "4 threads, data in memory"


def test_on_a_gpu_it_tries_feeding_then_nhwc_compile_and_cuda_graphs_then_precision_where_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trial plan on a GPU, checked on the CPU with the device's capability given (9.0: an H100 or
    H200): feeding with torch's threads left as configured, then from the leader NHWC, compiled,
    compiled with CUDA graphs, and bf16 and fp16 autocast only with tune_precision; a config that is
    already NHWC is not tried as NHWC again."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda = torch.device("cuda", 0)
    first, todo = trial_plan.trial_plan(CifarConfig(device="cuda:0"), cuda, 16, tune_precision=True)
    assert [str(s) for s in first] == [
        "data in memory",
        "DataLoader, 0 workers",
        "DataLoader, 2 workers",
        "DataLoader, 16 workers",
    ]
    assert todo == [
        ("channels_last", True),
        ("compile", "default"),
        ("compile", "reduce-overhead"),
        ("precision", "bf16"),
        ("precision", "fp16"),
    ]
    _, plain = trial_plan.trial_plan(CifarConfig(device="cuda:0", channels_last=True), cuda, 16)
    assert plain == [("compile", "default"), ("compile", "reduce-overhead")], "precision only where asked"
    _, unet = trial_plan.trial_plan(UNetConfig(device="cuda:0"), cuda, 16, tune_precision=True)
    assert unet == [("channels_last", True), ("precision", "bf16"), ("precision", "fp16")], "unet: no compile"
    graphs = dataclasses.replace(first[0], compile="reduce-overhead", precision="bf16")
    assert str(graphs) == "data in memory, compiled with CUDA graphs, bf16 autocast (reduced precision)"
    applied = graphs.applied(CifarConfig(device="cuda:0"))
    assert (applied.compile, applied.compile_mode, applied.precision) == (True, "reduce-overhead", "bf16")
    assert applied.cpu_threads == 0, "a GPU side's threads are left as configured"


def test_on_a_gpu_the_whole_search_keeps_what_is_faster_within_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU search with fake trials: launch-bound at batch 4, so data in memory leads, NHWC is slower
    and dropped, compiling helps and CUDA graphs help more; each change is tried from the leader at that
    point (CUDA graphs from the compiled setting, fp16 from the bf16 one), and the choice needs reduced
    precision, which its tags say."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    mem = Setting(0, "tensor", 0)
    graphs = dataclasses.replace(mem, compile="reduce-overhead")
    rates = {
        mem: [900.0, 1000.0],
        dataclasses.replace(mem, channels_last=True): [950.0],
        dataclasses.replace(mem, compile="default"): [1500.0],
        graphs: [4000.0, 3900.0],
        dataclasses.replace(graphs, precision="bf16"): [4500.0, 4400.0],
        dataclasses.replace(graphs, precision="fp16"): [4300.0],
    }
    _fake_trials(monkeypatch, rates, step_s=lambda s: 4 / 1000.0 if s.loader == "tensor" else 4 / 300.0)
    cfg = CifarConfig(device="cuda:0")
    said: list[str] = []
    every = tuning.tune("cifar", cfg, 120.0, 16, Path("."), say=said.append, tune_precision=True)
    counted = [t for t in every if t.note != SIZING]

    assert [t.setting for t in counted[4:9]] == [
        dataclasses.replace(mem, channels_last=True),
        dataclasses.replace(mem, compile="default"),
        graphs,
        dataclasses.replace(graphs, precision="bf16"),
        dataclasses.replace(graphs, precision="fp16"),
    ]
    chosen = tuning.best(every)
    assert chosen.setting == dataclasses.replace(graphs, precision="bf16")
    tags = tuning.tags(every, chosen, 120.0)
    assert tags["devicebench.tuned.reduced_precision"] == "true"
    assert tags["devicebench.tuned.setting"].endswith("bf16 autocast (reduced precision)")
    assert "devicebench.tuned.eager_median_samples_per_s" not in tags, "no uncompiled bf16 trial ran"
    assert sum(t.seconds for t in every) <= 120.0


def test_a_compile_that_outlasts_its_time_is_cut_and_the_search_goes_on(tmp_path: Path) -> None:
    """A compiled trial runs in a child bounded by what is left: given 0.5 s, a real child (which
    cannot even import torch in that time) is ended, listed as cut, and counts as no figure."""
    cfg = CifarConfig(device="cpu", data="synthetic", train_limit=8, test_limit=4, batch_size=4)
    compiled = Setting(1, "tensor", 0, compile="default")
    started = __import__("time").perf_counter()
    trial = tuning.run_isolated("cifar", cfg, compiled, 2, tmp_path, 0.5)
    assert trial.note.startswith("cut: not done in") and trial.samples_per_s is None
    assert __import__("time").perf_counter() - started < 5.0
    skipped = tuning.run_isolated("cifar", cfg, compiled, 2, tmp_path, 0.0)
    assert skipped.note == "skipped: past the tuning budget"


def test_a_trial_without_a_figure_says_why() -> None:
    """`[9/9] … compiled: no figure (41.59 s)` kept its reason in the trials table but never said it."""
    compiled = Setting(1, "tensor", 0, compile="default")
    cut = Trial(compiled, 0, None, 41.59, "cut: not done in 40.00 s")
    assert tuning._said(cut, 10.0) == "no figure: cut: not done in 40.00 s (41.59 s)"
    failed = Trial(compiled, 0, None, 3.0, "failed: RuntimeError: no C compiler")
    assert tuning._said(failed, 10.0) == "no figure: failed: RuntimeError: no C compiler (3.00 s)"
    again = Trial(compiled, 4, None, 2.0, CONFIRMATION)
    assert tuning._said(again, 10.0) == f"no figure: {tuning.NO_RATE} (2.00 s)"
    assert tuning._said(Trial(compiled, 4, 812.0, 2.0), 10.0) == "812 samples/s (2.00 s)"


def test_the_tuned_run_goes_to_the_experiment_of_the_runs_of_its_work(
    mlflow_server, experiment_name: str
) -> None:
    """The demo's runs are in devicebench-demo; the tuned run went to the configured experiment, where
    the demo's report did not read it. It goes where the newest run of the same work is, any setting."""
    from mlflow.tracking import MlflowClient

    from devicebench.config.fields import work_key
    from devicebench.schema import tag

    cfg = CifarConfig(device="cpu", data="synthetic", batch_size=7, train_limit=777, test_limit=77)
    assert tuning.tuned_home(mlflow_server.url, "cifar", cfg) is None, "no run of this work stored yet"
    client = MlflowClient(mlflow_server.url)
    demo = client.create_experiment(f"{experiment_name}-demo")
    same = {tag("workload"): "cifar", tag("work_key"): work_key("cifar", cfg)}
    client.set_terminated(client.create_run(demo, tags=same).info.run_id)
    tuned = Setting(1, "tensor", 0, channels_last=True).applied(cfg)
    assert tuning.tuned_home(mlflow_server.url, "cifar", tuned) == f"{experiment_name}-demo"
    other = dataclasses.replace(cfg, batch_size=9)
    assert tuning.tuned_home(mlflow_server.url, "cifar", other) is None


@dataclasses.dataclass(frozen=True)
class _Rows(Training, Numerics, Threaded):
    """A training config that no DataLoader feeds (not `Fed`) and names its held-out split its own way:
    what a fourth workload composed of the existing parts may be."""

    EVAL_LIMIT: ClassVar[str] = "holdout_rows"

    device: str = "cpu"
    seed: int = 0
    holdout_rows: int = 0


def test_a_config_no_dataloader_feeds_tries_threads_only_and_shortens_its_own_eval_limit() -> None:
    import torch

    first, todo = trial_plan.trial_plan(_Rows(), torch.device("cpu"), 2)
    assert {(s.loader, s.num_workers) for s in first} == {("tensor", 0)}  # the threads vary, nothing else
    assert [t for t in first if t.threads] and todo == [("channels_last", True)]  # not `Compiled`
    short = _Rows(train_limit=6).shortened(8, 4)
    assert (short.epochs, short.train_limit, short.holdout_rows) == (1, 6, 4)
