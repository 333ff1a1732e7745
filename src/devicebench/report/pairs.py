"""Sides → pairs → speedups: two sides of one config key (CPU vs GPU, or two GPU models) at one world size.

Nothing is dropped: sides without a partner at their world size are returned as unpaired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from devicebench.report.money import PairCost, pair_cost
from devicebench.report.sides import THROUGHPUT_METRICS, Side, param_order


@dataclass
class Pair:
    """Two sides of one config at one world size: `speedup` = base time / other time (> 1: `other` is
    faster)."""

    base: Side
    other: Side
    speedups: dict[str, float] = field(default_factory=dict)
    speedup_range: tuple[float, float] | None = None
    # (backend on base, dtype, size) -> torch-on-other speedup at that point
    matmul: dict[tuple[str, str, int], float] = field(default_factory=dict)
    matmul_point: tuple[str, str, int] | None = None  # (backend on base, dtype, size) of `speedups["matmul"]`
    in_crossover: bool = False
    verdicts: list[str] = field(default_factory=list)
    cost: PairCost | None = None  # price and cost ratios (money.py); their fields are None without prices
    best_cpu: Side | None = None  # the fastest CPU side of the same work (best_cpu.py); may be `base`

    @property
    def workload(self) -> str:
        return self.base.workload

    @property
    def config_key(self) -> str:
        return self.base.config_key

    @property
    def is_cpu_gpu(self) -> bool:
        return self.base.is_cpu and not self.other.is_cpu

    @property
    def headline(self) -> float | None:
        """The one number for the pair: training-time speedup, or matmul at its largest common size."""
        if "matmul" in self.speedups:
            return self.speedups["matmul"]
        for key in ("train", "total"):
            if key in self.speedups:
                return self.speedups[key]
        return None

    @property
    def cost_base(self) -> Side:
        """The CPU side the cost is taken against: this CPU at its best where a side faster than the
        pair's own was measured (best_cpu.attach), else the pair's own base."""
        return self.best_cpu if self.best_cpu is not None and self.best_cpu is not self.base else self.base

    @property
    def cost_speedup(self) -> float | None:
        """The speedup that goes with `cost`: over the best CPU where the cost is taken against it."""
        return self.speedups.get("best_cpu") if self.cost_base is not self.base else self.headline

    @property
    def price_ratio(self) -> float | None:
        """other's hourly price / base's, where both runs say it in one currency."""
        return self.cost.price_ratio if self.cost else None

    @property
    def cost_ratio(self) -> float | None:
        """other's cost per unit of work / base's (< 1: other is cheaper for the same work)."""
        return self.cost.cost_ratio if self.cost else None


def _time_speedups(pair: Pair) -> None:
    for name in ("train", "eval", "total"):
        a, b = pair.base.metrics.get(f"time/{name}_s"), pair.other.metrics.get(f"time/{name}_s")
        if a and b and b.median > 0:
            pair.speedups[name] = a.median / b.median
    a, b = pair.base.metrics.get(THROUGHPUT_METRICS[0]), pair.other.metrics.get(THROUGHPUT_METRICS[0])
    if a and b and a.median > 0:
        pair.speedups["throughput"] = b.median / a.median
    key = pair.base.time_metric()
    if key and key in pair.other.metrics:
        a, b = pair.base.metrics[key], pair.other.metrics[key]
        if b.hi > 0 and b.lo > 0:
            pair.speedup_range = (a.lo / b.hi, a.hi / b.lo)


def _matmul_speedups(pair: Pair) -> None:
    """torch on `other` against each backend on `base` at every common (dtype, size)."""
    theirs = {(d, n): v["time"] for (b, d, n), v in pair.other.matmul.items() if b == "torch" and "time" in v}
    for (backend, dtype, size), v in pair.base.matmul.items():
        o = theirs.get((dtype, size))
        if o is not None and "time" in v and o.median > 0:
            pair.matmul[(backend, dtype, size)] = v["time"].median / o.median
    torch_points = [k for k in pair.matmul if k[0] == "torch"] or list(pair.matmul)
    if torch_points:
        biggest = max(k[2] for k in torch_points)
        at = [k for k in torch_points if k[2] == biggest]
        pick = next((k for k in at if k[1] == "float32"), at[0])
        pair.speedups["matmul"] = pair.matmul[pick]
        pair.matmul_point = pick
        pair.speedups["matmul_point"] = float(biggest)
        a, b = pair.base.matmul[pick]["time"], theirs[(pick[1], pick[2])]
        pair.speedup_range = (a.lo / b.hi, a.hi / b.lo) if b.lo > 0 else None


def make_pair(base: Side, other: Side) -> Pair:
    pair = Pair(base, other)
    _time_speedups(pair)
    _matmul_speedups(pair)
    pair.cost = pair_cost(pair.base, pair.other, pair.matmul_point)
    return pair


def _held_as_best(side: Side, alike: list[Side]) -> bool:
    """A tuned CPU side beside the same CPU as configured is not paired itself: the GPU is held against
    the configured side, and against the tuned one as "this CPU at its best" (best_cpu.py). Alone in its
    key (a tuning that chose data in memory), a tuned side is the pair's own CPU side."""
    return side.tuned and any(
        o.is_cpu and not o.tuned and o.device_name == side.device_name for o in alike if o is not side
    )


def build_pairs(sides_by_key: dict[str, list[Side]]) -> tuple[list[Pair], list[Side]]:
    """Every pair of sides within a key and a world size (CPU as the base where present); sides with no
    partner at their world size are unpaired.

    Like with like: a CPU job of 1 process is paired with a GPU job of 1, a CPU job of 4 with a GPU job
    of 4, never across. A "speedup" of 8 GPUs over 1 CPU process would credit the device with what the
    extra processes did; how a config gains from more processes is the scaling series' question
    (scaling.py), asked on one device model at a time.
    """
    pairs: list[Pair] = []
    unpaired: list[Side] = []
    for sides in sides_by_key.values():
        for world in sorted({s.world_size for s in sides}):
            alike = [s for s in sides if s.world_size == world]
            pairable = [s for s in alike if not _held_as_best(s, alike)]
            if len(pairable) < 2:
                unpaired.extend(alike)
                continue
            pairs.extend(make_pair(a, b) for a, b in combinations(pairable, 2))
    pairs.sort(
        key=lambda p: (
            p.workload,
            not p.is_cpu_gpu,
            p.base.world_size,
            p.base.label,
            p.other.label,
            param_order(p.base.params),
        )
    )
    return pairs, unpaired
