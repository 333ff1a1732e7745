"""What a side's runs say an hour of what they used cost, read once where the side is built.

Every run prices itself when it ends (pricing/prices.py: a GPU side per GPU it used, a CPU side as the
CPU shape that would give it its cores, "as if" where that is not the host's own) and logs the
`devicebench.price.*` tags; a side holds their median and what they were priced as.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from devicebench.pricing.prices import ILLUSTRATIVE, OVERRIDE
from devicebench.report.read.records import RunRecord
from devicebench.util.fmt import fmt_price
from devicebench.util.stats import Stat


def number(text: str) -> float | None:
    """A logged price: a finite number >= 0 (a price of 0 counts; a missing or unreadable one does not)."""
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def hourly_of(run: RunRecord) -> float | None:
    """The run's logged hourly price."""
    return number(run.tag("price.usd_per_hour", "x"))


def by_hand(run: RunRecord) -> str:
    """`$0.5/h set by hand` for a run priced by its own price_per_hour (`illustrative $1/h` for a made-up
    one), else "": runs of one config priced two ways are two sides, each at its own price, never one
    side whose cost is their average (a table price and `--price_per_hour 0.5` read as the mean)."""
    source, hourly = run.tag("price.source"), hourly_of(run)
    if source not in (OVERRIDE, ILLUSTRATIVE) or run.tag("price.shape") or hourly is None:
        return ""
    return (
        f"${fmt_price(hourly)}/h set by hand"
        if source == OVERRIDE
        else f"illustrative ${fmt_price(hourly)}/h"
    )


def _one(values: Sequence[str]) -> str:
    """The runs' one value, or all of them joined where they differ (kept in order)."""
    return ", ".join(dict.fromkeys(v for v in values if v))


@dataclass(frozen=True)
class SidePrice:
    """A side's hourly price (median of its priced runs, with their range), what it was priced as and
    why there is none where there is none."""

    hourly: Stat | None = None
    currency: str = ""  # "" without a price; "mixed" where the runs disagree (no ratio is taken then)
    source: str = ""  # `table:prices.yaml VM.GPU.A10.1`, `override`, `illustrative VM.Standard.E5.Flex`
    shape: str = ""  # the shape it was priced as (none for a price given by hand)
    units: str = ""  # what of that shape it used: `1 of its 8 GPUs`, `1 OCPU + 2 GB`
    as_if: bool = False  # the shape is not the host's own
    illustrative: bool = False  # made up, or another host's list price: every figure bought with it says so
    none_reason: str = ""
    gpu_shape: str = ""  # a CPU side's GPU to weigh it against (price_shape), with its rate per GPU-hour
    gpu_hourly: float | None = None

    @property
    def known(self) -> bool:
        return self.hourly is not None


def price_of(runs: Sequence[RunRecord]) -> SidePrice:
    """The side's price from its runs' tags."""
    priced = [r for r in runs if hourly_of(r) is not None]
    if not priced:
        reason = next((r.tag("price.none") for r in runs if r.tag("price.none")), "")
        return SidePrice(none_reason=reason or "the runs carry no devicebench.price tags")
    currencies = {r.tag("price.currency") or "USD" for r in priced}
    sources = [" ".join(x for x in (r.tag("price.source") or "?", r.tag("price.shape")) if x) for r in priced]
    units = _one([r.tag("price.units") for r in priced])
    gpu_shapes = {r.tag("price.gpu_shape") for r in priced}
    gpu_shape = next(iter(gpu_shapes)) if len(gpu_shapes) == 1 else ""  # one GPU to weigh against, or none
    return SidePrice(
        hourly=Stat.of(hourly_of(r) for r in priced),
        currency=currencies.pop() if len(currencies) == 1 else "mixed",
        source=_one(sources),
        shape=_one([r.tag("price.shape") for r in priced]),
        units=units,
        as_if=any(r.tag("price.as_if") == "true" for r in priced),
        illustrative=any(r.tag("price.source") == ILLUSTRATIVE for r in priced),
        gpu_shape=gpu_shape,
        gpu_hourly=number(priced[0].tag("price.gpu_usd_per_hour", "x")) if gpu_shape else None,
    )
