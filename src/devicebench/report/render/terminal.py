"""The pairs as a plain fixed-width table for the terminal (no colours: it lands in CI logs too)."""

from __future__ import annotations

from collections.abc import Sequence

from devicebench.report.judge.judgement import Judgement
from devicebench.report.judge.reliability import left_out_lines
from devicebench.report.model.scaling import Series
from devicebench.report.render.content import pair_items
from devicebench.report.render.labels import Varying, describe, varying_params
from devicebench.report.render.tables import PAIR_COLUMNS, TERMINAL, base_text, cells, headers, shown
from devicebench.util.fmt import fmt_efficiency, fmt_stat_s

MAX_WIDTH = 48  # a column is cut here; report.md has every cell whole


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [min(max(len(str(x)) for x in col), MAX_WIDTH) for col in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(head), line(["-" * w for w in widths]), *map(line, rows)]


def scaling_line(judged: Judgement, s: Series, varying: Varying) -> str:
    """One series in a line: the efficiency at each world size, and its verdicts."""
    effs = ", ".join(f"{fmt_efficiency(p.efficiency)} at {p.world_size}" for p in s.points)
    said = judged.series(s)
    verdict = f": {'; '.join(said)}" if said else ""
    return (
        f"scaling: {describe(s.points[0].side, varying)} on {s.label}: efficiency {effs} "
        f"(over N={base_text(s)}){verdict}"
    )


def terminal_table(judged: Judgement, limit: int = 40) -> str:
    """The run counts, the pairs (headline verdict only) and the configs without a partner."""
    comp = judged.comp
    varying = varying_params(comp.all_sides)
    columns = shown(PAIR_COLUMNS, TERMINAL)
    rows = cells(columns, pair_items(judged, comp.pairs, varying), short=True)
    lines = [
        f"{len(comp.runs)} runs: {len(comp.finished)} finished, {len(comp.unfinished)} not; "
        f"{len(comp.pairs)} pairs; {len(comp.unpaired)} configs without a partner device"
    ]
    if rows:
        lines += _table(headers(columns, short=True), rows[:limit])
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more pairs in report.md")
    for s in comp.unpaired[:limit]:
        lines.append(
            f"no partner: {describe(s, varying)} on {s.label} ({len(s.runs)} run(s), "
            f"{fmt_stat_s(s.metrics.get(s.time_metric() or ''))})"
        )
        lines.extend(f"  {line}" for line in judged.alone(s))
    lines.extend(f"price: {describe(s, varying)}: {line}" for s, line in judged.break_even.items())
    lines.extend(f"serving: {describe(c.cheapest, varying)}: {line}" for c, line in judged.serving.items())
    if len(comp.unpaired) > limit:
        lines.append(f"... {len(comp.unpaired) - limit} more configs without a partner in report.md")
    lines.extend(line for s in comp.all_sides for line in left_out_lines(s))  # busy runs no figure counts
    lines.extend(scaling_line(judged, s, varying) for s in comp.scaling[:limit])
    if len(comp.scaling) > limit:
        lines.append(f"... {len(comp.scaling) - limit} more scaling series in report.md")
    return "\n".join(lines)
