"""The rules that explain a pair's speedup: why a GPU gained what it gained.

A number alone says *that* a GPU gained little; these rules say *why*, from what the workloads measured
apart on purpose (data wait vs compute, synchronised vs unsynchronised time, quality per device).
Each rule is a small pure function of one pair that returns a one-line reason or None; `RULES` is their
order in the report, here in one place. The rules live by theme: whether a figure can be trusted
(reliability.py), each device at its best (best_rules.py), money (price_rules.py), the GPU side
(gpu_rules.py), the CPU's timing (cpu_rules.py), and what is left here (two hosts, quality, synthetic
data). A scaling series has its own rules (scaling_rules.py), and a regression is the model's finding
(model/regressions.py), not a rule. The thresholds are module constants so a test (or a reader) can see
what "clearly" means.
"""

from __future__ import annotations

from collections.abc import Callable

from devicebench.report.judge.best_rules import against_best_cpu, best_against_best
from devicebench.report.judge.cpu_rules import oversubscribed, oversubscribed_alone, thread_mismatch
from devicebench.report.judge.gpu_rules import (
    compute_bound,
    gpu_held_down,
    gpu_slower,
    host_bound_gpu,
    launch_bound,
    loader_bound,
    peak_share,
    strict_fp32_on_tf32_gpu,
    unsynced_underreport,
)
from devicebench.report.judge.price_rules import price_performance
from devicebench.report.judge.reliability import (
    busy_host,
    busy_side,
    noisy,
    noisy_side,
    single_repeat,
    unsteady_host,
    unsteady_side,
)
from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.schema import ACCURACY, MIOU
from devicebench.util.fmt import fmt_quality
from devicebench.util.stats import Stat

QUALITY_ABS = 0.05  # accuracy / mIoU differ by more than 5 points...


def across_hosts(pair: Pair) -> str | None:
    """Two sides from different machines (a CPU shape's runs beside a GPU shape's, or the same config
    run on two hosts) may be the comparison the user wants, but it is not one device against another on
    one host: the line says which hosts, first, so no table shows it as a plain speedup."""
    base, other = set(pair.base.hosts), set(pair.other.hosts)
    if base == other or pair.base.shape != pair.other.shape:  # two shapes: two machines, and labelled so
        return None
    return (
        f"the sides ran on different hosts ({pair.base.device}: {', '.join(sorted(base))}; {pair.other.device}: "
        f"{', '.join(sorted(other))}): a comparison of two machines, not of two devices of one"
    )


def synthetic_data(pair: Pair) -> str | None:
    """Synthetic data times the real compute but its accuracy means nothing: say so on every such pair."""
    sides = [s for s in (pair.base, pair.other) if s.data == "synthetic"]
    if not sides:
        return None
    return "synthetic data: timings are real, accuracy/mIoU are not comparable with the real dataset"


def _quality_pair(pair: Pair) -> tuple[str, Stat, Stat] | None:
    for key in (ACCURACY, MIOU):
        a, b = pair.base.metrics.get(key), pair.other.metrics.get(key)
        if a is not None and b is not None:
            return key, a, b
    return None


def quality_mismatch(pair: Pair) -> str | None:
    """Same config, clearly different quality: a numerical or nondeterminism problem, not a speedup.

    "Clearly" means more than QUALITY_ABS apart *and* outside both sides' spread of repeats.
    """
    found = _quality_pair(pair)
    if found is None:
        return None
    key, a, b = found
    gap = abs(a.median - b.median)
    if gap <= QUALITY_ABS:
        return None
    if (a.median < b.median and a.hi >= b.lo) or (a.median > b.median and b.hi >= a.lo):
        return None  # the repeats' ranges overlap: noise, not a mismatch
    return (
        f"quality differs: {key} {fmt_quality(a.median)} on {pair.base.device} vs {fmt_quality(b.median)} on "
        f"{pair.other.device} for the same config"
    )


RULES: tuple[Callable[[Pair], str | None], ...] = (
    busy_host,
    unsteady_host,
    across_hosts,
    against_best_cpu,
    best_against_best,
    oversubscribed,
    price_performance,
    loader_bound,
    launch_bound,
    peak_share,
    host_bound_gpu,
    gpu_held_down,
    gpu_slower,
    unsynced_underreport,
    strict_fp32_on_tf32_gpu,
    quality_mismatch,
    compute_bound,
    thread_mismatch,
    synthetic_data,
    noisy,
    single_repeat,
)


def explain(pair: Pair) -> list[str]:
    """Every rule that applies to the pair, in RULES order (the first is the headline verdict). A pair
    with a side measured only on a busy host has that one verdict: the others would read its neighbours."""
    unusable = busy_host(pair)
    return [unusable] if unusable else [line for rule in RULES if (line := rule(pair))]


# The rules of a side without a partner device (its price's break-even is said apart: `break_even`)
SIDE_RULES: tuple[Callable[[Side], str | None], ...] = (
    busy_side,
    unsteady_side,
    oversubscribed_alone,
    noisy_side,
)


def explain_side(side: Side) -> list[str]:
    """Every side rule that applies to a side without a partner, in SIDE_RULES order (only the first
    where its figures are unusable)."""
    unusable = busy_side(side)
    return [unusable] if unusable else [line for rule in SIDE_RULES if (line := rule(side))]
