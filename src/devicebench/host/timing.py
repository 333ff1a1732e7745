"""The one timer every workload uses: warm-up, synchronisation before every clock read, time-based repeats.

GPU work is queued asynchronously: reading a host clock right after launching a kernel measures the
launch, not the work. So every interval here ends with a device synchronisation (CUDA events recorded on
the *measured* device's stream, as airbench does), warm-up runs are thrown away (cuBLAS heuristics,
allocator growth, lazy init), and the result is the median of many samples with its spread.

How many samples is decided by time, like `torch.utils.benchmark.Timer.blocked_autorange`: keep
sampling until `min_time_s` of measured work *and* at least `repeats` samples, so a 0.2 ms product gets
hundreds of samples and an 8000² one a few. On a GPU one sample is a block of back-to-back calls between
two events (at least `block_s` of work, default 20 ms), because a lone small kernel from an idle stream
measures host dispatch and clock ramp-up, not the kernel. torch is imported lazily.

Why not `torch.utils.benchmark.Timer` (the comparison is in docs/measured.md): with little load the
two agree, but
- the NumPy side is timed in a process that has never loaded torch (workloads/matmul_series.py), and
  importing `torch.utils.benchmark` there costs seconds and loads libgomp beside OpenBLAS, the very
  pool the isolation keeps out;
- its samples are means of blocks of calls; ours on the CPU are single calls, and on a busy host a long
  block absorbs other processes' time slices where a median of single calls does not. Its one advantage
  is a lower floor per call, which only a sub-10 µs statement would notice;
- it sets torch to 1 thread unless `num_threads` is passed, and `adaptive_autorange` can run to its
  `max_run_time`;
- on a GPU it synchronises the *current* accelerator around host clock reads; we record CUDA events on
  the measured device's stream, which the contract above needs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devicebench.util.stats import quantile

if TYPE_CHECKING:
    import torch

GPU_BLOCK_S = 0.02  # one GPU sample covers at least this much work (a launch: microseconds of host)
MAX_SAMPLES = 10_000  # bounds a sub-microsecond function under a long min_time_s
MAX_CALLS_PER_SAMPLE = 100_000


@dataclass(frozen=True)
class TimingStats:
    """Repeated measurements of one thing: per-call seconds of each sample."""

    samples_s: tuple[float, ...]
    calls_per_sample: int = 1

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

    @property
    def samples(self) -> int:
        return len(self.samples_s)

    def as_dict(self) -> dict[str, float | int | list[float]]:
        return {
            "median_s": self.median_s,
            "p10_s": self.p10_s,
            "p90_s": self.p90_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "repeats": self.samples,
            "calls_per_sample": self.calls_per_sample,
            "samples_s": list(self.samples_s),
        }


def device_type(device: Any) -> str:
    """'cpu', 'cuda' or 'mps' from a torch.device or its string form, without importing torch."""
    return str(getattr(device, "type", device)).split(":", 1)[0]


def device_sync(device: Any) -> Callable[[], None]:
    """The function that waits for all queued work on `device` (a no-op on the CPU)."""
    kind = device_type(device)
    if kind not in ("cuda", "mps"):
        return lambda: None
    import torch  # lazy: the NumPy matmul process times its CPU series here and never loads torch

    if kind == "mps":
        return torch.mps.synchronize
    dev = torch.device(device)
    return lambda: torch.cuda.synchronize(dev)


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
        self.device = device
        self.kind = device_type(device)
        self._clock = clock
        self._sync = sync or device_sync(device)
        self._events = self.kind == "cuda" if use_events is None else use_events

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

    def _block(self, fn: Callable[[], object], calls: int) -> float:
        """Seconds per call of `calls` back-to-back calls, measured from idle to drained."""
        if self._events:
            import torch  # lazy: as in device_sync, this module stays torch-free at import

            self._sync()
            # Events go on the measured device's stream: the *current* device may be another GPU.
            stream = torch.cuda.current_stream(torch.device(self.device))
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(calls):
                fn()
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end) / 1000.0 / calls
        with self.interval() as lap:
            for _ in range(calls):
                fn()
        return lap.elapsed_s / calls

    def measure(
        self,
        fn: Callable[[], object],
        *,
        warmup: int = 1,
        repeats: int = 5,
        min_time_s: float = 0.0,
        block_s: float | None = None,
    ) -> TimingStats:
        """Warm up, then sample until `min_time_s` of measured time and at least `repeats` samples.

        `block_s` is the least work one sample covers (default: 20 ms on a GPU, one call on the CPU);
        the number of calls per sample is fixed from one timed call after warm-up, so every sample
        measures the same thing.
        """
        if repeats < 1 or warmup < 0 or not min_time_s >= 0 or not math.isfinite(min_time_s):
            raise ValueError("repeats must be >= 1, warmup >= 0 and min_time_s a finite number >= 0")
        block = (GPU_BLOCK_S if self._events else 0.0) if block_s is None else block_s
        for _ in range(warmup):
            fn()
        self._sync()
        calls = 1
        if block > 0:
            one = self._block(fn, 1)
            calls = max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(block / max(one, 1e-9))))
        samples: list[float] = []
        total = 0.0
        while len(samples) < repeats or (total < min_time_s and len(samples) < MAX_SAMPLES):
            s = self._block(fn, calls)
            samples.append(s)
            total += s * calls
        return TimingStats(tuple(samples), calls)

    def unsynchronised(self, fn: Callable[[], object]) -> float:
        """Time one call the naive way: start after a sync, stop *without* one.

        This is how the tutorial timed `torch.mm` on the GPU; it is logged beside the honest figure so a
        report can show how far the naive number under-reports. It is taken after warm-up, so it leaves
        out the cuBLAS setup the tutorial's first call also paid. The work is drained afterwards so it
        cannot leak into the next measurement.
        """
        self._sync()
        start = self._clock()
        fn()
        elapsed = self._clock() - start
        self._sync()
        return elapsed
