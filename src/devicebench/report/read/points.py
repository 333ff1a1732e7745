"""The matmul sweep's per-size points of a run, and a served run's server tests, as the report reads them.

A matmul run logs each point twice (schema.matmul_point_key): a stepped series (step = matrix size) and a
flat key per size. `search_runs` returns only a series' latest value but every flat key, so a run is
whole from its search result: no history request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from devicebench.schema import LOADGEN_TEST_RE, MATMUL_POINT_RE, PRODUCT, SERVING, matmul_key

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


def server_tests(run: RunRecord) -> dict[str, list[tuple[float, float, bool]]]:
    """An infer run's LoadGen server tests per way in, from their flat keys (schema.loadgen_test_key):
    via -> [(QPS asked, p99 s, VALID)], in the order tried; {} for any other run or an older one."""
    found: dict[str, dict[int, dict[str, float]]] = {}
    if run.kind is not SERVING:
        return {}
    for k, v in run.metrics.items():
        m = LOADGEN_TEST_RE.match(k)
        if m:
            found.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
    return {
        via: [
            (t["qps"], t["p99_s"], t.get("valid") == 1.0)
            for _, t in sorted(tests.items())
            if "qps" in t and "p99_s" in t
        ]
        for via, tests in sorted(found.items())
    }
