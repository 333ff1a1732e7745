"""The pairs as a plain fixed-width table for the terminal (no colours: it lands in CI logs too)."""

from __future__ import annotations

from collections.abc import Sequence

from devicebench.report.compare import Comparison
from devicebench.report.content import describe, pair_row, varying_params
from devicebench.report.fmt import NONE, fmt_efficiency, fmt_stat_s, fmt_x
from devicebench.report.scaling import Series

# "best CPU": the speedup over this CPU at its best (its setting is in the verdict and report.md)
HEADERS = ["workload", "config", "base", "other", "speedup", "best CPU", "price", "cost", "wait", "verdict"]
MAX_WIDTH = 48  # a column is cut here; report.md has every cell whole


def _table(rows: list[list[str]]) -> list[str]:
    widths = [min(max(len(str(x)) for x in col), MAX_WIDTH) for col in zip(HEADERS, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(HEADERS), line(["-" * w for w in widths]), *map(line, rows)]


def scaling_line(s: Series, varying: dict[str, list[str]]) -> str:
    """One series in a line: the efficiency at each world size, and its verdicts."""
    effs = ", ".join(f"{fmt_efficiency(p.efficiency)} at {p.world_size}" for p in s.points)
    verdict = f": {'; '.join(s.verdicts)}" if s.verdicts else ""
    return (
        f"scaling: {s.workload} {describe(s.points[0].side, varying)} on {s.label}: efficiency {effs} "
        f"(over N={s.base_text}){verdict}"
    )


def terminal_table(comp: Comparison, limit: int = 40) -> str:
    """The run counts, the pairs (headline verdict only) and the configs without a partner."""
    varying = varying_params(comp.all_sides)
    rows = []
    for p in comp.pairs:
        r = pair_row(p, varying)
        verdict = p.verdicts[0] if p.verdicts else NONE
        price, best = fmt_x(p.price_ratio), fmt_x(p.speedups.get("best_cpu"))
        rows.append(
            [
                r.workload,
                r.config,
                r.base,
                r.other,
                r.speedup,
                best,
                price,
                r.cost_ratio,
                r.data_wait,
                verdict,
            ]
        )
    lines = [
        f"{len(comp.runs)} runs: {len(comp.finished)} finished, {len(comp.unfinished)} not; "
        f"{len(comp.pairs)} pairs; {len(comp.unpaired)} configs without a partner device"
    ]
    if rows:
        lines += _table(rows[:limit])
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more pairs in report.md")
    for s in comp.unpaired[:limit]:
        lines.append(
            f"no partner: {s.workload} {describe(s, varying)} on {s.label} ({len(s.runs)} run(s), "
            f"{fmt_stat_s(s.metrics.get(s.time_metric() or ''))})"
        )
    if len(comp.unpaired) > limit:
        lines.append(f"... {len(comp.unpaired) - limit} more configs without a partner in report.md")
    lines.extend(scaling_line(s, varying) for s in comp.scaling[:limit])
    if len(comp.scaling) > limit:
        lines.append(f"... {len(comp.scaling) - limit} more scaling series in report.md")
    return "\n".join(lines)
