"""Crossover grids: the speedup over width × batch_size for one workload, device pair and otherwise
equal config, with beside it the cost ratio, the GPU's share of its peak and the speedup over this
CPU at its best, where the pairs carry them: where the GPU starts to pay off, in time and in money."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from devicebench.report.model.crossover import GridKey, grid_cell, grid_key
from devicebench.report.model.pairs import Pair, against_best
from devicebench.schema import PEAK_FRACTION

Cells = Mapping[tuple[float, float], float]  # (width, batch_size) -> value


@dataclass(frozen=True)
class Grid:
    """Speedup over width × batch_size for one workload, device pair and otherwise equal config."""

    workload: str
    base: str
    other: str
    fixed: dict[str, str]
    cells: Cells  # the headline speedup
    cost_cells: Cells  # other's cost of the same work / base's, where both sides have a price
    peak_cells: Cells  # the other side's share of its dense peak (util/peak_fraction), where logged
    best_cpu_cells: Cells  # the speedup over this CPU at its best, where a faster CPU side was measured
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


def _grid(key: GridKey, ps: list[Pair]) -> Grid | None:
    cells: dict[tuple[float, float], float] = {}
    costs: dict[tuple[float, float], float] = {}
    peaks: dict[tuple[float, float], float] = {}
    best: dict[tuple[float, float], float] = {}
    over_best = {id(p) for p in against_best(ps)}
    for p in ps:
        cell = grid_cell(p.base)
        cells[cell] = p.headline  # type: ignore[assignment]
        if p.cost_ratio is not None:
            costs[cell] = p.cost_ratio
        if (share := p.other.metrics.get(PEAK_FRACTION)) is not None:
            peaks[cell] = share.median
        if id(p) in over_best and p.best_cpu_speedup is not None:
            best[cell] = p.best_cpu_speedup
    if len(cells) < 2:
        return None
    # a cell without a tuned side is against its own CPU, the fastest measured for that work too
    against = "the fastest CPU measured" if any(p.cost_base is not p.base for p in ps) else ""
    workload, base, other, fixed = key
    return Grid(workload, base, other, dict(fixed), cells, costs, peaks, best, against)


def build_grids(pairs: Sequence[Pair]) -> list[Grid]:
    """Group pairs whose configs differ only in width/batch_size; a grid needs two cells or more."""
    groups: dict[GridKey, list[Pair]] = defaultdict(list)
    for p in pairs:
        key = grid_key(p.base, p.other) if p.headline is not None else None
        if key is not None:
            groups[key].append(p)
    return [g for key, ps in groups.items() if (g := _grid(key, ps)) is not None]
