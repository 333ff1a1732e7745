"""Whether a run was measured on a busy host, said from its `host/*` figures (host/busy.py measures them):
one judgement, so a run's own line, the report's tables and its verdicts say the same thing in the same
words.

At BUSY_SHARE of the run's cores' time taken by other processes, a timing measures the sharing as much
as the device: repeats of one config on a shared host differ several-fold (docs/measured.md, a busy
host). A busy loop on each core beside a one-thread run takes most of its cores, far over the threshold.
Torch- and mlflow-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from devicebench.schema import HOST_LOAD_1M, HOST_OTHERS_SHARE, HOST_SLOWDOWN
from devicebench.util.fmt import fmt_share, fmt_x
from devicebench.util.stats import is_figure

BUSY_SHARE = 0.25
RERUN = "rerun when the host is idle"


def is_busy(figures: Mapping[str, float]) -> bool:
    """Whether other processes took at least BUSY_SHARE of the run's cores while it ran."""
    share = figures.get(HOST_OTHERS_SHARE)
    return is_figure(share) and share >= BUSY_SHARE


def busy_caveat(figures: Mapping[str, float]) -> str:
    """`busy host: other processes took 63% of its CPU (load 4.1), 11.2× the time of the last quiet run
    of its config`, or "" on a host that was quiet enough (or where no one measured it). The share
    alone understates it: 56% of the CPU taken cost one run 11× its time."""
    if not is_busy(figures):
        return ""
    load = figures.get(HOST_LOAD_1M)
    said = f" (load {load:.1f})" if is_figure(load) else ""
    slow = figures.get(HOST_SLOWDOWN)
    cost = f", {fmt_x(slow)} the time of the last quiet run of its config" if is_figure(slow) else ""
    return f"busy host: other processes took {fmt_share(figures[HOST_OTHERS_SHARE])} of its CPU{said}{cost}"
