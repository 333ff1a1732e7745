"""Sides → pairs: two sides of one config key (CPU vs GPU, or two GPU models) at one world size, each
built complete in one place (`_whole`, which `build_pairs` and `make_pair` share): its speedups, the
CPU at its best, the cost of the same work and whether it stands in a crossover grid. Nothing is changed after; nothing is dropped: sides
without a partner at their world size are returned as unpaired.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from devicebench.report.model.best_cpu import fastest_alike, fastest_cpu, throughput
from devicebench.report.model.cost import PairCost, pair_cost
from devicebench.report.model.crossover import in_crossover
from devicebench.report.model.sides import Side, param_order
from devicebench.schema import (
    EVAL_S,
    SERVE_P50,
    SERVE_P99,
    SERVE_RATE,
    TOTAL_S,
    TRAIN_RATE,
    TRAIN_S,
    TRAINING,
    Kind,
    headline_point,
)

PointKey = tuple[str, str, int]  # a product point: (backend, dtype, size)
Range = tuple[float, float]
# speedups[name] from each time: training's, evaluation's, the whole run's, a served request's (p50, p99)
TIMES = (
    ("train", TRAIN_S),
    ("eval", EVAL_S),
    ("total", TOTAL_S),
    ("latency", SERVE_P50),
    ("latency_p99", SERVE_P99),
)
RATES = (("throughput", TRAIN_RATE), ("serve_throughput", SERVE_RATE))  # other's rate / base's


@dataclass(frozen=True)
class Figures:
    """How much faster `other` did the work of `base`: base time / other time per phase (and the
    throughput ratio), and for a product per common point, with the range of the headline figure."""

    # train, eval, total, latency(_p99), (serve_)throughput, product (at `product_point`)
    speedups: Mapping[str, float]
    speedup_range: Range | None
    product_speedups: Mapping[PointKey, float]  # (backend on base, dtype, size) -> torch on other there
    product_point: PointKey | None  # where speedups["product"] was read: torch's largest size, float32

    @property
    def headline(self) -> float | None:
        """The one number: a product at its headline point, else training time, else a served
        request's, else the whole run's."""
        for key in ("product", "train", "latency", "total"):
            if key in self.speedups:
                return self.speedups[key]
        return None


def _time_figures(base: Side, other: Side) -> tuple[dict[str, float], Range | None]:
    speedups: dict[str, float] = {}
    for name, metric in TIMES:
        a, b = base.metrics.get(metric), other.metrics.get(metric)
        if a and b and b.median > 0:
            speedups[name] = a.median / b.median
    for name, metric in RATES:
        a, b = base.metrics.get(metric), other.metrics.get(metric)
        if a and b and a.median > 0:
            speedups[name] = b.median / a.median
    key = base.time_metric()
    if key and key in other.metrics:
        a, b = base.metrics[key], other.metrics[key]
        if b.hi > 0 and b.lo > 0:
            return speedups, (a.lo / b.hi, a.hi / b.lo)
    return speedups, None


def figures(base: Side, other: Side) -> Figures:
    """The speedups of `other` over `base`; for a product, torch on `other` against each backend on
    `base` at every common (dtype, size), the headline at schema.headline_point."""
    speedups, rng = _time_figures(base, other)
    theirs = {
        (d, n): v["time"] for (b, d, n), v in other.product_points.items() if b == "torch" and "time" in v
    }
    points: dict[PointKey, float] = {}
    for (backend, dtype, size), v in base.product_points.items():
        o = theirs.get((dtype, size))
        if o is not None and "time" in v and o.median > 0:
            points[(backend, dtype, size)] = v["time"].median / o.median
    pick = headline_point(list(points))
    if pick is not None:
        speedups["product"] = points[pick]
        a, b = base.product_points[pick]["time"], theirs[(pick[1], pick[2])]
        rng = (a.lo / b.hi, a.hi / b.lo) if b.lo > 0 else None
    return Figures(speedups, rng, points, pick)


@dataclass(frozen=True, eq=False)
class BestAgainstBest:
    """The fastest CPU side and the fastest GPU side of one work, each however it was set up: `speedup`
    is the GPU's throughput over the CPU's, `cost` the cost of the same work on each."""

    cpu: Side
    gpu: Side
    speedup: float
    cost: PairCost | None

    @property
    def cost_ratio(self) -> float | None:
        return self.cost.cost_ratio if self.cost else None


@dataclass(frozen=True, eq=False)
class Pair:
    """Two sides of one config at one world size: `speedups` = base time / other time (> 1: `other` is
    faster). Where a CPU side faster than the pair's own did the same work (best_cpu.py), `best_cpu`
    is it and the cost is taken against it. Identity is what tells two pairs apart (eq=False)."""

    base: Side
    other: Side
    figures: Figures
    cost: PairCost | None  # price and cost ratios (cost.py); their fields are None without prices
    best_cpu: Side | None = None  # the fastest CPU side of the same work; may be `base`
    best_cpu_speedup: float | None = None  # other's throughput / best_cpu's
    in_crossover: bool = False  # stands in a width × batch grid (crossover.py)
    best: BestAgainstBest | None = None  # each device at its best, where either is not the pair's own

    @property
    def speedups(self) -> Mapping[str, float]:
        return self.figures.speedups

    @property
    def speedup_range(self) -> Range | None:
        return self.figures.speedup_range

    @property
    def product_speedups(self) -> Mapping[PointKey, float]:
        return self.figures.product_speedups

    @property
    def product_point(self) -> PointKey | None:
        return self.figures.product_point

    @property
    def headline(self) -> float | None:
        return self.figures.headline

    @property
    def workload(self) -> str:
        return self.base.workload

    @property
    def kind(self) -> Kind | None:
        return self.base.kind

    @property
    def config_key(self) -> str:
        return self.base.config_key

    @property
    def is_cpu_gpu(self) -> bool:
        return self.base.is_cpu and not self.other.is_cpu

    @property
    def cost_base(self) -> Side:
        """The CPU side the cost is taken against: this CPU at its best where a side faster than the
        pair's own was measured, else the pair's own base."""
        return self.best_cpu if self.best_cpu is not None and self.best_cpu is not self.base else self.base

    @property
    def cost_speedup(self) -> float | None:
        """The speedup that goes with `cost`: over the best CPU where the cost is taken against it."""
        return self.best_cpu_speedup if self.cost_base is not self.base else self.headline

    @property
    def price_ratio(self) -> float | None:
        """other's hourly price / base's, where both runs say it in one currency."""
        return self.cost.price_ratio if self.cost else None

    @property
    def cost_ratio(self) -> float | None:
        """other's cost per unit of work / base's (< 1: other is cheaper for the same work)."""
        return self.cost.cost_ratio if self.cost else None


def make_pair(base: Side, other: Side, sides: Iterable[Side] = (), crossover: bool = False) -> Pair:
    """The pair, whole. A CPU/GPU pair of a training workload is also held against the fastest CPU
    side among `sides` that did its work, and its cost is taken against that CPU where it is not the
    pair's own: the price-performance question is asked of the CPU at its best."""
    return _whole(base, other, figures(base, other), sides, crossover)


def _whole(base: Side, other: Side, fig: Figures, sides: Iterable[Side], crossover: bool) -> Pair:
    every = list(sides)
    best = gpu = None
    if base.is_cpu and not other.is_cpu and base.kind is TRAINING:
        best, gpu = fastest_cpu(base, every), throughput(other)
    if best is None or gpu is None:
        return Pair(base, other, fig, pair_cost(base, other, fig.product_point), in_crossover=crossover)
    cost = pair_cost(base, other, fig.product_point) if best is base else pair_cost(best, other)
    both = _best_against_best(best, fastest_alike(other, every) or other, base, other)
    return Pair(base, other, fig, cost, best, gpu / (throughput(best) or 1.0), crossover, both)


def _best_against_best(cpu: Side, gpu: Side, base: Side, other: Side) -> BestAgainstBest | None:
    """Each device at its best, where the GPU's best is not the pair's own GPU side (the CPU's alone is
    `best_cpu`'s figure already)."""
    rates = throughput(cpu), throughput(gpu)
    if gpu is other or not rates[0] or not rates[1]:
        return None
    return BestAgainstBest(cpu, gpu, rates[1] / rates[0], pair_cost(cpu, gpu))


def _held_as_best(side: Side, alike: list[Side]) -> bool:
    """A tuned side beside the same device as configured is not paired itself: the other device is held
    against the configured side, and against the tuned one as that device at its best (best_cpu.py).
    Alone in its key (a tuning that chose data in memory), a tuned side is the pair's own side."""
    return side.tuned and any(
        o.is_cpu == side.is_cpu and not o.tuned and o.device_name == side.device_name
        for o in alike
        if o is not side
    )


def _priced_apart(a: Side, b: Side) -> bool:
    """The same runs' hardware priced two ways by hand (sides.build_sides): two prices of one
    measurement, each paired with the other devices, never a "1.00x faster" pair of their own."""
    same = (a.is_cpu, a.device_name, a.shape, a.tuned) == (b.is_cpu, b.device_name, b.shape, b.tuned)
    return same and a.priced_by_hand != b.priced_by_hand


def _candidates(sides_by_key: dict[str, list[Side]]) -> tuple[list[tuple[Side, Side]], list[Side]]:
    """Every two sides within a key and a world size that may pair (CPU first where present), and the
    sides with no partner at their world size."""
    candidates: list[tuple[Side, Side]] = []
    unpaired: list[Side] = []
    for sides in sides_by_key.values():
        for world in sorted({s.world_size for s in sides}):
            alike = [s for s in sides if s.world_size == world]
            pairable = [s for s in alike if not _held_as_best(s, alike)]
            found = [(a, b) for a, b in combinations(pairable, 2) if not _priced_apart(a, b)]
            if not found:
                unpaired.extend(alike)
            candidates.extend(found)
    return candidates, unpaired


def build_pairs(sides_by_key: dict[str, list[Side]]) -> tuple[list[Pair], list[Side]]:
    """Every pair of sides within a key and a world size, each made whole; sides with no partner at
    their world size are unpaired.

    Like with like: a CPU job of 1 process is paired with a GPU job of 1, a CPU job of 4 with a GPU job
    of 4, never across. A "speedup" of 8 GPUs over 1 CPU process would credit the device with what the
    extra processes did; how a config gains from more processes is the scaling series' question
    (scaling.py), asked on one device model at a time.
    """
    every = [s for group in sides_by_key.values() for s in group]
    candidates, unpaired = _candidates(sides_by_key)
    made = [(a, b, figures(a, b)) for a, b in candidates]
    crossing = in_crossover((a, b, fig.headline) for a, b, fig in made)
    pairs = [_whole(a, b, fig, every, (id(a), id(b)) in crossing) for a, b, fig in made]
    pairs.sort(key=_order)
    return pairs, unpaired


def _order(p: Pair) -> tuple:
    return (
        p.workload,
        not p.is_cpu_gpu,
        p.base.world_size,
        p.base.label,
        p.other.label,
        param_order(p.base.params),
    )


def against_best(pairs: Iterable[Pair]) -> list[Pair]:
    """The pairs with a speedup over this CPU at its best, once a CPU side faster than some pair's own was
    measured (a tuned side); then a pair whose own CPU is that best side counts too: the GPU with its data
    in memory against the tuned CPU is the best-against-best answer. Without a tuned side: none, since
    each pair's own speedup is already that answer (the report's name, verdict lines and heatmap agree)."""
    known = [p for p in pairs if p.best_cpu is not None and p.best_cpu_speedup is not None]
    return known if any(p.best_cpu is not p.base for p in known) else []
