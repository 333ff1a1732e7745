"""The comparison judged: every pair's and every scaling point's verdict lines, held beside the model's
records (which stay as they were built), for the writers to read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from devicebench.report.judge.pair_rules import explain, explain_side
from devicebench.report.judge.price_rules import break_even, serving_choice
from devicebench.report.judge.scaling_rules import explain_scaling
from devicebench.report.model.comparison import Comparison
from devicebench.report.model.pairs import Pair
from devicebench.report.model.scaling import Point, Series
from devicebench.report.model.serving import ServingChoice
from devicebench.report.model.sides import Side


@dataclass(frozen=True)
class Judgement:
    """A comparison and what the rules say of it; the first line of a pair is its headline verdict."""

    comp: Comparison
    pair_lines: Mapping[Pair, tuple[str, ...]]
    point_lines: Mapping[Point, tuple[str, ...]]
    break_even: Mapping[Side, str]  # CPU sides without a GPU partner: how much faster a GPU must be
    side_lines: Mapping[Side, tuple[str, ...]]  # sides without a partner: what their figures measure
    serving: Mapping[ServingChoice, str]  # each served model: its cheapest device within the promise

    def of(self, pair: Pair) -> list[str]:
        """The pair's verdict lines, in pair_rules.RULES order (none for a pair this comparison lacks:
        a per-host table's pairs are judged in the main table)."""
        return list(self.pair_lines.get(pair, ()))

    def at(self, point: Point) -> list[str]:
        return list(self.point_lines.get(point, ()))

    def alone(self, side: Side) -> list[str]:
        """A side without a partner's verdict lines, in pair_rules.SIDE_RULES order (an oversubscribed
        CPU); none for a side that has a partner (its pair says it)."""
        return list(self.side_lines.get(side, ()))

    def series(self, series: Series) -> list[str]:
        """Every verdict of a scaling series, smallest world size first."""
        return [line for p in series.points for line in self.at(p)]


def judge(comp: Comparison) -> Judgement:
    """Every rule over every pair and every point of every scaling series, once."""
    return Judgement(
        comp,
        {p: tuple(explain(p)) for p in comp.pairs},
        {pt: tuple(explain_scaling(s, pt)) for s in comp.scaling for pt in s.points},
        {s: line for s in comp.unpaired if not s.unusable and (line := break_even(s))},
        {s: tuple(lines) for s in comp.unpaired if (lines := explain_side(s))},
        {c: serving_choice(c) for c in comp.serving},
    )
