"""Whether a run was measured on a busy host, said from its `host/*` figures (host/busy.py measures them):
one judgement, so a run's own line, the report's tables and its verdicts say the same thing in the same
words; and whether its host's CPU was too unsteady for a p99 to be the model's (host/steadiness.py).

At BUSY_SHARE of the run's cores' time taken by other processes, a timing measures the sharing as much
as the device: repeats of one config on a shared host differ several-fold (docs/measured.md, a busy
host). A busy loop on each core beside a one-thread run takes most of its cores, far over the threshold.
Torch- and mlflow-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from devicebench.schema import HOST_LOAD_1M, HOST_OTHERS_SHARE, HOST_SLOWDOWN, HOST_TAIL_RATIO
from devicebench.util.fmt import fmt_share, fmt_x
from devicebench.util.stats import is_figure

BUSY_SHARE = 0.25
# A fixed piece of work's p99 over its median (host/steadiness.py) from which a served p99 is said to
# measure the host: a quiet machine of its own reads near 1
UNSTEADY_RATIO = 1.5
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


def tail_caveat(figures: Mapping[str, float]) -> str:
    """`unsteady host: a fixed piece of work's p99 was 2.9× its median, so a p99 measures the host as
    much as the model`, or "" on a steady host (or where no one measured it)."""
    ratio = figures.get(HOST_TAIL_RATIO)
    if not is_figure(ratio) or ratio < UNSTEADY_RATIO:
        return ""
    return (
        f"unsteady host: a fixed piece of work's p99 was {fmt_x(ratio)} its median, so a p99 "
        "measures the host as much as the model"
    )
