"""The rules that answer against each device at its best: the GPU against the fastest CPU setting
measured for the same work, and each device's best against the other's (model/best_cpu.py finds them),
with what a reduced precision or a compile cost. Small pure functions (pair_rules orders them).
"""

from __future__ import annotations

import math

from devicebench.report.judge.gpu_rules import LOADER_BOUND_SHARE, loader_hint
from devicebench.report.model.best_cpu import reduced_precision, setting_of, throughput
from devicebench.report.model.pairs import Pair
from devicebench.report.model.price import number
from devicebench.report.model.sides import Side
from devicebench.schema import ACCURACY, COMPILE_S, MIOU, TRAIN_S
from devicebench.util.fmt import fmt_quality, fmt_s, fmt_share, fmt_x

BARELY = 2.0  # against the CPU at its best, a GPU less than 2x faster barely helps this model
HELD_BACK_SHARE = 0.25  # a GPU side that waited for data this much was measured through its loader
TIE = (0.9, 1.1)  # against the CPU at its best, a speedup in this band is no gain either way


def against_best_cpu(pair: Pair) -> str | None:
    """Where a faster CPU configuration of the same work was measured, the pair's answer is against it:
    "against this CPU at its best (4 threads, data in memory) the H100 is 1.2x faster: not worth its
    price for this model". Worth it or not from the costs where both sides are priced (then against
    the best CPU), else from the speedup alone. A GPU side that waited for its loader was not measured
    at its best, while the CPU was: the line says so, or a loader-bound GPU reads as slower than the
    tuned CPU (docs/measured.md, the H100 host)."""
    best, speedup = pair.best_cpu, pair.best_cpu_speedup
    if best is None or speedup is None or best is pair.base:
        return None
    said = (
        f"against this CPU at its best ({setting_of(best)}) {pair.other.label} is {fmt_x(speedup)} "
        f"{'faster' if speedup >= 1 else 'as fast'}"
    )
    ratio = pair.cost_ratio
    if ratio is not None:
        answer = f"{'worth' if ratio < 1 else 'not worth'} its price for this model"
    elif TIE[0] <= speedup < TIE[1]:
        answer = "no gain for this model"
    elif speedup < 1:
        answer = "the CPU wins for this model"
    else:
        answer = f"{'barely a gain' if speedup < BARELY else 'a clear gain'} for this model"
    wait = pair.other.wait_share
    if (
        wait is not None and HELD_BACK_SHARE < wait.median <= LOADER_BOUND_SHARE
    ):  # above: loader_bound says it
        answer += (
            f", but the GPU side waited for data {fmt_share(wait)} of its training time: it is not at its "
            f"best in this pair{loader_hint(pair.other)}"
        )
    return f"{said}: {answer}"


def best_against_best(pair: Pair) -> str | None:
    """Each device at its best, where a GPU setting faster than the pair's own was measured: "each at its
    best (CPU: 2 threads, data in memory; cuda: data in memory, compiled with CUDA graphs) the GPU is
    9.10x faster, at 0.40x the CPU's cost". A best that needed reduced precision says so, with its
    accuracy beside the full-precision side's; a compiled one what compiling took and when it pays back."""
    both = pair.best
    if both is None:
        return None
    said = (
        f"each at its best ({both.cpu.device}: {setting_of(both.cpu)}; {both.gpu.device}: "
        f"{setting_of(both.gpu)}) the GPU is {fmt_x(both.speedup)} {'faster' if both.speedup >= 1 else 'as fast'}"
    )
    if both.cost_ratio is not None:
        said += f", at {fmt_x(both.cost_ratio)} the CPU's cost"
    notes = (
        _precision_cost(both.gpu, pair.other),
        _precision_cost(both.cpu, pair.base),
        _payback(both.gpu),
        _payback(both.cpu),
    )
    return "; ".join([said, *(n for n in notes if n)])


def _precision_cost(best: Side, configured: Side) -> str | None:
    """What a best in reduced precision cost in quality, against the same device at full precision."""
    precision = reduced_precision(best)
    if precision is None or reduced_precision(configured):
        return None
    for key in (ACCURACY, MIOU):
        a, b = best.metrics.get(key), configured.metrics.get(key)
        if a is not None and b is not None:
            return (
                f"{best.device}'s best uses {precision} autocast, which changes the numerics: {key} "
                f"{fmt_quality(a.median)} against {fmt_quality(b.median)} at full precision"
            )
    return f"{best.device}'s best uses {precision} autocast, which changes the numerics (no quality to set beside it)"


def _payback(side: Side) -> str | None:
    """A compiled best: its compile time, and after how many epochs the time it saves a step repays
    it, from the same setting's uncompiled trial where the tuning measured one."""
    compile_s, rate, train = side.metrics.get(COMPILE_S), throughput(side), side.metrics.get(TRAIN_S)
    if compile_s is None or not rate or train is None:
        return None
    graphs = " with CUDA graphs" if side.params.get("compile_mode") == "reduce-overhead" else ""
    said = f"{side.device} compiled{graphs}: {fmt_s(compile_s.median)} to compile"
    eager = number(side.runs[0].tag("tuned.eager_median_samples_per_s"))
    epochs = int(number(side.params.get("epochs", "")) or 1)
    images = rate * train.median / epochs  # one epoch's samples
    saved = images / eager - images / rate if eager else 0.0
    if saved > 0:
        return f"{said}, which pays back after {math.ceil(compile_s.median / saved):,} epochs"
    return said if eager is None else f"{said}, and it was no faster than uncompiled"
