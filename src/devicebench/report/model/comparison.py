"""Runs → the whole comparison: sides, pairs, grids, scaling series, per-host pairs, regressions and each
served model's cheapest device within its promise (serving.py), built once, in this order, into one
frozen `Comparison` that the judge and the writers only read.

Runs with the same `devicebench.config_key` did the same work. Within one key, runs on the same device
and hardware model are repeats of one *side* (sides.py); a *pair* is two sides of one key at one world
size (pairs.py); a *scaling series* is the sides of one key and device model at several world sizes
(scaling.py). Nothing is dropped: sides with neither a partner nor a series are listed as unpaired,
unfinished runs are listed apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from devicebench.report.model.grids import Grid, build_grids
from devicebench.report.model.pairs import Pair, build_pairs
from devicebench.report.model.regressions import Regression, find_regressions
from devicebench.report.model.scaling import Series, build_series
from devicebench.report.model.serving import ServingChoice, serving_choices
from devicebench.report.model.sides import Side, build_sides
from devicebench.report.read.records import RunRecord


@dataclass(frozen=True)
class Comparison:
    """Everything the judge and the writers read, computed once."""

    runs: list[RunRecord]
    finished: list[RunRecord]
    unfinished: list[RunRecord]
    sides: dict[str, list[Side]]
    pairs: list[Pair]
    unpaired: list[Side]
    grids: list[Grid]
    hosts: dict[str, list[Pair]]
    scaling: list[Series]  # configs run at two world sizes or more
    regressions: list[Regression] | None = None  # None: not judged (no --baseline)
    regression_groups: int = 0
    threshold: float = 0.1
    serving: tuple[ServingChoice, ...] = ()  # each served model's cheapest device within its promise

    @property
    def all_sides(self) -> list[Side]:
        return [s for sides in self.sides.values() for s in sides]

    @property
    def product_sides(self) -> list[Side]:
        return [s for s in self.all_sides if s.product_points]


def host_tables(finished: Sequence[RunRecord]) -> dict[str, list[Pair]]:
    """When runs come from several machines: the pairs formed within each machine alone, each with the
    best CPU measured on that machine."""
    by_host: dict[str, list[RunRecord]] = defaultdict(list)
    for r in finished:
        by_host[r.host].append(r)
    if len(by_host) < 2:
        return {}
    return {h: build_pairs(build_sides(rs))[0] for h, rs in sorted(by_host.items())}


def unused_tuned(sides: dict[str, list[Side]], pairs: Sequence[Pair], unpaired: Sequence[Side]) -> list[Side]:
    """Tuned sides held out of pairing (pairs._held_as_best) that no pair took as a device at its best:
    a tuning slower than the side as configured, or one beside a CPU/CPU pair. Listed as unpaired, so
    that nothing read is dropped from the report."""
    used = {id(s) for p in pairs for s in (p.base, p.other, p.best_cpu) if s is not None}
    used |= {id(s) for p in pairs if p.best for s in (p.best.cpu, p.best.gpu)}
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
    scaling = build_series(sides)
    in_series = {id(s) for series in scaling for s in series.sides}
    unpaired = [s for s in [*unpaired, *unused_tuned(sides, pairs, unpaired)] if id(s) not in in_series]
    regressions, groups = None, 0
    if baseline == "previous":
        earlier = [r for r in earlier_runs if r.status == "FINISHED"]
        regressions, groups = find_regressions(finished, threshold, earlier)
    return Comparison(
        list(runs),
        finished,
        unfinished,
        sides,
        pairs,
        unpaired,
        build_grids(pairs),
        host_tables(finished),
        scaling,
        regressions,
        groups,
        threshold,
        tuple(serving_choices([s for group in sides.values() for s in group])),
    )
