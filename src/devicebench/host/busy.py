"""How busy the host was while a run ran: the CPU time other processes took on the cores the run could use.

A run's figures time its own work, but on a shared host other processes take turns on the same cores,
and the run cannot tell a slow CPU from a busy one. So a run samples, when it starts and when its work
ends, the busy time of the cores it may use (psutil's per-core CPU times; `steal` counts as taken: a
cloud hypervisor gave that time to another guest) and its own process tree's CPU time (itself, its
reaped children, and its live descendants). What the cores did beyond the run's own tree is what others
took; over the wall time and the cores it is a share, logged with the load. Where psutil cannot read
per-core times, and inside a job of several processes (whose other ranks are not its descendants),
nothing is measured and nothing is said. Torch- and mlflow-free.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from devicebench.schema import HOST_LOAD_1M, HOST_OTHERS_SHARE

# psutil's per-core fields that are work, not idle (guest and guest_nice are already inside user and
# nice; iowait is idle time spent waiting)
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuSample:
    """One look at the cores: seconds since an arbitrary start, the cores' busy CPU-seconds since boot,
    and this process tree's CPU-seconds."""

    wall_s: float
    busy_s: float
    own_s: float
    cores: int


def cores_busy_s(per_core: Sequence[Any], cores: Iterable[int]) -> float:
    """The busy CPU-seconds of `cores` since boot, from `psutil.cpu_times(percpu=True)`."""
    return sum(getattr(per_core[c], f, 0.0) for c in cores if c < len(per_core) for f in BUSY_FIELDS)


def own_tree_cpu_s(proc: psutil.Process) -> float:
    """The CPU-seconds of `proc`, its reaped children and its live descendants (each with its own reaped
    children's): a DataLoader worker or matmul's NumPy child is the run's own time, never others'."""
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        with contextlib.suppress(psutil.Error):  # a descendant that ended between the listing and the read
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def sample() -> CpuSample | None:
    """The cores this process may use and this process tree, now; None where psutil cannot read them."""
    try:
        cores = sorted(os.sched_getaffinity(0))
        per_core = psutil.cpu_times(percpu=True)
        own_s = own_tree_cpu_s(psutil.Process())
    except (OSError, AttributeError, psutil.Error):
        return None
    return CpuSample(time.monotonic(), cores_busy_s(per_core, cores), own_s, len(cores))


def others_share(start: CpuSample, end: CpuSample) -> float | None:
    """The share of the cores' time between two samples that processes outside this tree took (0-1)."""
    capacity = (end.wall_s - start.wall_s) * start.cores
    if capacity <= 0:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    return min(max(others / capacity, 0.0), 1.0)


def load_1m() -> float | None:
    """The 1-minute load average (runnable and uninterruptible tasks), or None where it cannot be read."""
    with contextlib.suppress(OSError, AttributeError):
        return float(psutil.getloadavg()[0])
    return None


def busy_figures(start: CpuSample | None, end: CpuSample | None) -> dict[str, float]:
    """`host/others_cpu_share` and `host/load_1m` for the run between the samples ({} where unknown)."""
    share = others_share(start, end) if start is not None and end is not None else None
    if share is None:
        return {}
    load = load_1m()
    return {HOST_OTHERS_SHARE: share, **({HOST_LOAD_1M: load} if load is not None else {})}
