"""Which configs form a crossover grid: the same work on the same two sides, differing only in width
and batch size. A pair needs to know whether it stands in such a grid before it is built (the
launch-bound verdict points at the grid instead of advising a larger batch), and the grids are drawn
from the pairs after: both group by the one key here."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from devicebench.report.model.sides import NOT_WORK, Side

GRID_AXES = ("width", "batch_size")
GridKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


def grid_key(base: Side, other: Side) -> GridKey | None:
    """(workload, the two sides, the params that are neither an axis nor where/how the run worked);
    None for a config with neither axis among its params."""
    params = base.params
    if not any(a in params for a in GRID_AXES):
        return None
    fixed = tuple(sorted((k, v) for k, v in params.items() if k not in NOT_WORK and k not in GRID_AXES))
    return base.workload, base.label, other.label, fixed


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def grid_cell(base: Side) -> tuple[float, float]:
    """(width, batch_size) of a config; width 1 and batch 0 where the config does not say."""
    w = _num(base.params.get("width"))
    b = _num(base.params.get("batch_size"))
    return (w if w is not None else 1.0, b if b is not None else 0.0)


def in_crossover(candidates: Iterable[tuple[Side, Side, float | None]]) -> set[tuple[int, int]]:
    """(id(base), id(other)) of every candidate pair (base, other, headline speedup) that stands in a
    grid of two cells or more across more than one batch size."""
    groups: dict[GridKey, list[tuple[Side, Side]]] = defaultdict(list)
    for base, other, headline in candidates:
        key = grid_key(base, other) if headline is not None else None
        if key is not None:
            groups[key].append((base, other))
    out: set[tuple[int, int]] = set()
    for members in groups.values():
        cells = {grid_cell(b) for b, _ in members}
        if len(cells) >= 2 and len({batch for _, batch in cells}) > 1:
            out |= {(id(b), id(o)) for b, o in members}
    return out
