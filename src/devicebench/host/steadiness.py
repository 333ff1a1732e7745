"""How steady this host's CPU is: a fixed piece of pure-Python work timed back to back for a few seconds,
its p99 over its median.

On a quiet machine of its own that ratio is near 1. On a VM whose vCPU the hypervisor slows at times the
same piece takes up to three times as long now and then, and the guest counts the slow pieces as its
own CPU time (no steal, no other process: `host/busy.py` sees nothing). A p99 there is the host's tail
as much as the model's, so a served model's run measures this before LoadGen's tests and says it
(`util/busy_host.tail_caveat`). Torch- and mlflow-free.
"""

from __future__ import annotations

import time

from devicebench.schema import HOST_TAIL_P50_S, HOST_TAIL_P99_S, HOST_TAIL_RATIO
from devicebench.util.stats import quantile

PIECE = 20_000  # additions in one piece: about a millisecond of one core of a 2-GHz server CPU
PROBE_S = 2.0  # about a thousand pieces: enough for a p99


def _piece() -> int:
    total = 0
    for i in range(PIECE):
        total += i
    return total


def host_tail(seconds: float = PROBE_S) -> dict[str, float]:
    """The piece's median and p99 over `seconds` back to back, and their ratio, as `host/tail_*`."""
    times = []
    end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < end:
        _piece()
        times.append(time.perf_counter() - t0)
    times.sort()
    p50, p99 = quantile(times, 0.5), quantile(times, 0.99)
    return {HOST_TAIL_P50_S: p50, HOST_TAIL_P99_S: p99, HOST_TAIL_RATIO: p99 / p50}
