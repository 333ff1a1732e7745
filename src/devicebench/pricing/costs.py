"""What a run's work cost: the price tags and the `cost/*` metrics, when the run ends and what it used
is known (pricing/prices.py prices it).

The CLI calls this around the workload, which neither knows nor changes: the numbers come from what the
workload already measured (its result) and the run's wall time (`time/total_s`). Metric names are the
contract the report reads: `cost/usd`, `cost/usd_per_hour`, `cost/usd_per_epoch`,
`cost/usd_per_1k_samples`, `cost/gflop_per_usd` and `matmul/<backend>/<dtype>/gflop_per_usd` per size.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from devicebench.config.parts import Job
from devicebench.config.workloads import KIND_OF
from devicebench.pricing.prices import Price, priced_as
from devicebench.schema import (
    COST_PER_1K,
    COST_PER_EPOCH,
    COST_PER_HOUR,
    COST_PER_MILLION,
    COST_USD,
    GFLOP_PER_USD,
    PRODUCT,
    SERVING,
    TRAINING,
    matmul_key,
    matmul_prefix,
    tag,
)

SECONDS_PER_HOUR = 3600.0


def usable_price(price: Price | str) -> Price | str:
    """`price`, or the reason there is none when its hourly figure is not a finite positive number: a
    table's 1e308 per OCPU-hour times two OCPUs overflows to infinity, which no cost may be priced at."""
    if isinstance(price, Price) and not _finite_positive(price.usd_per_hour):
        what = priced_as(price.shape, price.units, price.as_if) or "the price"
        return f"{what} comes to {price.usd_per_hour!r} USD an hour, not a finite price"
    return price


def log_price(tracker: Any, price: Price | str) -> None:
    """The price tags, or `devicebench.price.none` with the reason: once, at the run's end."""
    if isinstance(price, Price):
        tracker.set_tags(price.tags())
    else:
        tracker.set_tags({tag("price.none"): price})


def _product_costs(tracker: Any, hourly: float, points: Any, cfg: Any) -> dict[str, float]:
    """Each matmul point's cost at its size (as steps), and the run's: GFLOP per $ at its headline point."""
    per_point = {size: _loggable_costs(values) for size, values in matmul_costs(hourly, points or []).items()}
    for size, values in sorted(per_point.items()):
        tracker.log_metrics(values, step=size)
    best = headline_gflop_per_usd(per_point)
    return {} if best is None else {GFLOP_PER_USD: best}


def _serving_run_costs(tracker: Any, hourly: float, result: Any, cfg: Any) -> dict[str, float]:
    return serving_costs(hourly, result.serve_samples_per_s)


def _training_run_costs(tracker: Any, hourly: float, result: Any, cfg: Any) -> dict[str, float]:
    return training_costs(hourly, result.train_s, result.train_samples_per_s, cfg.epochs)


COSTS_OF_KIND = {PRODUCT: _product_costs, SERVING: _serving_run_costs, TRAINING: _training_run_costs}


def log_costs(
    tracker: Any, price: Price | str, workload: str, total_s: float, result: Any, cfg: Any
) -> dict[str, float]:
    """The run's cost metrics at its end; nothing without a price (the reason is already a tag).
    Returns the run-level `cost/*` metrics it logged (not matmul's per-size ones), for the run's line."""
    if not isinstance(price, Price):
        return {}
    # a job on N nodes rents N hosts, where the price is a host's; a per-use price is the whole job's
    hourly = price.usd_per_hour * (1 if price.per_use or not isinstance(cfg, Job) else cfg.nnodes)
    logged = run_costs(hourly, total_s)
    logged.update(COSTS_OF_KIND[KIND_OF[workload]](tracker, hourly, result, cfg))
    logged = _loggable_costs(logged)
    tracker.log_metrics(logged)
    return logged


def run_costs(hourly: float, total_s: float) -> dict[str, float]:
    """What the whole run cost at `hourly` per hour over its wall time, and the hourly price itself."""
    return {COST_USD: hourly * total_s / SECONDS_PER_HOUR, COST_PER_HOUR: hourly}


def training_costs(hourly: float, train_s: float, samples_per_s: float, epochs: int) -> dict[str, float]:
    """Cost per epoch (mean epoch time) and per 1,000 training samples; a figure that cannot be computed
    (no epochs, no time, no samples) is left out rather than logged as 0 or infinity."""
    out = {}
    if epochs > 0 and _finite_positive(train_s):
        out[COST_PER_EPOCH] = hourly * (train_s / epochs) / SECONDS_PER_HOUR
    if _finite_positive(samples_per_s):
        out[COST_PER_1K] = hourly * 1000.0 / samples_per_s / SECONDS_PER_HOUR
    return out


def serving_costs(hourly: float, samples_per_s: float) -> dict[str, float]:
    """`cost/usd_per_million`: a million predictions at the run's best throughput, the device kept busy
    (a server busy half the time pays twice this per prediction)."""
    if not _finite_positive(samples_per_s):
        return {}
    return {COST_PER_MILLION: hourly * 1e6 / samples_per_s / SECONDS_PER_HOUR}


def matmul_costs(hourly: float, points: Sequence[Any]) -> dict[int, dict[str, float]]:
    """size -> {`matmul/<backend>/<dtype>/gflop_per_usd`: GFLOP/s × 3600 / price} for every point: the
    GFLOP a dollar buys at the run's price, NumPy's CPU points included (the run's price is what it used)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for p in points:
        rate = float(p.gflops)
        if _finite_positive(rate):
            out[int(p.size)][matmul_key(p.backend, p.dtype, "gflop_per_usd")] = (
                rate * SECONDS_PER_HOUR / hourly
            )
    return dict(out)


def headline_gflop_per_usd(per_point: Mapping[int, Mapping[str, float]]) -> float | None:
    """`cost/gflop_per_usd`: the most GFLOP per dollar among the torch series, each at its largest size
    (where the device is busiest and its figure steadiest); NumPy's series when there is no torch one."""
    largest: dict[str, tuple[int, float]] = {}
    for size, values in per_point.items():
        for name, value in values.items():
            if name not in largest or size > largest[name][0]:
                largest[name] = (size, value)
    torch = [v for name, (_, v) in largest.items() if name.startswith(matmul_prefix("torch"))]
    chosen = torch or [v for _, v in largest.values()]
    return max(chosen) if chosen else None


def _loggable_costs(costs: Mapping[str, float]) -> dict[str, float]:
    """The costs that are finite positive numbers: a tiny price over a huge rate overflows to infinity
    (5e-324 USD an hour: 1.8e308 GFLOP per USD as the store keeps it) and a tiny cost underflows to 0;
    neither is a cost, so neither is logged."""
    return {k: v for k, v in costs.items() if _finite_positive(v)}


def _finite_positive(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0
