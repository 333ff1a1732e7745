"""How busy the host was while a run ran: the CPU time other processes took on the cores the run could use.

A run's figures time its own work, but on a shared host other processes take turns on the same cores,
and the run cannot tell a slow CPU from a busy one. So a run samples, when it starts and when its work
ends, the busy time of the cores it may use (`/proc/stat`, one line per core; `steal` counts as taken:
a cloud hypervisor gave that time to another guest) and its own process tree's CPU time (itself, its
reaped children, and its live descendants from `/proc/<pid>/stat`). What the cores did beyond the run's
own tree is what others took; over the wall time and the cores it is a share, logged with the load.
Linux only: elsewhere, and inside a job of several processes (whose other ranks are not its
descendants), nothing is measured and nothing is said. Torch- and mlflow-free.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devicebench.schema import HOST_LOAD_1M, HOST_OTHERS_SHARE

PROC = Path("/proc")
# /proc/stat's columns after the cpu name: user nice system idle iowait irq softirq steal (guest and
# guest_nice are already inside user and nice)
BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuSample:
    """One look at the cores: seconds since an arbitrary start, the cores' busy CPU-seconds since boot,
    and this process tree's CPU-seconds."""

    wall_s: float
    busy_s: float
    own_s: float
    cores: int


def cores_busy_s(stat_text: str, cores: Iterable[int], tick_hz: float) -> float:
    """The busy CPU-seconds of `cores` since boot, from `/proc/stat`'s per-core lines."""
    wanted = {f"cpu{c}" for c in cores}
    ticks = 0
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if name in wanted:
            columns = rest.split()
            ticks += sum(int(columns[i]) for i in BUSY_COLUMNS if i < len(columns))
    return ticks / tick_hz


def _proc_stat_fields(pid: int) -> list[str] | None:
    """`/proc/<pid>/stat`'s fields after the command name (which may hold spaces), or None once gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def descendants_cpu_s(root: int, tick_hz: float) -> float:
    """The CPU-seconds of `root`'s live descendants, each with its own reaped children's."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat_fields(int(entry.name))
        if fields is None or len(fields) < 15:
            continue
        # fields[1] is the parent; utime stime cutime cstime are fields 14-17 of the whole line
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(x) for x in fields[11:15]) / tick_hz
    total = 0.0
    for pid in parents:
        up, seen = parents.get(pid), 0
        while up is not None and up > 1 and seen < 64:  # a bounded walk: pids are reused
            if up == root:
                total += times[pid]
                break
            up, seen = parents.get(up), seen + 1
    return total


def sample() -> CpuSample | None:
    """The cores this process may use and this process tree, now; None where there is no /proc/stat."""
    try:
        stat_text = (PROC / "stat").read_text()
        cores = sorted(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None
    hz = float(os.sysconf("SC_CLK_TCK"))
    own = os.times()
    own_s = (
        own.user + own.system + own.children_user + own.children_system + descendants_cpu_s(os.getpid(), hz)
    )
    return CpuSample(time.monotonic(), cores_busy_s(stat_text, cores, hz), own_s, len(cores))


def others_share(start: CpuSample, end: CpuSample) -> float | None:
    """The share of the cores' time between two samples that processes outside this tree took (0-1)."""
    capacity = (end.wall_s - start.wall_s) * start.cores
    if capacity <= 0:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    return min(max(others / capacity, 0.0), 1.0)


def load_1m() -> float | None:
    """The 1-minute load average (runnable and uninterruptible tasks), or None where it cannot be read."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return float((PROC / "loadavg").read_text().split()[0])
    return None


def busy_figures(start: CpuSample | None, end: CpuSample | None) -> dict[str, float]:
    """`host/others_cpu_share` and `host/load_1m` for the run between the samples ({} where unknown)."""
    share = others_share(start, end) if start is not None and end is not None else None
    if share is None:
        return {}
    load = load_1m()
    return {HOST_OTHERS_SHARE: share, **({HOST_LOAD_1M: load} if load is not None else {})}
