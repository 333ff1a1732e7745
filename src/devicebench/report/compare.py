"""Runs → sides → pairs → speedups, plus the tables that explain them (hosts, crossover, regressions).

Runs with the same `devicebench.config_key` did the same work. Within one key, runs on the same device and
hardware model are repeats of one *side* (sides.py); a *pair* is two sides of one key at one world size
(pairs.py); a *scaling series* is the sides of one key and device model at several world sizes
(scaling.py). Nothing is dropped: sides with neither a partner nor a series are listed as unpaired,
unfinished runs are listed apart. This module puts them together into one `Comparison`, and keeps the
crossover grids, which need `NOT_WORK`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from devicebench.config.workloads import not_work
from devicebench.report import best_cpu, scaling_verdicts, verdicts
from devicebench.report.pairs import Pair, build_pairs, make_pair
from devicebench.report.records import RunRecord
from devicebench.report.regressions import Regression, find_regressions, measures, newest_group
from devicebench.report.scaling import Series, build_series
from devicebench.report.sides import (
    MEMORY_METRICS,
    QUALITY_METRICS,
    SUMMARY_METRICS,
    THROUGHPUT_METRICS,
    TIME_METRICS,
    Side,
    Stat,
    build_sides,
    side_of,
    summarise,
    wait_share,
)
from devicebench.schema import PEAK_FRACTION

__all__ = [  # the names the report and its tests import from here, wherever they are defined
    "GRID_AXES",
    "MEMORY_METRICS",
    "NOT_WORK",
    "QUALITY_METRICS",
    "SUMMARY_METRICS",
    "THROUGHPUT_METRICS",
    "TIME_METRICS",
    "Comparison",
    "Grid",
    "Pair",
    "Regression",
    "Series",
    "Side",
    "Stat",
    "build_grids",
    "build_pairs",
    "build_series",
    "build_sides",
    "compare",
    "find_regressions",
    "host_tables",
    "make_pair",
    "measures",
    "newest_group",
    "side_of",
    "summarise",
    "wait_share",
]

# params the job derives from the work and its world size (batch_size × processes): logged beside the
# config, not part of it, so they tell no two configs apart
JOB_PARAMS = frozenset({"global_batch_size"})
# params that say where or how a run worked, not what work it measured: the config key's own rule
NOT_WORK = not_work() | JOB_PARAMS
GRID_AXES = ("width", "batch_size")


# --------------------------------------------------------------------------------------------- crossover


@dataclass
class Grid:
    """Speedup over width × batch_size for one workload, device pair and otherwise equal config."""

    workload: str
    base: str
    other: str
    fixed: dict[str, str]
    cells: dict[tuple[float, float], float]  # (width, batch_size) -> speedup
    # (width, batch_size) -> other's cost of the same work / base's, where both sides have a price
    cost_cells: dict[tuple[float, float], float] = field(default_factory=dict)
    # (width, batch_size) -> the other side's share of its dense peak (util/peak_fraction), where logged
    peak_cells: dict[tuple[float, float], float] = field(default_factory=dict)
    # (width, batch_size) -> the speedup over this CPU at its best, where a faster CPU side was measured
    best_cpu_cells: dict[tuple[float, float], float] = field(default_factory=dict)
    cost_base: str = ""  # what the cost cells are taken against where it is not `base` (the best CPU)

    @property
    def widths(self) -> list[float]:
        return sorted({w for w, _ in self.cells})

    @property
    def batch_sizes(self) -> list[float]:
        return sorted({b for _, b in self.cells})

    @property
    def title(self) -> str:
        return f"{self.workload}: {self.other} vs {self.base}"


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def build_grids(pairs: Sequence[Pair]) -> list[Grid]:
    """Group pairs whose configs differ only in width/batch_size; a grid needs two cells or more."""
    groups: dict[tuple, list[Pair]] = defaultdict(list)
    for p in pairs:
        params = p.base.params
        if p.headline is None or not any(a in params for a in GRID_AXES):
            continue
        fixed = tuple(sorted((k, v) for k, v in params.items() if k not in NOT_WORK and k not in GRID_AXES))
        groups[(p.workload, p.base.label, p.other.label, fixed)].append(p)
    grids = []
    for (workload, base, other, fixed), ps in groups.items():
        cells: dict[tuple[float, float], float] = {}
        costs: dict[tuple[float, float], float] = {}
        peaks: dict[tuple[float, float], float] = {}
        best: dict[tuple[float, float], float] = {}
        over_best = {id(p) for p in best_cpu.against_best(ps)}
        for p in ps:
            w = _num(p.base.params.get("width"))
            b = _num(p.base.params.get("batch_size"))
            cell = (w if w is not None else 1.0, b if b is not None else 0.0)
            cells[cell] = p.headline  # type: ignore[assignment]
            if p.cost_ratio is not None:
                costs[cell] = p.cost_ratio
            if (share := p.other.metrics.get(PEAK_FRACTION)) is not None:
                peaks[cell] = share.median
            if id(p) in over_best:
                best[cell] = p.speedups["best_cpu"]
        if len(cells) >= 2:
            # a cell without a tuned side is against its own CPU, the fastest measured for that work too
            against = "the fastest CPU measured" if any(p.cost_base is not p.base for p in ps) else ""
            grids.append(Grid(workload, base, other, dict(fixed), cells, costs, peaks, best, against))
            if len({b for _, b in cells}) > 1:
                for p in ps:
                    p.in_crossover = True
    return grids


# --------------------------------------------------------------------------------------------- all


@dataclass
class Comparison:
    """Everything the renderers show, computed once."""

    runs: list[RunRecord]
    finished: list[RunRecord]
    unfinished: list[RunRecord]
    sides: dict[str, list[Side]]
    pairs: list[Pair]
    unpaired: list[Side]
    grids: list[Grid]
    hosts: dict[str, list[Pair]]
    regressions: list[Regression] | None = None
    regression_groups: int = 0
    threshold: float = 0.1
    scaling: list[Series] = field(default_factory=list)  # configs run at two world sizes or more

    @property
    def all_sides(self) -> list[Side]:
        return [s for sides in self.sides.values() for s in sides]

    @property
    def matmul_sides(self) -> list[Side]:
        return [s for s in self.all_sides if s.matmul]


def host_tables(finished: Sequence[RunRecord]) -> dict[str, list[Pair]]:
    """When runs come from several machines: the pairs formed within each machine alone."""
    by_host: dict[str, list[RunRecord]] = defaultdict(list)
    for r in finished:
        by_host[r.host].append(r)
    if len(by_host) < 2:
        return {}
    return {h: build_pairs(build_sides(rs))[0] for h, rs in sorted(by_host.items())}


def unused_tuned(sides: dict[str, list[Side]], pairs: Sequence[Pair], unpaired: Sequence[Side]) -> list[Side]:
    """Tuned CPU sides held out of pairing (pairs._held_as_best) that no pair took as its best CPU: a
    tuning slower than the CPU as configured, or one beside a CPU/CPU pair. Listed as unpaired, so
    that nothing read is dropped from the report."""
    used = {id(s) for p in pairs for s in (p.base, p.other, p.best_cpu) if s is not None}
    used |= {id(s) for s in unpaired}
    return [s for group in sides.values() for s in group if s.tuned and id(s) not in used]


def compare(
    runs: Sequence[RunRecord],
    baseline: str = "none",
    threshold: float = 0.1,
    earlier_runs: Sequence[RunRecord] = (),
) -> Comparison:
    """The whole comparison: only FINISHED runs are results; the others are listed, not averaged in.

    `earlier_runs`: where the baseline comes from when the selection was narrowed (see find_regressions).
    """
    finished = [r for r in runs if r.status == "FINISHED"]
    unfinished = [r for r in runs if r.status != "FINISHED"]
    sides = build_sides(finished)
    pairs, unpaired = build_pairs(sides)
    best_cpu.attach(pairs, (s for group in sides.values() for s in group))
    unpaired += unused_tuned(sides, pairs, unpaired)
    grids = build_grids(pairs)
    for p in pairs:
        p.verdicts = verdicts.explain(p)
    scaling = build_series(sides)
    for series in scaling:
        for point in series.points:
            point.verdicts = scaling_verdicts.explain_scaling(series, point)
    in_series = {id(s) for series in scaling for s in series.sides}
    unpaired = [s for s in unpaired if id(s) not in in_series]  # a series is their comparison
    comp = Comparison(
        list(runs),
        finished,
        unfinished,
        sides,
        pairs,
        unpaired,
        grids,
        host_tables(finished),
        threshold=threshold,
        scaling=scaling,
    )
    if baseline == "previous":
        earlier = [r for r in earlier_runs if r.status == "FINISHED"]
        comp.regressions, comp.regression_groups = find_regressions(finished, threshold, earlier)
    return comp
