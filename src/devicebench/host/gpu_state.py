"""What the GPU did while a run trained: how busy NVML saw it, at what SM clock, and for how long power or
heat held its clocks down.

The same training can run 15 % faster in one fresh process than in the next on the same GPU, the bare
loop beside it too (docs/measured.md). A run that can move so much from one process to the next has to
say so, or a nightly regression check reads the swing as a
regression. These figures tell the usual causes apart after the fact: a GPU that ran kernels for much
less than the whole step is host-bound (its speed follows the host CPU's, and swings with it); a mean SM
clock under its maximum, or time under a power or thermal cap, is the GPU slowed by its own limits.

NVML keeps the last seconds of utilization and clock samples itself, so reading them once after the
last epoch costs the training loop nothing: no thread, no call per step. Best effort: without NVML, on a
MIG slice (no utilization per slice) or with an old driver there are fewer figures, never a failed run.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from devicebench.host.gpu_info import close_nvml, open_nvml
from devicebench.schema import (
    GPU_BUSY_SHARE,
    GPU_POWER_CAPPED_S,
    GPU_SM_CLOCK_MHZ,
    GPU_SM_CLOCK_SHARE,
    GPU_THERMAL_CAPPED_S,
)

_CAPS = ((GPU_POWER_CAPPED_S, "NVML_PERF_POLICY_POWER"), (GPU_THERMAL_CAPPED_S, "NVML_PERF_POLICY_THERMAL"))


@dataclass
class GpuWatch:
    """NVML opened on the run's GPU when training began, with what its counters said then."""

    nvml: Any
    handle: Any
    since_us: int  # NVML stamps its samples in microseconds of the host's wall clock
    capped_ns: dict[str, int] = field(default_factory=dict)
    closed: bool = False

    def read(self) -> dict[str, float]:
        """The figures over the samples NVML kept since the watch began; NVML is closed after."""
        try:
            return {**self._busy_and_clock(), **self._capped()}
        finally:
            self.close()

    def close(self) -> None:
        """NVML shut down once: its init is counted, so a second shutdown would close another user's."""
        if not self.closed:
            self.closed = True
            close_nvml(self.nvml)

    def _samples(self, kind: str) -> list[float]:
        with contextlib.suppress(Exception):
            _, samples = self.nvml.nvmlDeviceGetSamples(self.handle, getattr(self.nvml, kind), self.since_us)
            return [float(s.sampleValue.uiVal) for s in samples]
        return []

    def _busy_and_clock(self) -> dict[str, float]:
        out: dict[str, float] = {}
        busy = self._samples("NVML_GPU_UTILIZATION_SAMPLES")
        if busy:
            out[GPU_BUSY_SHARE] = statistics.fmean(busy) / 100.0
        clocks = self._samples("NVML_PROCESSOR_CLK_SAMPLES")
        if clocks:
            out[GPU_SM_CLOCK_MHZ] = statistics.fmean(clocks)
            with contextlib.suppress(Exception):
                top = float(self.nvml.nvmlDeviceGetMaxClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
                if top > 0:
                    out[GPU_SM_CLOCK_SHARE] = out[GPU_SM_CLOCK_MHZ] / top
        return out

    def _capped(self) -> dict[str, float]:
        now = _capped_ns(self.nvml, self.handle)
        return {key: (now[key] - self.capped_ns[key]) / 1e9 for key in now if key in self.capped_ns}


def _capped_ns(nvml: Any, handle: Any) -> dict[str, int]:
    """NVML's running count of nanoseconds each cap has held the clocks down, by metric name."""
    out = {}
    for key, policy in _CAPS:
        with contextlib.suppress(Exception):
            out[key] = int(nvml.nvmlDeviceGetViolationStatus(handle, getattr(nvml, policy)).violationTime)
    return out


def watch(device: torch.device, *, nvml: ModuleType | Any = None, uuid: str | None = None) -> GpuWatch | None:
    """Begin watching `device` (call it just before the timed epochs); None off CUDA or without NVML.
    `nvml` and `uuid` are injectable so tests can run without a GPU."""
    opened = open_nvml(device, nvml=nvml, uuid=uuid)
    if opened is None:
        return None
    nvml, handle, _ = opened
    return GpuWatch(nvml, handle, int(time.time() * 1e6), _capped_ns(nvml, handle))


@contextlib.contextmanager
def watching(
    device: torch.device, *, nvml: ModuleType | Any = None, uuid: str | None = None
) -> Iterator[GpuWatch | None]:
    """`watch` over a `with` block: NVML is closed when it ends, read or not, so an epoch that raises
    leaves no NVML open in a process that goes on (a test, a notebook, any other caller of `fit`)."""
    opened = watch(device, nvml=nvml, uuid=uuid)
    try:
        yield opened
    finally:
        if opened is not None:
            opened.close()
