"""Scaling series: one config on one device model at several world sizes.

A data-parallel job of N processes should train N times as fast as a job of 1; how close it comes is
what a series answers. Runs of one config key share a series when they ran on the same device kind and
hardware model and differ only in world size (several OCI shapes of that model are one series: a 1-GPU
run on a VM and an 8-GPU run on a bare-metal shape are the same GPU, and that is the comparison people
ask for). Per world size: the median job throughput with its spread, the speedup over the smallest
world size present (1 wherever a run of 1 exists), the efficiency = speedup / (N / N_base), and the
all-reduce share where the runs logged it. judge/scaling_rules.py says where the efficiency falls short,
and why. A series and its points are built whole (`build_series`) and never changed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from devicebench.report.model.sides import Placement, Side, param_order, side_of, summarise
from devicebench.schema import COMM_SHARE, TRAIN_RATE
from devicebench.util.stats import Stat


@dataclass(frozen=True, eq=False)
class Point:
    """The runs of a series at one world size, and how they compare with the series' base."""

    side: Side
    speedup: float | None = None  # throughput / the base's throughput (medians)
    efficiency: float | None = None  # speedup / (N / N_base): 1.0 is perfect scaling

    @property
    def world_size(self) -> int:
        return self.side.world_size

    @property
    def throughput(self) -> Stat | None:
        return self.side.metrics.get(TRAIN_RATE)

    @property
    def comm_share(self) -> Stat | None:
        return self.side.metrics.get(COMM_SHARE)


@dataclass(frozen=True, eq=False)
class Series:
    """One config on one device kind and model, at two world sizes or more (smallest first)."""

    workload: str
    config_key: str
    device: str  # the device kind: cuda, cpu
    device_name: str
    points: list[Point]
    sides: list[Side]  # the report's sides it was built from (one per shape and world size)
    base_n: int | None = None  # the world size speedups are over; None: no point has a throughput

    @property
    def world_sizes(self) -> list[int]:
        return [p.world_size for p in self.points]

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def unit(self) -> str:
        """What one process holds: a GPU each on CUDA, a share of the cores elsewhere."""
        return "GPUs" if self.device == "cuda" else "processes"

    @property
    def label(self) -> str:
        return f"{self.device} ({self.device_name})" if self.device_name else self.device

    @property
    def params(self) -> dict[str, str]:
        return self.points[0].side.params

    @property
    def base(self) -> Point | None:
        return next((p for p in self.points if p.world_size == self.base_n), None)

    def ideal(self, n: int) -> float | None:
        """The throughput perfect scaling would give at `n`: base throughput × n / N_base."""
        base = self.base
        if base is None or base.throughput is None:
            return None
        return base.throughput.median * n / base.world_size


def _series_key(side: Side) -> tuple[str, str, str, str]:
    return side.workload, side.config_key, side_of(side.runs[0])[0], side.device_name


def _merge(sides: list[Side]) -> Side:
    """The sides of one world size (several shapes of one model) as one, their runs summarised together."""
    if len(sides) == 1:
        return sides[0]
    first = sides[0]
    return summarise(
        first.workload,
        first.config_key,
        ", ".join(sorted({s.device for s in sides})),
        first.device_name,
        [r for s in sides for r in s.runs],
        Placement(", ".join(sorted({s.shape for s in sides if s.shape})), first.world_size),
    )


def _points(sides: list[Side]) -> tuple[list[Point], int | None]:
    """One point per world size, smallest first, with its speedup and efficiency over the smallest
    world size whose throughput is known (that size is returned too; None when no point has one)."""
    by_n: dict[int, list[Side]] = defaultdict(list)
    for s in sides:
        by_n[s.world_size].append(s)
    merged = [_merge(ss) for _, ss in sorted(by_n.items())]
    rates = [s.metrics.get(TRAIN_RATE) for s in merged]
    base = next(((s, r) for s, r in zip(merged, rates, strict=True) if r is not None and r.median > 0), None)
    if base is None:
        return [Point(s) for s in merged], None
    base_side, base_rate = base
    points = []
    for s, rate in zip(merged, rates, strict=True):
        if rate is None or s.world_size < base_side.world_size:
            points.append(Point(s))
            continue
        speedup = rate.median / base_rate.median
        points.append(Point(s, speedup, speedup / (s.world_size / base_side.world_size)))
    return points, base_side.world_size


def build_series(sides_by_key: dict[str, list[Side]]) -> list[Series]:
    """Every config and device model that ran at two world sizes or more, with each point's speedup and
    efficiency (the judge says why a point falls short, as for pairs)."""
    groups: dict[tuple[str, str, str, str], list[Side]] = defaultdict(list)
    for sides in sides_by_key.values():
        for s in sides:
            if not s.tuned:  # one process by construction, and another CPU configuration than the series'
                groups[_series_key(s)].append(s)
    out: list[Series] = []
    for (workload, key, kind, name), sides in groups.items():
        if len({s.world_size for s in sides}) < 2:
            continue
        points, base_n = _points(sides)
        out.append(Series(workload, key, kind, name, points, sides, base_n))
    return sorted(out, key=lambda s: (s.workload, param_order(s.params), s.config_key, not s.is_cpu, s.label))
