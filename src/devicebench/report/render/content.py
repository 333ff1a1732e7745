"""What the report says, independent of how it is written: a `Doc` of typed blocks, in order.

`build_doc` decides the sections, their tables (columns declared in tables.py) and their notes; the
writers (document.py) only serialise the blocks, so report.md and report.html cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from devicebench.report.judge.judgement import Judgement
from devicebench.report.judge.reliability import left_out_lines
from devicebench.report.model.comparison import Comparison
from devicebench.report.model.cost import any_price
from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import QUALITY_METRICS
from devicebench.report.render.answer import answers
from devicebench.report.render.document import Block, Doc, bullets, heading, image, paragraph, table
from devicebench.report.render.labels import Varying, describe, selection_row, varying_params
from devicebench.report.render.tables import (
    PAIR_COLUMNS,
    PAIR_VIEWS,
    PRICE,
    PRICE_COLUMNS,
    PRODUCT_COLUMNS,
    PRODUCT_SPEEDUP_COLUMNS,
    QUALITY_COLUMNS,
    REGRESSION_COLUMNS,
    SCALING_COLUMNS,
    SELECTION_COLUMNS,
    SERVING_COLUMNS,
    UNFINISHED_COLUMNS,
    UNPAIRED_COLUMNS,
    WORK,
    Column,
    PairItem,
    PointItem,
    QualityItem,
    RegressionItem,
    SideItem,
    cells,
    compared_to_best,
    headers,
    price_items,
    product_items,
    product_speedups,
    regression_why,
    shown,
)
from devicebench.schema import SERVING
from devicebench.util.fmt import fmt_share

BEST_CPU_WHICH = "any threads or data feeding, e.g. a devicebench tune run"


def pair_items(judged: Judgement | None, pairs: Sequence[Pair], varying: Varying) -> list[PairItem]:
    """The pairs as rows: each with its config's label and, where judged, its verdict lines."""
    return [PairItem(p, describe(p.base, varying), tuple(judged.of(p)) if judged else ()) for p in pairs]


def point_items(judged: Judgement, varying: Varying) -> list[PointItem]:
    """One row per world size of each scaling series, smallest first."""
    return [
        PointItem(s, pt, describe(s.points[0].side, varying), tuple(judged.at(pt)))
        for s in judged.comp.scaling
        for pt in s.points
    ]


def _add_table(doc: list[Block], columns: Sequence[Column], items: Sequence) -> None:
    table(doc, headers(columns), cells(columns, items))


def _why(doc: list[Block], items: Sequence[PairItem]) -> None:
    """Each pair's verdicts under its tables past the headline one its answer already says (a price's
    break-even read three times per config), a line each: sentences read at the page's width, where a
    table's column made them a tall strip."""
    bullets(
        doc,
        [
            (f"{r.config}: {r.pair.other.label} over {r.pair.base.label}", r.verdicts[1:])
            for r in items
            if r.verdicts[1:]
        ],
    )


# --------------------------------------------------------------------------------------------- sections


def _summary(doc: list[Block], judged: Judgement, varying: Varying) -> None:
    """The answer first: per config, who is faster, by how much, what it costs and the verdict
    (answer.py); what was read, and the definitions, come after it."""
    comp = judged.comp
    heading(doc, 1, "devicebench compare")
    bullets(doc, answers(judged, lambda s: describe(s, varying)))
    paragraph(
        doc,
        f"{len(comp.runs)} runs read ({len(comp.finished)} finished, {len(comp.unfinished)} failed/killed/running); "
        f"{len(comp.pairs)} pairs, {len(comp.unpaired)} configs without a partner device"
        + (f", {len(comp.scaling)} scaling series." if comp.scaling else ".")
        + (
            " Some runs used synthetic data: timings are real; accuracy/mIoU are not comparable."
            if any(s.data == "synthetic" for s in comp.all_sides)
            else ""
        ),
    )


def _selection(doc: list[Block], comp: Comparison, meta: dict[str, str]) -> None:
    """How the runs were chosen: the store, the experiments, the filters (last: it answers nothing)."""
    heading(doc, 2, "Selection")
    _add_table(doc, SELECTION_COLUMNS, [selection_row(k, v, comp.runs) for k, v in meta.items() if v])


def _speedups(doc: list[Block], judged: Judgement, varying: Varying) -> None:
    comp = judged.comp
    heading(doc, 2, "Speedups")
    paragraph(
        doc,
        "speedup = base time / other time (median of repeats; range from their spread); over the best "
        f"CPU: other's throughput / the fastest CPU's for the same work ({BEST_CPU_WHICH}). "
        "price ratio = other's hourly price / base's; cost ratio = other's cost of the same work / base's "
        "(below 1× the other side is cheaper), from the prices the runs logged. "
        "data wait = share of training time spent waiting for the next batch."
        + (
            " Data-parallel jobs pair like with like: both sides ran the same number of processes."
            if any(s.world_size > 1 for s in comp.all_sides)
            else ""
        ),
    )
    if comp.pairs:
        items = pair_items(judged, comp.pairs, varying)
        for view in PAIR_VIEWS:  # narrow enough for MLflow's artifact view, each table one question
            _add_table(doc, shown(PAIR_COLUMNS, view), items)
        paragraph(doc, "Why, pair by pair (past the verdict each answer above opens on):")
        _why(doc, items)
    else:
        paragraph(
            doc,
            "No config ran on two devices yet. A plan skips its cuda runs on a host without a GPU; on a "
            "GPU host the same plan (or the same command with device=cuda) gives each config its pair.",
        )


def _scaling(doc: list[Block], judged: Judgement, varying: Varying) -> None:
    """Configs run at several world sizes: what each doubling of processes bought."""
    if not judged.comp.scaling:
        return
    heading(doc, 2, "Scaling")
    paragraph(
        doc,
        "Runs of one config on one device model that differ only in world size (the processes of a "
        "data-parallel job; one GPU each on CUDA). throughput = the job's training samples per second "
        "(median of repeats; range from their spread); speedup = throughput / the throughput at the "
        "smallest world size present (over N=: 1 wherever a run of 1 exists); efficiency = speedup / "
        "(N / that world size): 1.00 is perfect scaling, below 0.70 gets a verdict. all-reduce share = "
        "steps × one all-reduce / training time, an upper bound (DDP overlaps it with the backward pass).",
    )
    items = point_items(judged, varying)
    _add_table(doc, SCALING_COLUMNS, items)
    bullets(
        doc,
        [
            (f"{r.config} on {r.series.label}, {r.point.world_size} processes", r.verdicts)
            for r in items
            if r.verdicts
        ],
    )


def _price_performance(doc: list[Block], judged: Judgement, varying: Varying) -> None:
    """Which device and shape buys the most work per money, per config; or how to get prices at all."""
    comp = judged.comp
    if not comp.all_sides:
        return
    heading(doc, 2, "Price-performance")
    if not any_price(comp.all_sides):
        paragraph(
            doc,
            "No run carries a price: run on an OCI shape listed in experiments/prices.yaml (or "
            "DEVICEBENCH_PRICES), or give price_per_hour, to see the cost of each side's work.",
        )
        return
    paragraph(
        doc,
        "Per config, the sides that buy the most work per money first (cost per epoch and per 1k samples as "
        "the runs logged them; matmul: GFLOP per money at the largest torch size). A side without a price "
        "shows why, never a number.",
    )
    items = price_items(comp.all_sides, lambda s: describe(s, varying))
    for view in (PRICE, WORK):  # two narrower tables: what each side costs; what a unit of money buys
        columns = shown(PRICE_COLUMNS, view)
        _add_table(doc, [c for c in columns if c.name != "vs_best" or compared_to_best(items)], items)
    # a CPU side without a GPU partner: what a GPU must do to be worth it is its answer's verdict, said once


def _serving(doc: list[Block], comp: Comparison, varying: Varying) -> None:
    """Every served side: a request's latency at batch 1 (p50, p90, p99 over its runs), the most
    predictions a second and at which batch, and what a million cost there."""
    sides = [s for s in comp.all_sides if s.kind is SERVING]
    if not sides:
        return
    heading(doc, 2, "Serving (batch-1 requests, end to end)")
    _add_table(doc, SERVING_COLUMNS, [SideItem(s, describe(s, varying)) for s in sides])


def _matmul(doc: list[Block], comp: Comparison) -> None:
    items = product_items(comp)
    if not items:
        return
    heading(doc, 2, "Matrix multiply")
    _add_table(doc, PRODUCT_COLUMNS, items)
    points = product_speedups(comp)
    if points:
        paragraph(doc, "torch on the other side against each backend on the base side, per size:")
        _add_table(doc, PRODUCT_SPEEDUP_COLUMNS, points)


def _quality(doc: list[Block], comp: Comparison, varying: Varying) -> None:
    items = [
        QualityItem(s, describe(s, varying), k)
        for s in comp.all_sides
        for k in QUALITY_METRICS
        if k in s.metrics
    ]
    if items:
        heading(doc, 2, "Quality")
        _add_table(doc, QUALITY_COLUMNS, items)


def _unpaired(doc: list[Block], judged: Judgement, varying: Varying) -> None:
    """Sides without a partner, then what their own figures measure (an oversubscribed CPU, ...)."""
    comp = judged.comp
    if not comp.unpaired:
        return
    heading(doc, 2, "Runs without a partner device")
    _add_table(doc, UNPAIRED_COLUMNS, [SideItem(s, describe(s, varying)) for s in comp.unpaired])
    for s in comp.unpaired:
        for line in judged.alone(s):
            paragraph(doc, f"{describe(s, varying)} on {s.label}: {line}")


def _left_out(doc: list[Block], comp: Comparison, varying: Varying) -> None:
    """The runs no figure counts: measured on a busy host beside a quiet run of the same side."""
    said = [(describe(s, varying), tuple(left_out_lines(s))) for s in comp.all_sides if s.left_out]
    if said:
        heading(doc, 2, "Left out: measured on a busy host (a quiet run of the same config counts instead)")
        bullets(doc, said)


def _unfinished(doc: list[Block], comp: Comparison) -> None:
    if comp.unfinished:
        heading(doc, 2, "Failed, killed or unfinished runs (not counted)")
        _add_table(doc, UNFINISHED_COLUMNS, comp.unfinished)


def _per_host(doc: list[Block], comp: Comparison, varying: Varying) -> None:
    if not comp.hosts:
        return
    heading(doc, 2, "Per host")
    for host, pairs in comp.hosts.items():
        heading(doc, 3, host)
        if pairs:  # the same tables, unjudged: each pair's verdicts are in the main table
            items = pair_items(None, pairs, varying)
            for view in PAIR_VIEWS:
                _add_table(doc, shown(PAIR_COLUMNS, view, judged=False), items)
        else:
            paragraph(doc, "no config ran on two devices on this host")


def _regressions(doc: list[Block], comp: Comparison, varying: Varying) -> None:
    if comp.regressions is None:
        return
    heading(doc, 2, f"Regressions (threshold {fmt_share(comp.threshold)}, beyond the baseline's spread)")
    if not comp.regressions:
        paragraph(doc, f"none across {comp.regression_groups} config/device/host groups with earlier runs")
        return
    named = {(s.workload, s.config_key): describe(s, varying) for s in comp.all_sides}
    items = [
        RegressionItem(g, named.get((g.workload, g.config_key), f"{g.workload} {g.config_key}"))
        for g in comp.regressions
    ]
    _add_table(doc, REGRESSION_COLUMNS, items)
    bullets(
        doc,
        [
            (f"{r.config} on {r.regression.device}", [regression_why(r.regression)])
            for r in items
            if r.regression.explained
        ],
    )


def build_doc(judged: Judgement, meta: dict[str, str], charts: dict[str, str]) -> Doc:
    """The report's content, independent of its format. `charts`: file name → title."""
    doc: list[Block] = []
    comp = judged.comp
    varying = varying_params(comp.all_sides)
    _summary(doc, judged, varying)
    _speedups(doc, judged, varying)
    _scaling(doc, judged, varying)
    _price_performance(doc, judged, varying)
    _serving(doc, comp, varying)
    _matmul(doc, comp)
    _quality(doc, comp, varying)
    _unpaired(doc, judged, varying)
    _left_out(doc, comp, varying)
    _unfinished(doc, comp)
    _per_host(doc, comp, varying)
    _regressions(doc, comp, varying)
    if charts:
        heading(doc, 2, "Charts")
        for name, title in charts.items():
            image(doc, name, title)
    _selection(doc, comp, meta)
    return Doc(tuple(doc))
