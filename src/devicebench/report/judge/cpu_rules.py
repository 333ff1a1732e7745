"""The rules about a pair's CPU timing: a baseline that ran more busy threads than it had cores, and
CPU figures taken with different thread counts. Each a small pure function (pair_rules orders them).
"""

from __future__ import annotations

from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.report.read.records import RunRecord
from devicebench.schema import PRODUCT


def _contention(side: Side) -> str | None:
    """`2 torch threads + 2 loader workers on 2 cores (1/1 runs)` for a CPU side whose runs ran more
    busy threads than they had cores (run/workload.py logs the `cpu.*` facts host/cpu.cpu_budget
    counts); None for a GPU side or a CPU side that fit."""
    runs = [r for r in side.runs if r.tag("cpu.oversubscribed") == "true"]
    if not side.is_cpu or not runs:
        return None
    r = runs[0]
    threads, busy = r.tag("host.torch_threads", "?"), r.tag("cpu.busy_threads", "?")
    workers = int(busy) - int(threads) if busy.isdigit() and threads.isdigit() else "?"
    return (
        f"{threads} torch threads + {workers} loader workers on {r.tag('cpu.usable_cores', '?')} cores "
        f"({len(runs)}/{len(side.runs)} runs)"
    )


def oversubscribed(pair: Pair) -> str | None:
    """A CPU baseline that ran more busy threads than it had cores measured contention, not the CPU:
    every speedup over it is overstated."""
    for side in (pair.base, pair.other):
        said = _contention(side)
        if said:
            return (
                f"{side.device} baseline oversubscribed: {said}; it measures contention, so the speedup is "
                "overstated: rerun with num_workers=0 or fewer threads"
            )
    return None


def oversubscribed_alone(side: Side) -> str | None:
    """The same for a CPU side without a partner: no speedup to overstate yet, but its own figures
    measure contention, which a lone run would otherwise say nowhere."""
    said = _contention(side)
    if not said:
        return None
    return (
        f"{side.device} oversubscribed: {said}; its figures measure contention, not this CPU: rerun with "
        "num_workers=0 or fewer threads"
    )


def _threads(run: RunRecord) -> str:
    return f"{run.tag('host.torch_threads', '?')} torch / {run.tag('host.blas_threads', '?')} BLAS threads"


def thread_mismatch(pair: Pair) -> str | None:
    """CPU timings taken with different thread counts are not like for like: say so beside the speedup.

    The CPU timing of a pair lives on its CPU sides, and for matmul on every side (NumPy runs on the
    host's CPU beside the GPU too).
    """
    sides = [s for s in (pair.base, pair.other) if s.is_cpu or s.kind is PRODUCT]
    counts = {s.device: sorted({_threads(r) for r in s.runs}) for s in sides}
    if len({c for cs in counts.values() for c in cs}) <= 1:
        return None
    said = "; ".join(f"{device}: {', '.join(cs)}" for device, cs in counts.items())
    return f"thread counts differ ({said}): the CPU figures are not like for like"
