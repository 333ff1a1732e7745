"""Whether a pair's or a side's figures can be trusted at all: measured on a busy host, a served side's
p99 on an unsteady CPU, repeats spread wide, or a single run. Said before any reason for a speedup
(pair_rules.py), with what to do: a figure that noise or a busy host makes unreliable says so wherever
it is shown.
"""

from __future__ import annotations

from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.schema import HOST_OTHERS_SHARE, HOST_TAIL_RATIO
from devicebench.util.busy_host import RERUN, busy_caveat, tail_caveat
from devicebench.util.fmt import fmt_s, fmt_share, fmt_x
from devicebench.util.stats import Stat, is_figure

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
    """`cpu figure unusable: measured only on a busy host (other processes took 63% of its CPU (load 4.1)
    in 2/2 runs); rerun when the host is idle`: a side every run of which shared its cores with other
    processes (util/busy_host.py), the busiest named; None where a quiet run exists (model/sides.py
    left the busy ones out) or no run measured it."""
    if not side.unusable:
        return None
    runs = side.busy_runs
    worst = max(runs, key=lambda r: r.metrics[HOST_OTHERS_SHARE])
    said = busy_caveat(worst.metrics).removeprefix("busy host: ")
    return (
        f"{side.device} figure unusable: measured only on a busy host ({said} in {len(runs)}/{len(side.runs)} "
        f"runs); {RERUN}"
    )


def busy_host(pair: Pair) -> str | None:
    """A side timed while other processes took its cores measured the sharing as much as the device:
    the speedup may be either side's neighbours."""
    return next((said for side in (pair.base, pair.other) if (said := busy_side(side))), None)


def unsteady_side(side: Side) -> str | None:
    """`cpu on an unsteady host: a fixed piece of work's p99 was 2.60× its median, so a p99 measures the
    host as much as the model`: a served side whose CPU probe (host/steadiness.py) read unsteady in any
    of its runs, the worst said; None where every run's host was steady or none measured it."""
    ratios = [r.metrics[HOST_TAIL_RATIO] for r in side.runs if is_figure(r.metrics.get(HOST_TAIL_RATIO))]
    said = tail_caveat({HOST_TAIL_RATIO: max(ratios)}) if ratios else ""
    return f"{side.device} on an {said}" if said else None


def unsteady_host(pair: Pair) -> str | None:
    """A served side's p99 on an unsteady CPU is the host's tail as much as the model's: said before
    which device serves cheaper within the promise."""
    return next((said for side in (pair.base, pair.other) if (said := unsteady_side(side))), None)


def left_out_lines(side: Side) -> list[str]:
    """`left out: cifar-cpu-3f2a measured on a busy host (other processes took 56% of its CPU (load 7.5)):
    12.23 s, 11.2× the 1.09 s of the quiet runs`, one per run the side's figures leave out."""
    key = side.time_metric()
    quiet = side.metrics[key].median if key else None
    out = []
    for r in side.left_out:
        took = busy_caveat(r.metrics).removeprefix("busy host: ")
        t = r.metrics.get(key) if key else None
        cost = f": {fmt_s(t)}, {fmt_x(t / quiet)} the {fmt_s(quiet)} of the quiet runs" if t and quiet else ""
        out.append(
            f"left out: {r.run_name or r.run_id} on {side.device} measured on a busy host ({took}){cost}"
        )
    return out


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
