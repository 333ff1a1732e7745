"""The timer synchronises before every clock read, warms up, repeats, and reports median and spread."""

from __future__ import annotations

import pytest
import torch

from devicebench.host.timing import Timer, TimingStats


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


class Work:
    """A fake device: `fn` does `cost_s` of work on an injected clock, so sample counts are exact."""

    def __init__(self, cost_s: float) -> None:
        self.t, self.cost_s, self.calls = 0.0, cost_s, 0

    def clock(self) -> float:
        return self.t

    def fn(self) -> None:
        self.calls += 1
        self.t += self.cost_s


def test_fast_points_get_samples_until_the_minimum_time() -> None:
    w = Work(0.001)
    stats = Timer("cpu", clock=w.clock, sync=lambda: None, use_events=False).measure(
        w.fn, warmup=1, repeats=5, min_time_s=0.2
    )
    assert 199 <= stats.samples <= 201  # 0.2 s of 1 ms calls
    assert stats.calls_per_sample == 1
    assert stats.median_s == pytest.approx(0.001)
    assert stats.as_dict()["repeats"] == stats.samples


def test_slow_points_get_the_least_number_of_repeats() -> None:
    w = Work(2.0)
    stats = Timer("cpu", clock=w.clock, sync=lambda: None, use_events=False).measure(
        w.fn, warmup=1, repeats=3, min_time_s=0.2
    )
    assert stats.samples == 3 and w.calls == 4  # one warm-up, three samples


def test_a_sample_is_a_block_of_calls_when_one_call_is_too_short_to_time() -> None:
    """The GPU half of the autorange: 10 µs calls are timed 2000 at a time (≥ 20 ms per sample)."""
    w = Work(10e-6)
    stats = Timer("cpu", clock=w.clock, sync=lambda: None, use_events=False).measure(
        w.fn, warmup=0, repeats=5, block_s=0.02
    )
    assert stats.calls_per_sample == 2000
    assert stats.samples == 5
    assert stats.median_s == pytest.approx(10e-6)
    assert w.calls == 1 + 5 * 2000  # one call sizes the block


def test_the_sample_count_is_bounded_for_near_free_functions() -> None:
    w = Work(1e-9)
    stats = Timer("cpu", clock=w.clock, sync=lambda: None, use_events=False).measure(
        w.fn, warmup=0, repeats=1, min_time_s=10.0
    )
    assert stats.samples == 10_000


def test_non_finite_minimum_time_is_refused() -> None:
    with pytest.raises(ValueError):
        Timer("cpu").measure(lambda: None, min_time_s=float("nan"))


class FakeCuda:
    """torch.cuda's Event and current_stream, recording which stream each event is recorded on."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def current_stream(self, device: torch.device) -> str:
        return f"stream({device})"

    def Event(self, enable_timing: bool = False):  # torch.cuda spells it so
        log = self.log

        class Ev:
            def record(self, stream: str | None = None) -> None:
                log.append(f"record {stream}")

            def synchronize(self) -> None:
                log.append("event sync")

            def elapsed_time(self, other: object) -> float:
                return 30.0  # ms for the whole block

        return Ev()


def test_events_are_recorded_on_the_measured_gpus_stream_around_the_whole_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On cuda:1 the events must sit on cuda:1's stream: on the current device (GPU 0) they would time
    an idle GPU. A block of calls sits between the two events, and the end event is waited for."""
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", fake.current_stream)
    timer = Timer("cuda:1", sync=lambda: fake.log.append("sync"), use_events=True)
    stats = timer.measure(lambda: fake.log.append("work"), warmup=0, repeats=1, block_s=0.0)
    assert fake.log == [
        "sync",
        "sync",
        "record stream(cuda:1)",
        "work",
        "record stream(cuda:1)",
        "event sync",
    ]
    assert stats.median_s == pytest.approx(0.03)


@pytest.mark.gpu
def test_small_gpu_products_are_timed_in_blocks_on_the_right_gpu() -> None:
    """n=1024 is microseconds of kernel: one sample holds many calls; on the last GPU (cuda:1 where two
    exist) the figure matches cuda:0's instead of timing an idle GPU 0."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    medians = []
    for dev in {torch.device("cuda", 0), last}:
        a = torch.randn(1024, 1024, device=dev)
        stats = Timer(dev).measure(lambda a=a: a @ a, warmup=3, repeats=5, min_time_s=0.2)
        assert stats.calls_per_sample > 1
        medians.append(stats.median_s)
    assert all(m > 1e-6 for m in medians)
    assert max(medians) / min(medians) < 2.0
