"""How money is said: a side's hourly price and where it came from, its cost per unit of work, what
a unit of money buys, a pair's price and cost cells, and `compare --budget`'s lines. The figures are
model/cost.py's; the spellings are util.fmt's."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from devicebench.pricing.prices import priced_as
from devicebench.report.model.cost import (
    DEADLINE_OF,
    GFLOP,
    MILLION,
    UNIT_OF_TIME,
    PairCost,
    SideCost,
    deadline_time,
    ranked,
    side_cost,
    unit_time,
    unit_time_stat,
)
from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.util.fmt import NONE, fmt_amount, fmt_money, fmt_s, fmt_stat_s, fmt_x

Describe = Callable[[Side], str]  # a side's config as the report spells it (labels.describe)

UNITS = {"epoch": "epochs", GFLOP: "GFLOP", "run": "runs", MILLION: "M predictions"}


def work_text(side: Side) -> str:
    """`81.3 epochs per USD`, `1,234,567 GFLOP per USD at n=8192 float32`, or the dash."""
    c = side_cost(side)
    if c.work_per_money is None:
        return NONE
    text = f"{fmt_amount(c.work_per_money)} {UNITS[c.unit]} per {side.price.currency or 'USD'}"
    if c.point is not None:
        text += f" at n={c.point[2]} {c.point[1]}"
    return text + (" (illustrative price)" if side.price.illustrative else "")


def price_text(side: Side) -> str:
    price = side.price.hourly
    if price is None:
        return f"{NONE} ({side.price.none_reason})"
    cur = side.price.currency
    spread = f"–{fmt_money(price.hi, cur)}" if price.hi > price.lo else ""
    text = f"{fmt_money(price.lo if spread else price.median, cur)}{spread}"
    return f"{text} ({_what(side)})"


def _what(side: Side) -> str:
    """What the price is of and where it came from: `as if VM.Standard.E5.Flex, 1 OCPU + 2 GB;
    table:prices.yaml`."""
    p = side.price
    if not p.shape:
        return p.source
    return f"{priced_as(p.shape, p.units, p.as_if)}; {_one_source(p.source, p.shape)}"


def _one_source(source: str, shape: str) -> str:
    """`table:prices.yaml VM.GPU.A10.1` → `table:prices.yaml`: the shape is said beside it."""
    return ", ".join(dict.fromkeys(part.removesuffix(f" {shape}") for part in source.split(", ")))


def time_text(side: Side, c: SideCost) -> str:
    """The time one unit of work took (model/cost.unit_time_stat), saying which unit: a matmul product
    at its point (the median), an epoch, a million predictions or the whole run (with the repeats'
    range), so it never reads as the training time of all epochs beside it."""
    stat = unit_time_stat(side)
    if stat is None:
        return NONE
    if c.unit == GFLOP:
        return f"{fmt_s(stat.median)} per product at n={c.point[2]}" if c.point else NONE
    return f"{fmt_stat_s(stat)} per {UNIT_OF_TIME[c.unit]}"


def _cost_cells(base: Side, other: Side, c: PairCost | None) -> tuple[str, str, str]:
    """The pairs table's price ratio, cost ratio and the two sides' costs of the same work (matmul: the
    GFLOP each buys per money), each "–" where a side has no price or the currencies differ."""
    if c is None:
        return NONE, NONE, NONE
    cur = base.price.currency
    made_up = ", illustrative" if base.price.illustrative or other.price.illustrative else ""
    price = NONE
    if c.price_ratio is not None:
        hourly = [s.price.hourly for s in (base, other)]
        price = f"{fmt_x(c.price_ratio)} ({' / '.join(fmt_money(x.median if x else None, cur) for x in hourly)}{made_up})"
    if c.cost_ratio is None:
        return price, NONE, NONE
    b, o = c.base, c.other
    if c.unit == GFLOP and c.base.point is not None:
        amounts = f"{fmt_amount(b.work_per_money)} / {fmt_amount(o.work_per_money)}"
        spent = f"{amounts} GFLOP per {cur or 'USD'} at n={b.point[2]} {b.point[1]}"
    else:
        spent = f"{fmt_money(b.per_unit, cur)} / {fmt_money(o.per_unit, cur)} per {c.unit}"
        if c.cost_ratio_1k is not None:
            spent += f"; {fmt_money(b.per_1k, cur)} / {fmt_money(o.per_1k, cur)} per 1k samples"
    return price, f"{fmt_x(c.cost_ratio)} per {c.unit}{made_up}", spent


def budget_lines(every: Iterable[Side], describe: Describe, deadline: float | None = None) -> list[str]:
    """`compare --budget`: per config, the side that buys the most work per money and how much, then
    every priced side ranked by cost per unit of work, and with a deadline (seconds per epoch, per
    product, per run; a serving side's batch-1 p99 latency) the cheapest side that meets it."""
    lines = []
    for sides in ranked(every):
        s = sides[0]
        where = describe(s)
        priced = [x for x in sides if side_cost(x).work_per_money]
        if not priced:
            lines.append(f"budget: {where}: no side has a price ({s.price.none_reason})")
            continue
        c = side_cost(s)
        others = f"; {len(priced) - 1} other priced side(s)" if len(priced) > 1 else ""
        unpriced = len(sides) - len(priced)
        others += f"; {unpriced} without a price" if unpriced else ""
        lines.append(
            f"budget: {where}: cheapest {s.label}: {work_text(s)} "
            f"({fmt_money(c.per_unit, s.price.currency)} per {c.unit} at {price_text(s)}{others})"
        )
        if len(priced) > 1:
            lines.append(
                f"  ranked by cost per {c.unit}: " + "; ".join(_rank(i, x) for i, x in enumerate(priced, 1))
            )
        if deadline is not None:
            lines.append(f"  {_within(priced, deadline)}")
    return lines


def _rank(i: int, side: Side) -> str:
    c, t = side_cost(side), unit_time(side)
    took = f", {fmt_s(t)} per {UNIT_OF_TIME[c.unit]}" if t is not None else ""
    return f"{i}. {side.label} {fmt_money(c.per_unit, side.price.currency)}{took}"


def _within(priced: list[Side], deadline: float) -> str:
    """The cheapest priced side whose unit of work takes at most `deadline` (they come cheapest first),
    or the fastest one and how long it takes where none does."""
    unit = DEADLINE_OF[side_cost(priced[0]).unit]
    timed = [(x, t) for x in priced if (t := deadline_time(x)) is not None]
    said = f"within {fmt_s(deadline)} per {unit}"
    fit = next(((x, t) for x, t in timed if t <= deadline), None)
    if fit is not None:
        return f"{said}: cheapest {fit[0].label} ({fmt_s(fit[1])} per {unit})"
    if not timed:
        return f"{said}: no priced side says how long a {unit} took"
    fastest, t = min(timed, key=lambda xt: xt[1])
    return f"{said}: no priced side meets it; the fastest, {fastest.label}, takes {fmt_s(t)}"


def cost_cells(p: Pair) -> tuple[str, str, str]:
    """The pair's price ratio, cost ratio and costs, against the best CPU where the cost was taken
    against it (and each saying so: the row's `base` column names the CPU as configured)."""
    price, ratio, spent = _cost_cells(p.cost_base, p.other, p.cost)
    if p.cost_base is not p.base and p.cost is not None and p.cost.cost_ratio is not None:
        return f"{price} (against the best CPU)", f"{ratio} (against the best CPU)", f"best CPU {spent}"
    return price, ratio, spent


def share_of_best(side: Side, best: float | None) -> str:
    """A side's work per money as a share of the best side's for the same work."""
    c = side_cost(side)
    share = c.work_per_money / best if best and c.work_per_money else None
    return fmt_x(share) if share is not None else NONE


def cost_per_unit_text(side: Side) -> str:
    c = side_cost(side)
    return f"{fmt_money(c.per_unit, side.price.currency)} per {c.unit}" if c.per_unit else NONE


def cost_per_1k_text(side: Side) -> str:
    c = side_cost(side)
    return fmt_money(c.per_1k, side.price.currency) if c.per_1k else NONE
