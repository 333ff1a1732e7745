"""Work per money: for each piece of work, which side (device, shape, CPU setting) buys the most.

The sides are grouped by work key (the config without how the CPU was fed: loader and workers), so a
tuned CPU side ranks beside the GPU sides of the same work and the table asks the price-performance
question of the CPU at its best, as the pairs do (report/best_cpu.py). The report's table and
`compare --budget` both read `cost.side_cost`, so they cannot disagree. A side without a price is listed
last with the reason its runs gave, never with a number.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from devicebench.report import best_cpu, cost
from devicebench.report.compare import Comparison
from devicebench.report.fmt import NONE, fmt_s, fmt_stat_s, fmt_x
from devicebench.report.pairs import Pair, param_order
from devicebench.report.sides import Side
from devicebench.schema import TOTAL_S

Describe = Callable[[Side], str]  # a side's config as the report spells it (content.describe)

SIDE_HEADERS = [
    "workload",
    "config",
    "side",
    "price per hour (source)",
    "time per unit",
    "cost per unit",
    "cost per 1k samples",
    "work per money",
    "vs the best",
]
UNITS = {"epoch": "epochs", cost.GFLOP: "GFLOP", "run": "runs"}


def _work(side: Side) -> float:
    """Sort key: most work per money first, sides without a price last."""
    return -(cost.side_cost(side).work_per_money or 0.0)


def ranked(comp: Comparison) -> list[list[Side]]:
    """The sides of each piece of work, most work per money first (in the report's order of configs)."""
    groups: dict[tuple[str, str], list[Side]] = defaultdict(list)
    for s in comp.all_sides:
        groups[(s.workload, best_cpu.work_key(s))].append(s)
    order = sorted(groups, key=lambda k: (k[0], param_order(groups[k][0].params), k[1]))
    return [sorted(groups[k], key=_work) for k in order]


def any_price(comp: Comparison) -> bool:
    return any(cost.priced_runs(s) for s in comp.all_sides)


def work_text(side: Side) -> str:
    """`81.3 epochs per USD`, `1,234,567 GFLOP per USD at n=8192 float32`, or the dash."""
    c = cost.side_cost(side)
    if c.work_per_money is None:
        return NONE
    text = f"{cost.fmt_amount(c.work_per_money)} {UNITS[c.unit]} per {cost.currency(side) or 'USD'}"
    if c.point is not None:
        text += f" at n={c.point[2]} {c.point[1]}"
    return text + (" (illustrative price)" if cost.illustrative(side) else "")


def price_text(side: Side) -> str:
    price = cost.side_price(side)
    if price is None:
        return f"{NONE} ({cost.no_price_reason(side)})"
    cur = cost.currency(side)
    spread = f"–{cost.fmt_money(price.hi, cur)}" if price.hi > price.lo else ""
    text = f"{cost.fmt_money(price.lo if spread else price.median, cur)}{spread}"
    return f"{text} ({cost.source(side)})"


def _time_text(side: Side, c: cost.SideCost) -> str:
    if c.unit == cost.GFLOP:
        v = side.matmul.get(c.point) if c.point else None
        return f"{fmt_s(v['time'].median)} at n={c.point[2]}" if v and "time" in v and c.point else NONE
    if c.unit == "epoch":
        return fmt_stat_s(cost.epoch_time(side))
    return fmt_stat_s(side.metrics.get(TOTAL_S))


def side_rows(comp: Comparison, describe: Describe) -> list[list[str]]:
    """One row per side, grouped by config, most work per money first, with its share of the best."""
    rows = []
    for sides in ranked(comp):
        best = cost.side_cost(sides[0]).work_per_money
        for s in sides:
            c = cost.side_cost(s)
            cur = cost.currency(s)
            share = c.work_per_money / best if best and c.work_per_money else None
            rows.append(
                [
                    s.workload,
                    describe(s),
                    s.label,
                    price_text(s),
                    _time_text(s, c),
                    f"{cost.fmt_money(c.per_unit, cur)} per {c.unit}" if c.per_unit else NONE,
                    cost.fmt_money(c.per_1k, cur) if c.per_1k else NONE,
                    work_text(s),
                    fmt_x(share) if share is not None else NONE,
                ]
            )
    return rows


def pair_cost_cells(p: Pair) -> tuple[str, str, str]:
    """The pairs table's price ratio, cost ratio and the two sides' costs of the same work (matmul: the
    GFLOP each buys per money), each "–" where a side has no price or the currencies differ."""
    c = p.cost
    if c is None:
        return NONE, NONE, NONE
    cur = cost.currency(p.base)
    made_up = ", illustrative" if cost.illustrative(p.base) or cost.illustrative(p.other) else ""
    price = NONE
    if c.price_ratio is not None:
        hourly = [cost.side_price(s) for s in (p.base, p.other)]
        price = f"{fmt_x(c.price_ratio)} ({' / '.join(cost.fmt_money(x.median if x else None, cur) for x in hourly)}{made_up})"
    if c.cost_ratio is None:
        return price, NONE, NONE
    b, o = c.base, c.other
    if c.unit == cost.GFLOP and c.base.point is not None:
        amounts = f"{cost.fmt_amount(b.work_per_money)} / {cost.fmt_amount(o.work_per_money)}"
        spent = f"{amounts} GFLOP per {cur or 'USD'} at n={b.point[2]} {b.point[1]}"
    else:
        spent = f"{cost.fmt_money(b.per_unit, cur)} / {cost.fmt_money(o.per_unit, cur)} per {c.unit}"
        if c.cost_ratio_1k is not None:
            spent += f"; {cost.fmt_money(b.per_1k, cur)} / {cost.fmt_money(o.per_1k, cur)} per 1k samples"
    return price, f"{fmt_x(c.cost_ratio)} per {c.unit}{made_up}", spent


def budget_lines(comp: Comparison, describe: Describe) -> list[str]:
    """`compare --budget`: per config, the side that buys the most work per money, and how much."""
    lines = []
    for sides in ranked(comp):
        s = sides[0]
        where = f"{s.workload} {describe(s)}"
        priced = [x for x in sides if cost.side_cost(x).work_per_money]
        if not priced:
            lines.append(f"budget: {where}: no side has a price ({cost.no_price_reason(s)})")
            continue
        c = cost.side_cost(s)
        others = f"; {len(priced) - 1} other priced side(s)" if len(priced) > 1 else ""
        unpriced = len(sides) - len(priced)
        others += f"; {unpriced} without a price" if unpriced else ""
        lines.append(
            f"budget: {where}: cheapest {s.label}: {work_text(s)} "
            f"({cost.fmt_money(c.per_unit, cost.currency(s))} per {c.unit} at {price_text(s)}{others})"
        )
    return lines
