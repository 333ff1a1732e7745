"""Sides → each served model's answer: where a million predictions cost least within the p99 promise.

A served model's sides differ by device and by how the server batched (`max_batch`, `max_wait_ms`,
`tune`: config keys apart, so never one pair). Per model (its serving work whatever the batching, at one
promise and one way in), each device is taken at its cheapest per million predictions among the sides
that held the promise (LoadGen's server scenario logged `SERVE_P99_BOUND`), as `best_cpu` takes each
device at its best for training; the two cheapest devices are then one `Pair` (pairs.make_pair), whose
cost and rate ratios the judge reads (price_rules). A model measured on one device, or a device that
ran no server scenario, is kept so the answer can say what is missing. Each device's server search
(every QPS it tried and its p99, read/points.server_tests) is kept for the p99-against-QPS chart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from devicebench.config.fields import SETTING
from devicebench.report.model.cost import side_cost
from devicebench.report.model.pairs import Pair, make_pair
from devicebench.report.model.sides import NOT_WORK, Side, param_order
from devicebench.report.read.points import server_tests
from devicebench.schema import SERVE_P99_BOUND, SERVE_RATE, SERVING

BATCHING = frozenset({"max_batch", "max_wait_ms", "tune"})  # how the server batched: a setting, not work
# what else was asked of a run beside the served model: the same model whichever scenarios or threads
MEASURED_HOW = frozenset({"scenarios", "batch_sizes", "requests", "warmup", "cpu_threads"})


@dataclass(frozen=True, eq=False)
class SearchCurve:
    """A side's server search through its answering way (over HTTP where it ran, as the run's answer):
    each test of each of its runs, (QPS asked, p99 in s, VALID), by QPS."""

    side: Side
    via: str
    tests: tuple[tuple[float, float, bool], ...]


@dataclass(frozen=True, eq=False)
class ServingChoice:
    """One served model: each device at its cheapest within the promise (`bests`, cheapest first), the
    two cheapest as a pair (None with one device), its sides that held no promise (`unheld`), and the
    bests' server searches (`curves`: those whose runs logged their tests)."""

    workload: str
    promise_s: float
    bests: tuple[Side, ...]
    pair: Pair | None
    unheld: tuple[Side, ...]
    curves: tuple[SearchCurve, ...] = ()

    @property
    def cheapest(self) -> Side:
        return self.bests[0]


def model_key(side: Side) -> tuple:
    """The served model's work: its params without where it ran, its setting, its batching and what
    else the run measured."""
    skip = NOT_WORK | BATCHING | MEASURED_HOW | set(SETTING)
    return (side.workload, param_order({k: v for k, v in side.params.items() if k not in skip}))


def held(side: Side) -> bool:
    """LoadGen's server scenario held a QPS within the promise on every figure the side reports."""
    return SERVE_P99_BOUND in side.metrics and SERVE_RATE in side.metrics


def search_curve(side: Side) -> SearchCurve | None:
    """The side's server tests over its answering way, every run's; None where no run logged them."""
    by_via: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for r in side.runs:
        for via, tests in server_tests(r).items():
            by_via[via].extend(tests)
    via = next((v for v in ("http", "in_process") if by_via.get(v)), None)
    return SearchCurve(side, via, tuple(sorted(by_via[via]))) if via else None


def _cheapest_first(side: Side) -> tuple:
    """Priced sides by cost per million, then the most predictions a second (unpriced ones last)."""
    per = side_cost(side).per_unit
    return (per is None, per or 0.0, -side.metrics[SERVE_RATE].median)


def _device(side: Side) -> tuple[bool, str]:
    """Which device a side served on: its kind and its name (the GPU's model where one was read)."""
    return side.is_cpu, side.device_name or side.device


def _choice(sides: Sequence[Side]) -> ServingChoice | None:
    kept = [s for s in sides if held(s)]
    if not kept:
        return None
    per_device: dict[tuple[bool, str], list[Side]] = defaultdict(list)
    for s in kept:
        per_device[_device(s)].append(s)
    bests = sorted((min(group, key=_cheapest_first) for group in per_device.values()), key=_cheapest_first)
    pair = None
    if len(bests) > 1:
        base, other = sorted(bests[:2], key=lambda s: not s.is_cpu)  # a CPU is a pair's base
        pair = make_pair(base, other)
    unheld = tuple(s for s in sides if not held(s) and _device(s) not in per_device)
    promise = kept[0].metrics[SERVE_P99_BOUND].median
    curves = tuple(c for s in bests if (c := search_curve(s)) is not None)
    return ServingChoice(kept[0].workload, promise, tuple(bests), pair, unheld, curves)


def serving_choices(sides: Sequence[Side]) -> list[ServingChoice]:
    """One choice per served model with a side that held the promise, in the report's order of configs."""
    groups: dict[tuple, list[Side]] = defaultdict(list)
    for s in sides:
        if s.kind is SERVING:
            groups[model_key(s)].append(s)
    return [c for key in sorted(groups) if (c := _choice(groups[key])) is not None]
