"""Whether a pair's or a side's figures can be trusted at all: measured on a busy host, repeats spread
wide, or a single run. Said before any reason for a speedup (pair_rules.py), with what to do: a figure
that noise or a busy host makes unreliable says so wherever it is shown.
"""

from __future__ import annotations

from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.schema import HOST_OTHERS_SHARE
from devicebench.util.busy_host import RERUN, busy_caveat
from devicebench.util.fmt import fmt_share
from devicebench.util.stats import Stat

NOISY_SPREAD = 0.5  # repeats spread over more than 50 % of their median


def _spread(side: Side) -> Stat | None:
    """The side's headline time where its repeats spread over more than NOISY_SPREAD of their median."""
    key = side.time_metric()
    s = side.metrics[key] if key else None
    return s if s is not None and s.n > 1 and s.rel_spread > NOISY_SPREAD else None


def noisy_side(side: Side) -> str | None:
    """`noisy: cpu repeats spread 440% of their median; add repeats`: a side whose middle figure says
    less than its range (one config's runs read 1.44 s, 9.86 s and 1.91 s), or None."""
    s = _spread(side)
    if s is None:
        return None
    return f"noisy: {side.device} repeats spread {fmt_share(s.rel_spread)} of their median; add repeats"


def noisy(pair: Pair) -> str | None:
    """Repeats spread over half their median: the speedup's range matters more than its middle."""
    spread = [(s, st) for s in (pair.base, pair.other) if (st := _spread(s)) is not None]
    return noisy_side(max(spread, key=lambda x: x[1].rel_spread)[0]) if spread else None


def busy_side(side: Side) -> str | None:
    """`measured on a busy host: other processes took 63% of its CPU (load 4.1) in 2/3 runs; rerun
    when the host is idle`: a side some of whose runs shared their cores with other processes
    (util/busy_host.py), the busiest named; None where none did or no run measured it."""
    runs = side.busy_runs
    if not runs:
        return None
    worst = max(runs, key=lambda r: r.metrics[HOST_OTHERS_SHARE])
    said = busy_caveat(worst.metrics).removeprefix("busy host: ")
    return f"{side.device} measured on a busy host: {said} in {len(runs)}/{len(side.runs)} runs; {RERUN}"


def busy_host(pair: Pair) -> str | None:
    """A side timed while other processes took its cores measured the sharing as much as the device:
    the speedup may be either side's neighbours."""
    return next((said for side in (pair.base, pair.other) if (said := busy_side(side))), None)


def single_repeat(pair: Pair) -> str | None:
    """One run per side has no spread: the pair may be luck; say so rather than imply certainty."""
    if len(pair.base.runs) > 1 and len(pair.other.runs) > 1:
        return None
    return "one run on a side: no spread yet; repeat to trust the speedup"


def unreliable(side: Side) -> str:
    """`busy host` or `noisy` for a side whose times a table shows but cannot vouch for (its verdict
    says why and what to do), else ""."""
    if side.busy_runs:
        return "busy host"
    return "noisy" if _spread(side) is not None else ""
