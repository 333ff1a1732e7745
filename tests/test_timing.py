"""The timer synchronises before every clock read, warms up, repeats, and reports median and spread."""

from __future__ import annotations

import pytest
import torch

from devicebench.timing import Timer, TimingStats


class Recorder:
    """An injected clock and sync that record the order of calls."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.t = 0.0

    def clock(self) -> float:
        self.events.append("clock")
        self.t += 1.0
        return self.t

    def sync(self) -> None:
        self.events.append("sync")


def test_every_clock_read_follows_a_sync() -> None:
    rec = Recorder()
    timer = Timer("cpu", clock=rec.clock, sync=rec.sync, use_events=False)
    calls = []
    stats = timer.measure(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5
    assert len(stats.samples_s) == 3
    for i, e in enumerate(rec.events):
        if e == "clock":
            assert rec.events[i - 1] == "sync", rec.events
    assert rec.events.count("clock") == 6


def test_interval_is_synchronised_at_both_ends() -> None:
    rec = Recorder()
    timer = Timer("cpu", clock=rec.clock, sync=rec.sync, use_events=False)
    with timer.interval() as lap:
        rec.events.append("work")
    assert rec.events == ["sync", "clock", "work", "sync", "clock"]
    assert lap.elapsed_s == 1.0


def test_unsynchronised_reads_the_clock_before_draining() -> None:
    rec = Recorder()
    timer = Timer("cpu", clock=rec.clock, sync=rec.sync, use_events=False)
    timer.unsynchronised(lambda: rec.events.append("work"))
    assert rec.events == ["sync", "clock", "work", "clock", "sync"]


def test_stats_median_and_quantiles() -> None:
    s = TimingStats((5.0, 1.0, 3.0, 2.0, 4.0))
    assert s.median_s == 3.0
    assert s.min_s == 1.0 and s.max_s == 5.0
    assert s.p10_s == pytest.approx(1.4)
    assert s.p90_s == pytest.approx(4.6)
    assert s.as_dict()["repeats"] == 5


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        Timer("cpu").measure(lambda: None, repeats=0)
    with pytest.raises(ValueError):
        TimingStats(())


def test_real_cpu_timing_is_positive() -> None:
    a = torch.randn(64, 64)
    stats = Timer("cpu").measure(lambda: a @ a, warmup=1, repeats=3)
    assert all(s > 0 for s in stats.samples_s)


@pytest.mark.gpu
def test_cuda_events_time_queued_work() -> None:
    a = torch.randn(4096, 4096, device="cuda")
    timer = Timer("cuda")
    synced = timer.measure(lambda: a @ a, warmup=1, repeats=3).median_s
    naive = timer.unsynchronised(lambda: a @ a)
    assert synced > 0
    assert naive < synced  # the launch returns before the product is done
