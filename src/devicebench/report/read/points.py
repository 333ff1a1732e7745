"""The matmul sweep's per-size points of a run, as the report reads them.

A matmul run logs each point twice (schema.matmul_point_key): a stepped series (step = matrix size) and a
flat key per size. `search_runs` returns only a series' latest value but every flat key, so a run with
flat keys is whole from its search result; a run logged before them needs one history request per series
(fetch_history), and a run of one size needs none (its latest value is its only point).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from devicebench.schema import MATMUL_POINT_RE, PRODUCT, matmul_key

if TYPE_CHECKING:
    from devicebench.report.read.records import RunRecord

_TIME_FIGURES = ("time_s", "unsynced_time_s")
_MATMUL_TIME = re.compile(r"^matmul/([^/]+)/([^/]+)/(time_s|unsynced_time_s)$")


def flat_points(run: RunRecord) -> dict[str, dict[int, float]]:
    """The matmul time series a run carries as flat per-size metrics: stepped key -> {size: value}.

    Only the times are read (GFLOP/s is derived from them, 2n³/t); empty for runs logged before the
    flat keys existed.
    """
    out: dict[str, dict[int, float]] = {}
    for k, v in run.metrics.items():
        m = MATMUL_POINT_RE.match(k)
        if m and m.group(4) in _TIME_FIGURES:
            out.setdefault(matmul_key(m.group(1), m.group(2), m.group(4)), {})[int(m.group(3))] = v
    return out


def split_history(run: RunRecord) -> tuple[dict[str, dict[int, float]], list[str]]:
    """(the matmul time series the run's own search result already holds, the time keys whose
    per-size history must still be fetched).

    A series comes from the flat per-size keys where the run logged them, from the latest value where
    the run swept one size, and otherwise (a run older than the flat keys) from a history request.
    GFLOP/s is derived from the time (2n³/t), so only `time_s` and `unsynced_time_s` are fetched:
    half the round trips of fetching GFLOP/s too.
    """
    if run.kind is not PRODUCT:
        return {}, []
    keys = [k for k in run.metrics if _MATMUL_TIME.match(k)]
    flat = flat_points(run)
    sizes = run.sizes()
    known: dict[str, dict[int, float]] = {}
    missing = []
    for k in keys:
        if k in flat:
            known[k] = flat[k]
        elif len(sizes) == 1:
            known[k] = {sizes[0]: run.metrics[k]}
        else:
            missing.append(k)
    return known, missing


def fetch_history(client: Any, run_id: str, key: str) -> dict[int, float]:
    """One series' per-size points from its step history (one request): for runs without flat keys."""
    return {int(m.step): float(m.value) for m in client.get_metric_history(run_id, key)}
