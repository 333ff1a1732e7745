"""Money: what a side cost per hour and per unit of work, a pair's price and cost ratios, and for each
piece of work which side (device, shape, CPU setting) buys the most of it (how it is said: render/money.py).

Everything is read from what the runs logged (the run schema): the tags `devicebench.price.*` and the
metrics `cost/*`. A side whose runs carry no price has no cost, and nothing here makes one up: every
function returns None where the runs do not say, and the writers show a dash. Ratios are only taken
between sides priced in the same currency.

The work-per-money table groups sides by work key (the config without how the CPU was fed: loader and
workers), so a tuned CPU side ranks beside the GPU sides of the same work and the table asks the
price-performance question of the CPU at its best, as the pairs do (model/best_cpu.py). The report's
table and `compare --budget` both read `ranked`, so they cannot disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from devicebench.report.model.price import number
from devicebench.report.model.sides import Side, param_order
from devicebench.schema import (
    COST_PER_1K,
    COST_PER_EPOCH,
    COST_PER_MILLION,
    COST_USD,
    PRODUCT,
    SERVE_P99,
    SERVE_RATE,
    SERVING,
    TOTAL_S,
    TRAIN_S,
    TRAINING,
    gflops,
    headline_point,
)
from devicebench.util.stats import Stat

GFLOP = PRODUCT.unit
MILLION = SERVING.unit  # a million predictions at the best batch


def epoch_time(side: Side) -> Stat | None:
    """Training time per epoch (`time/train_s` / the `epochs` param), per run: the x of the cost chart."""
    values = []
    for r in side.runs:
        t, epochs = r.metrics.get(TRAIN_S), number(r.params.get("epochs", "1"))
        if t is not None and epochs:
            values.append(t / epochs)
    return Stat.of(values)


def product_point(side: Side) -> tuple[str, str, int] | None:
    """The side's headline product point (schema.headline_point) among its torch points with a time."""
    return headline_point(
        [k for k, v in side.product_points.items() if k[0] == "torch" and "time" in v], fallback=False
    )


def per_gflop(side: Side, point: tuple[str, str, int] | None) -> float | None:
    """Money per GFLOP at one product point: price × time / 3600 / GFLOP (the run side's
    `gflop_per_usd` inverted), from the side's median time there and its median hourly price."""
    price = side.price.hourly
    v = side.product_points.get(point) if point else None
    if price is None or not v or "time" not in v or v["time"].median <= 0 or point is None:
        return None
    return price.median / (gflops(point[2], v["time"].median) * 3600)


@dataclass(frozen=True)
class SideCost:
    """What one side's work cost: `per_unit` money per `unit` (epoch, GFLOP or run), None without a price."""

    unit: str
    per_unit: float | None
    per_1k: float | None = None
    point: tuple[str, str, int] | None = None  # a product: where GFLOP/$ was read

    @property
    def work_per_money(self) -> float | None:
        """Epochs (or GFLOP, or runs) per unit of currency: the budget's answer."""
        return 1.0 / self.per_unit if self.per_unit else None


def _median(side: Side, metric: str) -> float | None:
    s = side.metrics.get(metric)
    return s.median if s is not None and side.price.known else None


def side_cost(side: Side) -> SideCost:
    """Training: the logged cost per epoch (and per 1k samples); a product: money per GFLOP at the side's
    headline point; anything else: the logged cost of a whole run. The unit is the work's, never the
    price's: a training side without a price is still counted per epoch (its cost a dash), so its time
    per unit is the epoch that every other table's training time is made of, not its whole run."""
    if side.kind is PRODUCT:
        point = product_point(side)
        return SideCost(GFLOP, per_gflop(side, point), point=point)
    if COST_PER_EPOCH in side.metrics or TRAIN_S in side.metrics:
        return SideCost(TRAINING.unit, _median(side, COST_PER_EPOCH), _median(side, COST_PER_1K))
    if side.kind is SERVING:
        return SideCost(MILLION, _median(side, COST_PER_MILLION))
    return SideCost("run", _median(side, COST_USD))


@dataclass(frozen=True)
class PairCost:
    """`other` against `base`: hourly price ratio and cost-per-unit ratio (< 1: `other` is cheaper)."""

    unit: str
    base: SideCost
    other: SideCost
    price_ratio: float | None
    cost_ratio: float | None
    cost_ratio_1k: float | None = None


def _ratio(a: float | None, b: float | None) -> float | None:
    """b / a where both are known and a > 0; else None (a zero price makes no ratio, not infinity)."""
    if a is None or b is None or a <= 0:
        return None
    return b / a


def pair_cost(base: Side, other: Side, product_point: tuple[str, str, int] | None = None) -> PairCost:
    """A pair's ratios, None where either side has no price or the currencies differ. Matmul is read
    at the pair's own headline point (where its speedup was taken), so both describe one product."""
    if base.kind is PRODUCT and product_point is not None:
        b_pt = product_point
        o_pt = ("torch", b_pt[1], b_pt[2])
        b = SideCost(GFLOP, per_gflop(base, b_pt), point=b_pt)
        o = SideCost(GFLOP, per_gflop(other, o_pt), point=o_pt)
    else:
        b, o = side_cost(base), side_cost(other)
    same = base.price.currency == other.price.currency and base.price.currency not in ("", "mixed")
    pb, po = base.price.hourly, other.price.hourly
    if not same or b.unit != o.unit:
        return PairCost(b.unit, b, o, None, None)
    return PairCost(
        b.unit,
        b,
        o,
        _ratio(pb.median if pb else None, po.median if po else None),
        _ratio(b.per_unit, o.per_unit),
        _ratio(b.per_1k, o.per_1k),
    )


# what a deadline is per, by cost unit
UNIT_OF_TIME = {"epoch": "epoch", GFLOP: "product", "run": "run", MILLION: "million predictions"}


def unit_time_stat(side: Side) -> Stat | None:
    """How long one unit of the side's work took, over its repeats: an epoch of training, one product at
    the side's headline product point, or the whole run (its unit is `side_cost(side).unit`)."""
    c = side_cost(side)
    if c.unit == GFLOP:
        v = side.product_points.get(c.point) if c.point else None
        return v.get("time") if v else None
    if c.unit == MILLION:
        rate = side.metrics.get(SERVE_RATE)
        return Stat(1e6 / rate.median, 1e6 / rate.hi, 1e6 / rate.lo, rate.n) if rate and rate.lo > 0 else None
    return epoch_time(side) if c.unit == "epoch" else side.metrics.get(TOTAL_S)


def unit_time(side: Side) -> float | None:
    """The median of `unit_time_stat`."""
    stat = unit_time_stat(side)
    return stat.median if stat else None


# what `compare --deadline` holds a side to, by cost unit: a server's caller waits for one request
DEADLINE_OF = {**UNIT_OF_TIME, MILLION: "request at p99"}


def deadline_time(side: Side) -> float | None:
    """What `compare --deadline` is held against: a serving side's batch-1 p99 latency, else the
    median time of its unit of work."""
    if side_cost(side).unit != MILLION:
        return unit_time(side)
    p99 = side.metrics.get(SERVE_P99)
    return p99.median if p99 else None


# --------------------------------------------------------------------------------------------- ranking


def work_per_money(side: Side) -> float:
    """Sort key: most work per money first, sides without a price last."""
    return -(side_cost(side).work_per_money or 0.0)


def ranked(sides: Iterable[Side]) -> list[list[Side]]:
    """The sides of each piece of work, most work per money first (in the report's order of configs):
    the work-per-money table and `compare --budget` both read this, so they cannot disagree."""
    groups: dict[tuple[str, str], list[Side]] = defaultdict(list)
    for s in sides:
        groups[(s.workload, s.work_key)].append(s)
    order = sorted(groups, key=lambda k: (k[0], param_order(groups[k][0].params), k[1]))
    return [sorted(groups[k], key=work_per_money) for k in order]


def any_price(sides: Iterable[Side]) -> bool:
    return any(s.price.known for s in sides)
