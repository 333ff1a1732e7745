"""How the report spells a value: times, speedups, shares, bytes, quality figures.

Every writer (Markdown, HTML, terminal) shows the same strings, so the spelling lives here once; a
speedup is spelled by `schema.fmt_speedup`, which the verdicts use too.
"""

from __future__ import annotations

import math

from devicebench.report.sides import Side, Stat
from devicebench.schema import PEAK_BYTES, PEAK_RSS_BYTES, fmt_speedup

NONE = "–"  # what a cell shows when there is nothing to show


def fmt_s(x: float | None) -> str:
    if x is None:
        return NONE
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def fmt_stat_s(s: Stat | None) -> str:
    if s is None:
        return NONE
    if s.n == 1:
        return fmt_s(s.median)
    return f"{fmt_s(s.median)} ({fmt_s(s.lo)}–{fmt_s(s.hi)}, n={s.n})"


def fmt_x(x: float | None) -> str:
    """A speedup, or a dash where there is none (no common time, or a zero that made it infinite)."""
    if x is None or not math.isfinite(x):
        return NONE
    return fmt_speedup(x)


def _rate(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def fmt_rate(s: Stat | None) -> str:
    """A throughput (samples per second) with the repeats' range, like `fmt_stat_s` for times."""
    if s is None:
        return NONE
    if s.n == 1:
        return _rate(s.median)
    return f"{_rate(s.median)} ({_rate(s.lo)}–{_rate(s.hi)}, n={s.n})"


def fmt_efficiency(x: float | None) -> str:
    """A scaling efficiency (speedup / ideal speedup) as a plain fraction: 1.00 is perfect scaling."""
    return NONE if x is None or not math.isfinite(x) else f"{x:.2f}"


def fmt_share(s: Stat | None) -> str:
    return NONE if s is None else f"{s.median:.0%}"


def fmt_bytes(s: Stat | None) -> str:
    if s is None:
        return NONE
    x = s.median
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def fmt_q(s: Stat | None) -> str:
    if s is None:
        return NONE
    return f"{s.median:.3f}" if s.n == 1 else f"{s.median:.3f} ({s.lo:.3f}–{s.hi:.3f})"


def fmt_memory(side: Side) -> str:
    """A side's peak memory, saying which kind: on CUDA what the caching allocator handed out
    (`max_memory_allocated`) beside the process's RSS; elsewhere the process's peak RSS, which is all
    `memory/peak_bytes` holds there. A bare number of each kind side by side read as one measure."""
    rss = side.metrics.get(PEAK_RSS_BYTES)
    if side.device.startswith("cuda"):
        return f"GPU alloc {fmt_bytes(side.metrics.get(PEAK_BYTES))}, RSS {fmt_bytes(rss)}"
    return f"RSS {fmt_bytes(rss or side.metrics.get(PEAK_BYTES))}"
