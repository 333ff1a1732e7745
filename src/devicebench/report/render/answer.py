"""The answer a report opens on, per config: who is faster, by how much, what it costs, and the verdict.

report.html, report.md and the report run's description all start with these lines (content.py,
headline.py), before any definition or table: the figures are the pairs' and the sides' own
(model/), the verdict is the judgement's first line, so the answer and the tables below cannot
disagree.
"""

from __future__ import annotations

from devicebench.report.judge.best_rules import best_against_best
from devicebench.report.judge.judgement import Judgement
from devicebench.report.judge.reliability import left_out_lines, unreliable
from devicebench.report.model.cost import side_cost
from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.report.render.money import Describe, time_text
from devicebench.schema import TRAINING
from devicebench.util.fmt import fmt_money, fmt_x

Answer = tuple[str, tuple[str, ...]]  # a lead line and the lines under it


def faster_text(p: Pair) -> str:
    """`cuda:0 (A10) is 10.0× faster than cpu (EPYC) (9.52×–10.5×)`, the slower side named second
    whichever it is; `no common time` where the two sides timed nothing alike."""
    x = p.headline
    if x is None or x <= 0:
        return f"{p.other.label} and {p.base.label}: no common time to compare"
    rng = (
        p.speedup_range
        if p.speedup_range and fmt_x(p.speedup_range[0]) != fmt_x(p.speedup_range[1])
        else None
    )
    if x >= 1:
        fast, slow, by = p.other, p.base, x
        spread = f" ({fmt_x(rng[0])}–{fmt_x(rng[1])})" if rng else ""
    else:
        fast, slow, by = p.base, p.other, 1 / x
        spread = f" ({fmt_x(1 / rng[1])}–{fmt_x(1 / rng[0])})" if rng and rng[0] > 0 else ""
    marks = [f"{s.device} {m}" for s in (p.base, p.other) if (m := unreliable(s))]
    doubt = f", ⚠ {', '.join(marks)}" if marks else ""
    return f"{fast.label} is {fmt_x(by)} faster than {slow.label}{spread}{doubt}"


def cost_text(p: Pair) -> str:
    """`cost per epoch: $0.000120 on cuda:0 against $0.000340 on cpu (0.35×)`, against the CPU at
    its best where the cost was taken so; or why no cost is compared."""
    c = p.cost
    base = p.cost_base
    if c is None or c.cost_ratio is None:
        missing = next((s for s in (base, p.other) if not s.price.known), None)
        why = (
            f"{missing.device} has no price ({missing.price.none_reason})"
            if missing
            else "prices in two currencies"
        )
        return f"cost not compared: {why}"
    cur = base.price.currency
    best = " (the CPU at its best)" if base is not p.base else ""
    made_up = "; illustrative prices" if base.price.illustrative or p.other.price.illustrative else ""
    return (
        f"cost per {c.unit}: {fmt_money(c.other.per_unit, cur)} on {p.other.device} against "
        f"{fmt_money(c.base.per_unit, cur)} on {base.device}{best} ({fmt_x(c.cost_ratio)}{made_up})"
    )


def pair_answer(judged: Judgement, p: Pair, config: str) -> Answer:
    """A pair's answer: who is faster and by how much, then its cost, each device at its best against
    the other where a faster setting than the pair's own was measured, and its headline verdict; only
    that a figure is unusable where a side ran on a busy host alone."""
    verdicts = judged.of(p)
    left = tuple(line for s in (p.base, p.other) for line in left_out_lines(s))
    if p.base.unusable or p.other.unusable:
        return f"{config}: no answer: {verdicts[0]}", (f"as measured: {faster_text(p)}", *left)
    best = best_against_best(p)
    lines = (cost_text(p), *(f"best against best: {best}",) * bool(best))
    lines += (*(f"verdict: {verdicts[0]}",) * bool(verdicts), *left)
    return f"{config}: {faster_text(p)}", lines


def side_answer(judged: Judgement, side: Side, config: str) -> Answer:
    """A config that ran on one device only: its time per unit and cost, then what a GPU must do to
    be worth it, or what its own figures measure; only that its figure is unusable where it ran on a
    busy host alone."""
    c = side_cost(side)
    said = judged.alone(side)
    if side.unusable:
        return f"{config}: no answer: {said[0]}", (f"as measured: {time_text(side, c)}",)
    cost = f", {fmt_money(c.per_unit, side.price.currency)} per {c.unit}" if c.per_unit else ""
    said = ([judged.break_even[side]] if side in judged.break_even else []) + said
    lines = tuple(f"verdict: {line}" for line in said[:1]) + tuple(said[1:]) + tuple(left_out_lines(side))
    lines += (tune_hint(judged, side),) * bool(tune_hint(judged, side))
    doubt = f", ⚠ {mark}" if (mark := unreliable(side)) else ""
    return f"{config}: only {side.label} ran: {time_text(side, c)}{cost}{doubt}", lines


def tune_hint(judged: Judgement, side: Side) -> str:
    """`next: devicebench tune cifar with its run's flags measures this CPU at its best`, for a CPU side
    without a GPU partner whose work no tuned run has measured: the clearest answer a host without a
    GPU can give (the best CPU is what a GPU must beat)."""
    kind = side.kind
    if not side.is_cpu or side.tuned or kind is not TRAINING:
        return ""
    if any(s.tuned and s.work_key == side.work_key for s in judged.comp.all_sides):
        return ""
    return f"next: devicebench tune {side.workload} with its run's flags measures this CPU at its best"


def answers(judged: Judgement, describe: Describe) -> list[Answer]:
    """Every config's answer: each pair (CPU/GPU first, as the pairs are ordered), then each config
    without a partner device, then each served model's cheapest device within its p99 promise."""
    comp = judged.comp
    out = [pair_answer(judged, p, describe(p.base)) for p in comp.pairs]
    out += [side_answer(judged, s, describe(s)) for s in comp.unpaired]
    return out + [(f"serving {describe(c.cheapest)}: {line}", ()) for c, line in judged.serving.items()]
