"""The matmul sweep's per-size points of a run, as the report reads them.

A matmul run logs each point twice (schema.matmul_point_key): a stepped series (step = matrix size) and a
flat key per size. `search_runs` returns only a series' latest value but every flat key, so a run is
whole from its search result: no history request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from devicebench.schema import MATMUL_POINT_RE, PRODUCT, matmul_key

if TYPE_CHECKING:
    from devicebench.report.read.records import RunRecord

_TIME_FIGURES = ("time_s", "unsynced_time_s")


def flat_points(run: RunRecord) -> dict[str, dict[int, float]]:
    """A matmul run's time series from its flat per-size metrics: stepped key -> {size: value}; {} for
    any other run. Only the times are read (GFLOP/s is derived from them, 2n³/t)."""
    out: dict[str, dict[int, float]] = {}
    if run.kind is not PRODUCT:
        return out
    for k, v in run.metrics.items():
        m = MATMUL_POINT_RE.match(k)
        if m and m.group(4) in _TIME_FIGURES:
            out.setdefault(matmul_key(m.group(1), m.group(2), m.group(4)), {})[int(m.group(3))] = v
    return out
