"""Every table the report shows, as columns declared once: a name, a header (and a shorter one for the
terminal), how a cell is spelt, and which outputs show it. Markdown, HTML, the terminal table and the
report run's description all take their columns from here, so a new column is one `Column(...)` line
in its table's declaration, and it appears in every output that names its view.

The pairs table is shown as four narrower tables in the report (SPEED, WHY, COST, MEMORY: each one
question), as the terminal table (TERMINAL) and as the report run's description (NOTE). A report view
is kept to what reads at about 600 px, MLflow's artifact view (`REPORT_MAX_COLUMNS`): the config cell
names its workload (labels.describe), and a verdict, which is a sentence, is said under its table
(content.py), never squeezed into a column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from devicebench.report.judge.reliability import unreliable
from devicebench.report.model.best_cpu import setting_of
from devicebench.report.model.comparison import Comparison
from devicebench.report.model.cost import ranked, side_cost
from devicebench.report.model.pairs import Pair
from devicebench.report.model.regressions import Regression
from devicebench.report.model.scaling import Point, Series
from devicebench.report.model.sides import Side
from devicebench.report.read.records import RunRecord
from devicebench.report.render import money
from devicebench.report.render.labels import timed_label
from devicebench.schema import (
    FORWARD_FLOPS,
    PEAK_BYTES,
    PEAK_RSS_BYTES,
    PRODUCT,
    SERVE_BATCH,
    SERVE_P50,
    SERVE_P90,
    SERVE_P99,
    SERVE_P99_BOUND,
    SERVE_RATE,
    TOTAL_S,
    gflops,
)
from devicebench.util.fmt import (
    NONE,
    fmt_bytes,
    fmt_change,
    fmt_efficiency,
    fmt_gflops,
    fmt_q,
    fmt_rate,
    fmt_s,
    fmt_share,
    fmt_stat_s,
    fmt_x,
)
from devicebench.util.stats import Stat

T = TypeVar("T")
REPORT = "report"  # the one view of a table shown whole in report.md and report.html
SPEED, WHY, COST, MEMORY = "speed", "why", "cost", "memory"  # the pairs table in the report, in order
PAIR_VIEWS = (SPEED, WHY, COST, MEMORY)
TERMINAL, NOTE = "terminal", "note"  # the pairs in `compare`'s output and in the report run's description
PRICE, WORK = "price", "work"  # the price-performance table in the report: what it costs, what it buys
REPORT_MAX_COLUMNS = 7  # the most columns of a report view: each about 85 px of MLflow's ~600 px view


@dataclass(frozen=True)
class Column(Generic[T]):
    """One column of a table: `cell` spells it for one item; `views` are the outputs that show it."""

    name: str
    header: str
    cell: Callable[[T], str]
    views: frozenset[str] = frozenset({REPORT})
    short: str = ""  # the terminal's header where the report's is too wide
    judged: bool = False  # needs the item's verdicts: left out where the items were not judged
    short_cell: Callable[[T], str] | None = None  # the terminal's spelling where the report's is too wide


def shown(columns: Sequence[Column[T]], view: str, judged: bool = True) -> list[Column[T]]:
    """The columns a view shows, in their declared order."""
    return [c for c in columns if view in c.views and (judged or not c.judged)]


def cells(columns: Sequence[Column[T]], items: Iterable[T], short: bool = False) -> list[list[str]]:
    """The cells of a table, the terminal's shorter spelling where a column has one (`short`)."""
    spell = [(c.short_cell if short and c.short_cell else c.cell) for c in columns]
    return [[f(item) for f in spell] for item in items]


def headers(columns: Sequence[Column[T]], short: bool = False) -> list[str]:
    return [(c.short or c.header) if short else c.header for c in columns]


# --------------------------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class PairItem:
    """A pair as its row shows it: with its config's label and its verdict lines (none unjudged)."""

    pair: Pair
    config: str
    verdicts: tuple[str, ...] = ()


def side_time(side: Side, key: str) -> str:
    """`1.91 s (1.44 s–9.86 s, n=3) ⚠ noisy`: a side's time with its range, marked where a busy host or
    the repeats' spread leaves it unreliable (the verdict under the table says why and what to do)."""
    mark = unreliable(side)
    return fmt_stat_s(side.metrics.get(key)) + (f" ⚠ {mark}" if mark else "")


def _timed(p: Pair) -> tuple[str, str, str]:
    """What the times measured, and the two sides' times (matmul: one product, read in its own table)."""
    if p.kind is PRODUCT and p.product_point is not None:
        return f"one product, n={p.product_point[2]}", NONE, NONE
    key = p.base.time_metric() or TOTAL_S
    return timed_label(key), side_time(p.base, key), side_time(p.other, key)


def speedup_text(p: Pair) -> str:
    """`10.0× (9.52×–10.5×)`: the headline speedup with the range its repeats allow."""
    rng = f" ({fmt_x(p.speedup_range[0])}–{fmt_x(p.speedup_range[1])})" if p.speedup_range else ""
    return fmt_x(p.headline) + rng


def best_cpu_text(p: Pair) -> str:
    """`1.15× (4 threads, data in memory)`, or the pair's own CPU side when it is the fastest measured."""
    if p.best_cpu is None or p.best_cpu_speedup is None:
        return NONE
    if p.best_cpu is p.base:
        return f"{fmt_x(p.best_cpu_speedup)} (the base is the best CPU measured)"
    return f"{fmt_x(p.best_cpu_speedup)} ({setting_of(p.best_cpu)})"


def memory_text(side: Side) -> str:
    """A side's peak memory, saying which kind: on CUDA what the caching allocator handed out
    (`max_memory_allocated`) beside the process's RSS; elsewhere the process's peak RSS, which is all
    `memory/peak_bytes` holds there. A bare number of each kind side by side read as one measure."""
    rss = side.metrics.get(PEAK_RSS_BYTES)
    if side.device.startswith("cuda"):
        return f"GPU alloc {fmt_bytes(side.metrics.get(PEAK_BYTES))}, RSS {fmt_bytes(rss)}"
    return f"RSS {fmt_bytes(rss or side.metrics.get(PEAK_BYTES))}"


EVERY_PAIR_VIEW = frozenset({*PAIR_VIEWS, TERMINAL, NOTE})
PAIR_COLUMNS: tuple[Column[PairItem], ...] = (
    Column("config", "config", lambda r: r.config, EVERY_PAIR_VIEW),
    Column("base", "base", lambda r: r.pair.base.label, EVERY_PAIR_VIEW - {WHY, COST}),
    Column("other", "other", lambda r: r.pair.other.label, EVERY_PAIR_VIEW),
    Column("timed", "what is timed", lambda r: _timed(r.pair)[0], frozenset({SPEED})),
    Column("base_time", "base time", lambda r: _timed(r.pair)[1], frozenset({SPEED})),
    Column("other_time", "other time", lambda r: _timed(r.pair)[2], frozenset({SPEED})),
    Column("speedup", "speedup", lambda r: speedup_text(r.pair), frozenset({SPEED, WHY, TERMINAL, NOTE})),
    Column(  # in the terminal the figure alone: its setting is in the verdict and report.md
        "best_cpu",
        "speedup over the best CPU",
        lambda r: best_cpu_text(r.pair),
        frozenset({WHY, TERMINAL}),
        short="best CPU",
        short_cell=lambda r: fmt_x(r.pair.best_cpu_speedup),
    ),
    Column(
        "price_ratio",
        "price ratio (per hour)",
        lambda r: money.cost_cells(r.pair)[0],
        frozenset({COST, TERMINAL}),
        short="price",
        short_cell=lambda r: fmt_x(r.pair.price_ratio),
    ),
    Column(
        "cost_ratio",
        "cost ratio (per unit of work)",
        lambda r: money.cost_cells(r.pair)[1],
        frozenset({COST, TERMINAL}),
        short="cost",
    ),
    Column("cost", "cost (base / other)", lambda r: money.cost_cells(r.pair)[2], frozenset({COST})),
    Column(
        "data_wait",
        "data wait",
        lambda r: f"{fmt_share(r.pair.base.wait_share)} / {fmt_share(r.pair.other.wait_share)}",
        frozenset({WHY, TERMINAL}),
        short="wait",
    ),
    Column(
        "memory",
        "peak memory (GPU allocated / process RSS)",
        lambda r: f"{memory_text(r.pair.base)} / {memory_text(r.pair.other)}",
        frozenset({MEMORY}),
    ),
    Column(  # the headline verdict only, where the row must stay one line (the report lists them all)
        "headline_verdict",
        "why",
        lambda r: r.verdicts[0] if r.verdicts else NONE,
        frozenset({TERMINAL, NOTE}),
        short="verdict",
        judged=True,
    ),
)


# --------------------------------------------------------------------------------------------- scaling


@dataclass(frozen=True)
class PointItem:
    series: Series
    point: Point
    config: str
    verdicts: tuple[str, ...] = ()


def base_text(s: Series) -> str:
    """What a series' speedups are over, saying so when the series has no run of 1 process."""
    if s.base_n is None:
        return NONE
    if s.base_n == 1:
        return "1"
    return f"{s.base_n} (smallest here; no run of 1)"


SCALING_COLUMNS: tuple[Column[PointItem], ...] = (
    Column("config", "config", lambda r: r.config),
    Column("device", "device", lambda r: r.series.label),
    Column("processes", "processes (runs)", lambda r: f"{r.point.world_size} ({len(r.point.side.runs)})"),
    Column("throughput", "throughput (samples/s)", lambda r: fmt_rate(r.point.throughput)),
    Column("speedup", "speedup", lambda r: f"{fmt_x(r.point.speedup)} over N={base_text(r.series)}"),
    Column("efficiency", "efficiency", lambda r: fmt_efficiency(r.point.efficiency)),
    Column("comm_share", "all-reduce share", lambda r: fmt_share(r.point.comm_share)),
)


# --------------------------------------------------------------------------------------------- sides


@dataclass(frozen=True)
class SideItem:
    """A side as a row: its config's label and, in the price table, the best work per money of its
    work (what its own is shown as a share of)."""

    side: Side
    config: str
    best: float | None = None


PRICE_AND_WORK = frozenset({PRICE, WORK})
PRICE_COLUMNS: tuple[Column[SideItem], ...] = (
    Column("config", "config", lambda r: r.config, PRICE_AND_WORK),
    Column("side", "side", lambda r: r.side.label, PRICE_AND_WORK),
    Column("price", "price per hour (source)", lambda r: money.price_text(r.side), frozenset({PRICE})),
    Column(
        "time_per_unit",
        "time per unit",
        lambda r: money.time_text(r.side, side_cost(r.side)),
        frozenset({PRICE}),
    ),
    Column("cost_per_unit", "cost per unit", lambda r: money.cost_per_unit_text(r.side), frozenset({PRICE})),
    Column("cost_per_1k", "cost per 1k samples", lambda r: money.cost_per_1k_text(r.side), frozenset({WORK})),
    Column("work_per_money", "work per money", lambda r: money.work_text(r.side), frozenset({WORK})),
    Column("vs_best", "vs the best", lambda r: money.share_of_best(r.side, r.best), frozenset({WORK})),
)


def price_items(every: Iterable[Side], describe: Callable[[Side], str]) -> list[SideItem]:
    """One item per side, grouped by work, most work per money first, each with its group's best where
    two or more of its sides have a price (alone, a side is its own best: 1.00× said nothing)."""
    return [
        SideItem(s, describe(s), side_cost(sides[0]).work_per_money if _priced(sides) > 1 else None)
        for sides in ranked(every)
        for s in sides
    ]


def _priced(sides: Sequence[Side]) -> int:
    return sum(1 for s in sides if side_cost(s).work_per_money)


def compared_to_best(items: Sequence[SideItem]) -> bool:
    """Whether any side's work per money is held against another's (the `vs the best` column)."""
    return any(r.best is not None for r in items)


def run_label(run: RunRecord) -> str:
    """A run as a table names it: its run name (the id is in runs.csv), the id only for a run without one."""
    return run.run_name or run.run_id


def run_names(runs: Sequence[RunRecord], most: int = 3) -> str:
    """`cifar · cpu · bs 32 (×3)`: a side's runs by name, each name once with how many runs carry it."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[run_label(r)] = counts.get(run_label(r), 0) + 1
    named = [f"{n} (×{k})" if k > 1 else n for n, k in counts.items()]
    return "; ".join(named[:most]) + (f"; {len(named) - most} more" if len(named) > most else "")


UNPAIRED_COLUMNS: tuple[Column[SideItem], ...] = (
    Column("config", "config", lambda r: r.config),
    Column("device", "device", lambda r: r.side.label),
    Column("time", "time", lambda r: side_time(r.side, r.side.time_metric() or "")),
    Column("timed", "what is timed", lambda r: timed_label(r.side.time_metric())),
    Column("runs", "runs (ids in runs.csv)", lambda r: run_names(r.side.runs)),
)


def _best_batch(side: Side) -> str:
    """`1,234/s at batch 32`: the side's best serving rate and where it was measured (the median of its
    runs' best batch sizes, as every figure of a side)."""
    rate, batch = side.metrics.get(SERVE_RATE), side.metrics.get(SERVE_BATCH)
    at = f" at batch {batch.median:g}" if batch else ""
    bound = side.metrics.get(SERVE_P99_BOUND)  # LoadGen's server: the QPS held within the promise
    within = f" within p99 {fmt_s(bound.median)}" if bound else ""
    return f"{fmt_rate(rate)}/s{within}{at}" if rate else NONE


def _gflop_text(side: Side) -> str:
    s = side.metrics.get(FORWARD_FLOPS)
    return fmt_gflops(s.median / 1e9) if s else NONE


def _tail(side: Side) -> str:
    """`1.20 ms / 2.31 ms`: p90 and p99, the medians over the side's runs (p50 has its range)."""
    stats = [side.metrics.get(k) for k in (SERVE_P90, SERVE_P99)]
    return " / ".join(fmt_s(s.median) if s else NONE for s in stats)


SERVING_COLUMNS: tuple[Column[SideItem], ...] = (
    Column("config", "config", lambda r: r.config),
    Column("side", "side", lambda r: r.side.label),
    Column("p50", "p50", lambda r: fmt_stat_s(r.side.metrics.get(SERVE_P50))),
    Column("tail", "p90 / p99", lambda r: _tail(r.side)),
    Column("throughput", "predictions (best batch)", lambda r: _best_batch(r.side)),
    Column("cost", "per M predictions", lambda r: money.cost_per_unit_text(r.side)),
    Column("gflop", "GFLOP per prediction", lambda r: _gflop_text(r.side)),
)


@dataclass(frozen=True)
class QualityItem:
    side: Side
    config: str
    metric: str

    @property
    def stat(self) -> Stat | None:
        return self.side.metrics.get(self.metric)


QUALITY_COLUMNS: tuple[Column[QualityItem], ...] = (
    Column("config", "config", lambda r: r.config),
    Column("device", "device", lambda r: r.side.label),
    Column("data", "data", lambda r: r.side.data),
    Column("value", "value (range)", lambda r: fmt_q(r.stat)),
    Column("metric", "metric", lambda r: r.metric.removeprefix("eval/")),
)


# --------------------------------------------------------------------------------------------- matmul


@dataclass(frozen=True)
class ProductItem:
    """One matmul point of a side: `times` holds `time` and `unsynced`, each where measured."""

    side: Side
    point: tuple[str, str, int]
    times: dict[str, Stat]


def _gflops(r: ProductItem) -> str:
    t = r.times.get("time")
    return fmt_gflops(gflops(r.point[2], t.median)) if t else NONE


def _unsynced(r: ProductItem) -> str:
    u = r.times.get("unsynced")
    return fmt_s(u.median) if u else NONE


PRODUCT_COLUMNS: tuple[Column[ProductItem], ...] = (
    Column("side", "side", lambda r: r.side.label),
    Column("backend", "backend", lambda r: r.point[0]),
    Column("dtype", "dtype", lambda r: r.point[1]),
    Column("n", "n", lambda r: str(r.point[2])),
    Column("gflops", "GFLOP/s", _gflops),
    Column("time", "time (synchronised)", lambda r: fmt_stat_s(r.times.get("time"))),
    Column("unsynced", "unsynchronised", _unsynced),
)


@dataclass(frozen=True)
class ProductSpeedup:
    """torch on the pair's other side against one backend on its base, at one (dtype, size)."""

    pair: Pair
    point: tuple[str, str, int]
    speedup: float


PRODUCT_SPEEDUP_COLUMNS: tuple[Column[ProductSpeedup], ...] = (
    Column("base", "base", lambda r: r.pair.base.label),
    Column("base_backend", "base backend", lambda r: r.point[0]),
    Column("other", "other (torch)", lambda r: r.pair.other.label),
    Column("dtype", "dtype", lambda r: r.point[1]),
    Column("n", "n", lambda r: str(r.point[2])),
    Column("speedup", "speedup", lambda r: fmt_x(r.speedup)),
)


def product_items(comp: Comparison) -> list[ProductItem]:
    return [ProductItem(s, pt, v) for s in comp.product_sides for pt, v in s.product_points.items()]


def product_speedups(comp: Comparison) -> list[ProductSpeedup]:
    return [ProductSpeedup(p, pt, x) for p in comp.pairs for pt, x in sorted(p.product_speedups.items())]


# --------------------------------------------------------------------------------------------- runs


UNFINISHED_COLUMNS: tuple[Column[RunRecord], ...] = (
    Column("run", "run (ids in runs.csv)", run_label),
    Column("workload", "workload", lambda r: r.workload),
    Column("device", "device", lambda r: r.device),
    Column("status", "status", lambda r: r.status),
    Column("error", "error", lambda r: r.tag("error") or NONE),
)


@dataclass(frozen=True)
class RegressionItem:
    """A regression as a row, with its config's label (its config key where no side of it was read)."""

    regression: Regression
    config: str


def regression_why(g: Regression) -> str:
    """What else the newest runs measured, for a reader deciding whether to look at the code: what NVML
    saw, and a host that other processes kept busy (then: rerun when it is idle)."""
    said = [f"NVML on the newest run(s): {g.why}"] if g.why else []
    said += [f"the newest run(s) measured on a {g.busy}"] if g.busy else []
    return "; ".join(said) + ", so the host or the GPU's limits may explain it rather than the code"


REGRESSION_COLUMNS: tuple[Column[RegressionItem], ...] = (
    Column("config", "config", lambda r: r.config),
    Column("where", "device @ host", lambda r: f"{r.regression.device} @ {r.regression.host}"),
    Column("measure", "measure", lambda r: r.regression.measure),
    Column("newest", "newest", lambda r: fmt_s(r.regression.newest)),
    Column("baseline", "baseline", lambda r: fmt_stat_s(r.regression.baseline)),
    Column("change", "change", lambda r: fmt_change(r.regression.change)),
)

SELECTION_COLUMNS: tuple[Column[tuple[str, str]], ...] = (
    Column("selection", "selection", lambda kv: kv[0]),
    Column("value", "value", lambda kv: kv[1]),
)


def pair_cells(p: Pair, config: str = "", verdicts: Sequence[str] = ()) -> dict[str, str]:
    """Every cell of a pair's row by column name, whatever view shows it (for one pair read alone)."""
    item = PairItem(p, config, tuple(verdicts))
    return {c.name: c.cell(item) for c in PAIR_COLUMNS}
