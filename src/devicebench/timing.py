"""The one timer every workload uses: warm-up, synchronisation before every clock read, repeats.

GPU work is queued asynchronously: reading a host clock right after launching a kernel measures the
launch, not the work. So every interval here ends with a device synchronisation (CUDA events on the GPU,
as airbench does), warm-up runs are thrown away (cuBLAS heuristics, allocator growth, lazy init), and
the result is the median of several repeats with its spread, never a single number.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from devicebench.stats import quantile


@dataclass(frozen=True)
class TimingStats:
    """Repeated measurements of one thing, in seconds."""

    samples_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples_s:
            raise ValueError("TimingStats needs at least one sample")

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def p10_s(self) -> float:
        return quantile(sorted(self.samples_s), 0.10)

    @property
    def p90_s(self) -> float:
        return quantile(sorted(self.samples_s), 0.90)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    def as_dict(self) -> dict[str, float | int | list[float]]:
        return {
            "median_s": self.median_s,
            "p10_s": self.p10_s,
            "p90_s": self.p90_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "repeats": len(self.samples_s),
            "samples_s": list(self.samples_s),
        }


def device_sync(device: torch.device | str) -> Callable[[], None]:
    """The function that waits for all queued work on `device` (a no-op on the CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return lambda: None


@dataclass
class Lap:
    """One synchronised interval; `elapsed_s` is set when the `with` block ends."""

    elapsed_s: float = field(default=float("nan"))


class Timer:
    """Synchronised clock reads and repeated measurements on one device.

    `clock` and `sync` are injectable so tests can check that every clock read is preceded by a
    synchronisation without a GPU.
    """

    def __init__(
        self,
        device: torch.device | str = "cpu",
        *,
        clock: Callable[[], float] = time.perf_counter,
        sync: Callable[[], None] | None = None,
        use_events: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self._clock = clock
        self._sync = sync or device_sync(self.device)
        self._events = self.device.type == "cuda" if use_events is None else use_events

    def now(self) -> float:
        """A clock read after all queued device work has finished."""
        self._sync()
        return self._clock()

    @contextmanager
    def interval(self) -> Iterator[Lap]:
        """Time a block of (possibly asynchronous) device work, synchronised at both ends."""
        lap = Lap()
        start = self.now()
        yield lap
        lap.elapsed_s = self.now() - start

    def _once(self, fn: Callable[[], object]) -> float:
        if self._events:
            self._sync()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        with self.interval() as lap:
            fn()
        return lap.elapsed_s

    def measure(self, fn: Callable[[], object], *, warmup: int = 1, repeats: int = 5) -> TimingStats:
        """Run `fn` `warmup` times untimed, then `repeats` times timed; return all samples."""
        if repeats < 1 or warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        for _ in range(warmup):
            fn()
        self._sync()
        return TimingStats(tuple(self._once(fn) for _ in range(repeats)))

    def unsynchronised(self, fn: Callable[[], object]) -> float:
        """Time one call the naive way: start after a sync, stop *without* one.

        This is how the tutorial timed `torch.mm` on the GPU; it is logged beside the honest figure so a
        report can show how far the naive number under-reports. The work is drained afterwards so it
        cannot leak into the next measurement.
        """
        self._sync()
        start = self._clock()
        fn()
        elapsed = self._clock() - start
        self._sync()
        return elapsed
