"""What the report says, independent of how it is written: a `Doc` of typed blocks, in order.

`build_doc` decides the sections, their tables and their notes; the writers (document.py)
only serialise the blocks, so report.md and report.html cannot disagree. Pair rows are `PairRow`s, read
by field name (the terminal table shows a few of the same cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from devicebench.report import best_cpu, money
from devicebench.report.compare import Comparison
from devicebench.report.document import Doc
from devicebench.report.fmt import (
    NONE,
    fmt_efficiency,
    fmt_memory,
    fmt_q,
    fmt_rate,
    fmt_s,
    fmt_share,
    fmt_stat_s,
    fmt_x,
)
from devicebench.report.labels import describe, timed_label, varying_params
from devicebench.report.pairs import Pair
from devicebench.report.scaling import Series
from devicebench.report.sides import Side
from devicebench.schema import ACCURACY, MIOU, TOTAL_S, gflops

# --------------------------------------------------------------------------------------------- pair rows


class PairRow(NamedTuple):
    """One pair as the speedup tables show it; PAIR_HEADERS (+ "verdict") names the cells in this order."""

    workload: str
    config: str
    base: str
    other: str
    timed: str
    base_time: str
    other_time: str
    speedup: str
    best_cpu: str
    price_ratio: str
    cost_ratio: str
    cost: str
    data_wait: str
    memory: str
    verdict: str

    def cells(self, with_verdict: bool = True) -> list[str]:
        return list(self) if with_verdict else list(self)[:-1]


PAIR_HEADERS = [
    "workload",
    "config",
    "base",
    "other",
    "what is timed",
    "base time",
    "other time",
    "speedup",
    "speedup over the best CPU",
    "price ratio (per hour)",
    "cost ratio (per unit of work)",
    "cost (base / other)",
    "data wait",
    "peak memory (GPU allocated / process RSS)",
]


HEADER = dict(zip(PairRow._fields, [*PAIR_HEADERS, "verdict"], strict=True))
# The speedups table as the report shows it: how much faster and why; what it cost; peak memory
SPLIT = (
    ("workload", "config", "base", "other", "timed", "base_time", "other_time", "speedup", "data_wait"),
    ("workload", "config", "other", "speedup", "best_cpu", "verdict"),
    ("workload", "config", "base", "other", "price_ratio", "cost_ratio", "cost"),
    ("workload", "config", "base", "other", "memory"),
)


def pair_row(p: Pair, varying: dict[str, list[str]]) -> PairRow:
    key = p.base.time_metric() or TOTAL_S
    if p.workload == "matmul" and "matmul" in p.speedups:
        timed = f"one product, n={int(p.speedups['matmul_point'])}"
        base_time = other_time = NONE
    else:
        timed = timed_label(key)
        base_time, other_time = fmt_stat_s(p.base.metrics.get(key)), fmt_stat_s(p.other.metrics.get(key))
    rng = f" ({fmt_x(p.speedup_range[0])}–{fmt_x(p.speedup_range[1])})" if p.speedup_range else ""
    price_ratio, cost_ratio, spent = money.pair_cost_cells(p.cost_base, p.other, p.cost)
    if p.cost_base is not p.base and p.cost is not None and p.cost.cost_ratio is not None:
        cost_ratio, spent = f"{cost_ratio} (against the best CPU)", f"best CPU {spent}"
    return PairRow(
        workload=p.workload,
        config=describe(p.base, varying),
        base=p.base.label,
        other=p.other.label,
        timed=timed,
        base_time=base_time,
        other_time=other_time,
        speedup=fmt_x(p.headline) + rng,
        best_cpu=best_cpu.speedup_cell(p),
        price_ratio=price_ratio,
        cost_ratio=cost_ratio,
        cost=spent,
        data_wait=f"{fmt_share(p.base.wait_share)} / {fmt_share(p.other.wait_share)}",
        memory=f"{fmt_memory(p.base)} / {fmt_memory(p.other)}",
        verdict="; ".join(p.verdicts) or NONE,
    )


def pair_rows(
    pairs: Sequence[Pair], varying: dict[str, list[str]], with_verdict: bool = True
) -> list[list[str]]:
    """The speedup table's cells, one list per pair."""
    return [pair_row(p, varying).cells(with_verdict) for p in pairs]


# --------------------------------------------------------------------------------------------- scaling rows

SCALING_HEADERS = [
    "workload", "config", "device", "processes", "throughput (samples/s)", "speedup", "over N=",
    "efficiency", "all-reduce share", "runs", "verdict",
]  # fmt: skip


def scaling_rows(series: Sequence[Series], varying: dict[str, list[str]]) -> list[list[str]]:
    """The scaling table's cells: one row per world size of each series, smallest first."""
    rows = []
    for s in series:
        config = describe(s.points[0].side, varying)
        for p in s.points:
            rows.append(
                [
                    s.workload,
                    config,
                    s.label,
                    str(p.world_size),
                    fmt_rate(p.throughput),
                    fmt_x(p.speedup),
                    s.base_text,
                    fmt_efficiency(p.efficiency),
                    fmt_share(p.comm_share),
                    str(len(p.side.runs)),
                    "; ".join(p.verdicts) or NONE,
                ]
            )
    return rows


# --------------------------------------------------------------------------------------------- sections


def _summary(doc: Doc, comp: Comparison, meta: dict[str, str]) -> None:
    doc.h(1, "devicebench compare")
    doc.p(
        f"{len(comp.runs)} runs read ({len(comp.finished)} finished, {len(comp.unfinished)} failed/killed/running); "
        f"{len(comp.pairs)} pairs, {len(comp.unpaired)} configs without a partner device"
        + (f", {len(comp.scaling)} scaling series." if comp.scaling else ".")
    )
    doc.table(["selection", "value"], [[k, v] for k, v in meta.items() if v])
    if any(s.data == "synthetic" for s in comp.all_sides):
        doc.p("Note: some runs used synthetic data (timings are real; accuracy/mIoU are not comparable).")


def _speedups(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    doc.h(2, "Speedups")
    doc.p(
        "speedup = base time / other time (median of repeats; range from their spread); over the best "
        f"CPU: other's throughput / the fastest CPU's for the same work ({best_cpu.WHICH}). "
        "price ratio = other's hourly price / base's; cost ratio = other's cost of the same work / base's "
        "(below 1× the other side is cheaper), from the prices the runs logged. "
        "data wait = share of training time spent waiting for the next batch."
        + (
            " Data-parallel jobs pair like with like: both sides ran the same number of processes."
            if any(s.world_size > 1 for s in comp.all_sides)
            else ""
        )
    )
    if comp.pairs:
        rows = [pair_row(p, varying) for p in comp.pairs]
        for fields in SPLIT:  # narrow enough for MLflow's artifact view, each table one question
            doc.table([HEADER[f] for f in fields], [[getattr(r, f) for f in fields] for r in rows])
    else:
        doc.p(
            "No config ran on two devices yet. A plan skips its cuda runs on a host without a GPU; on a "
            "GPU host the same plan (or the same command with device=cuda) gives each config its pair."
        )


def _scaling(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    """Configs run at several world sizes: what each doubling of processes bought."""
    if not comp.scaling:
        return
    doc.h(2, "Scaling")
    doc.p(
        "Runs of one config on one device model that differ only in world size (the processes of a "
        "data-parallel job; one GPU each on CUDA). throughput = the job's training samples per second "
        "(median of repeats; range from their spread); speedup = throughput / the throughput at the "
        "smallest world size present (over N=: 1 wherever a run of 1 exists); efficiency = speedup / "
        "(N / that world size): 1.00 is perfect scaling, below 0.70 gets a verdict. all-reduce share = "
        "steps × one all-reduce / training time, an upper bound (DDP overlaps it with the backward pass)."
    )
    doc.table(SCALING_HEADERS, scaling_rows(comp.scaling, varying))


PRICE_SPLIT = ((0, 1, 2, 3, 4, 5), (0, 1, 2, 6, 7, 8))  # money.SIDE_HEADERS' columns, per table


def _price_performance(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    """Which device and shape buys the most work per money, per config; or how to get prices at all."""
    if not comp.all_sides:
        return
    doc.h(2, "Price-performance")
    if not money.any_price(comp.all_sides):
        doc.p(
            "No run carries a price: run on an OCI shape listed in experiments/prices.yaml (or "
            "DEVICEBENCH_PRICES), or give price_per_hour, to see the cost of each side's work."
        )
        return
    doc.p(
        "Per config, the sides that buy the most work per money first (cost per epoch and per 1k samples as "
        "the runs logged them; matmul: GFLOP per money at the largest torch size). A side without a price "
        "shows why, never a number."
    )
    rows = money.side_rows(comp.all_sides, lambda s: describe(s, varying))
    for cols in PRICE_SPLIT:  # two narrower tables: what each side costs; what a unit of money buys
        doc.table([money.SIDE_HEADERS[i] for i in cols], [[r[i] for i in cols] for r in rows])


def _matmul(doc: Doc, comp: Comparison) -> None:
    rows = []
    for s in comp.matmul_sides:
        for (backend, dtype, size), v in s.matmul.items():
            t, u = v.get("time"), v.get("unsynced")
            rows.append(
                [
                    s.label,
                    backend,
                    dtype,
                    str(size),
                    f"{gflops(size, t.median):.1f}" if t else NONE,
                    fmt_stat_s(t),
                    fmt_s(u.median) if u else NONE,
                ]
            )
    if not rows:
        return
    doc.h(2, "Matrix multiply")
    doc.table(["side", "backend", "dtype", "n", "GFLOP/s", "time (synchronised)", "unsynchronised"], rows)
    points = [
        [p.base.label, backend, p.other.label, dtype, str(size), fmt_x(x)]
        for p in comp.pairs
        for (backend, dtype, size), x in sorted(p.matmul.items())
    ]
    if points:
        doc.p("torch on the other side against each backend on the base side, per size:")
        doc.table(["base", "base backend", "other (torch)", "dtype", "n", "speedup"], points)


def _quality(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    rows = [
        [s.workload, describe(s, varying), s.label, s.data, fmt_q(s.metrics.get(k)), k.removeprefix("eval/")]
        for s in comp.all_sides
        for k in (ACCURACY, MIOU)
        if k in s.metrics
    ]
    if rows:
        doc.h(2, "Quality")
        doc.table(["workload", "config", "device", "data", "value (range)", "metric"], rows)


def _run_ids(side: Side, most: int = 5) -> str:
    return ", ".join(r.run_id for r in side.runs[:most]) + (" …" if len(side.runs) > most else "")


def _unpaired(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    if not comp.unpaired:
        return
    doc.h(2, "Runs without a partner device")
    doc.table(
        ["workload", "config", "device", "runs", "time", "what is timed", "run ids"],
        [
            [
                s.workload,
                describe(s, varying),
                s.label,
                str(len(s.runs)),
                fmt_stat_s(s.metrics.get(s.time_metric() or "")),
                timed_label(s.time_metric()),
                _run_ids(s),
            ]
            for s in comp.unpaired
        ],
    )


def _unfinished(doc: Doc, comp: Comparison) -> None:
    if comp.unfinished:
        doc.h(2, "Failed, killed or unfinished runs (not counted)")
        doc.table(
            ["run id", "workload", "device", "status", "error"],
            [[r.run_id, r.workload, r.device, r.status, r.tag("error") or NONE] for r in comp.unfinished],
        )


def _per_host(doc: Doc, comp: Comparison, varying: dict[str, list[str]]) -> None:
    if not comp.hosts:
        return
    doc.h(2, "Per host")
    for host, pairs in comp.hosts.items():
        doc.h(3, host)
        if pairs:
            rows = [pair_row(p, varying) for p in pairs]
            for fields in SPLIT:
                fields = tuple(f for f in fields if f != "verdict")
                doc.table([HEADER[f] for f in fields], [[getattr(r, f) for f in fields] for r in rows])
        else:
            doc.p("no config ran on two devices on this host")


def _regressions(doc: Doc, comp: Comparison) -> None:
    if comp.regressions is None:
        return
    doc.h(2, f"Regressions (threshold {comp.threshold:.0%}, beyond the baseline's spread)")
    if not comp.regressions:
        doc.p(f"none across {comp.regression_groups} config/device/host groups with earlier runs")
        return
    doc.table(
        ["workload", "config", "device", "host", "measure", "newest", "baseline", "change"],
        [
            [
                g.workload,
                g.config_key,
                g.device,
                g.host,
                g.measure,
                fmt_s(g.newest),
                fmt_stat_s(g.baseline),
                f"{g.change:+.0%}",
            ]
            for g in comp.regressions
        ],
    )


def build_doc(comp: Comparison, meta: dict[str, str], charts: dict[str, str]) -> Doc:
    """The report's content, independent of its format. `charts`: file name → title."""
    doc = Doc()
    varying = varying_params(comp.all_sides)
    _summary(doc, comp, meta)
    _speedups(doc, comp, varying)
    _scaling(doc, comp, varying)
    _price_performance(doc, comp, varying)
    _matmul(doc, comp)
    _quality(doc, comp, varying)
    _unpaired(doc, comp, varying)
    _unfinished(doc, comp)
    _per_host(doc, comp, varying)
    _regressions(doc, comp)
    if charts:
        doc.h(2, "Charts")
        for name, title in charts.items():
            doc.img(name, title)
    return doc
