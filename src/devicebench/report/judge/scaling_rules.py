"""The rules that explain a scaling series: why a data-parallel job gained less than N times.

One rule per function of a series and one of its world sizes, `SCALING_RULES` their order, as the pair
rules in pair_rules.py; thresholds are module constants a test (or a reader) can see.
"""

from __future__ import annotations

from collections.abc import Callable

from devicebench.report.model.scaling import Point, Series
from devicebench.util.fmt import fmt_efficiency, fmt_share

SCALING_EFFICIENCY = 0.7  # a job of N processes training under 0.7 × N times as fast as one process
COMM_MINOR_SHARE = 0.1  # all-reduce at most 10 % of training (an upper bound) cannot explain poor scaling


def poor_scaling(series: Series, point: Point) -> str | None:
    """A data-parallel job well short of N times the base's throughput: the extra processes cost more
    than they gave.

    `dist/comm_share` is an upper bound on the time spent communicating (DDP overlaps the all-reduce with
    the backward pass). Where the runs logged it and it is small, communication cannot be the reason, and
    the verdict says so rather than blame it; where it is large or unknown, communication is the usual
    cause, and more work per all-reduce (a larger batch) or fewer processes is the fix.
    """
    eff, base = point.efficiency, series.base_n
    if eff is None or base is None or point.world_size == base or eff >= SCALING_EFFICIENCY:
        return None
    at = f"at {point.world_size} {series.unit}"
    over = "" if base == 1 else f" over {base}"
    comm = point.comm_share
    if comm is not None and comm.median < COMM_MINOR_SHARE:
        return (
            f"scales poorly {at} (efficiency {fmt_efficiency(eff)}{over}) though all-reduce took at most "
            f"{fmt_share(comm)} of training: not communication; look at data wait and the slowest rank"
        )
    share = f"; all-reduce up to {fmt_share(comm)} of training" if comm is not None else ""
    return (
        f"communication-bound {at} (efficiency {fmt_efficiency(eff)}{over}{share}): larger batch or fewer "
        "processes"
    )


SCALING_RULES: tuple[Callable[[Series, Point], str | None], ...] = (poor_scaling,)


def explain_scaling(series: Series, point: Point) -> list[str]:
    """Every scaling rule that applies at one world size of a series, in SCALING_RULES order."""
    return [line for rule in SCALING_RULES if (line := rule(series, point))]
