"""The report's PNG charts (matplotlib, Agg, imported only when a chart is drawn).

Each chart function returns whether it had anything to draw, so the report lists only charts that exist.
The charts are read at about 600 px (MLflow's artifact view) as well as on a wide screen, so each one
holds to a few rules:

- like with like: an axis pair holds one workload (the cost chart is one chart per workload), since an
  epoch of cifar and an epoch of unet are not the same work;
- the axes show the real spread: a log axis spans at least `MIN_LOG_SPAN` (a factor of 10), so a 2 %
  difference stays a small step instead of the whole height;
- tick labels are spelt by util.fmt (matplotlib's log ticks are mathtext, which `text.parse_math =
  False` would print raw), at 1-2-5 steps;
- what names a point sits in a legend under the axes, where it cannot overlap another or be clipped.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicebench.report.judge.price_rules import batching_said
from devicebench.report.model.comparison import Comparison
from devicebench.report.model.cost import epoch_time, side_cost
from devicebench.report.model.grids import Grid
from devicebench.report.model.pairs import Pair
from devicebench.report.model.scaling import Series
from devicebench.report.model.serving import ServingChoice
from devicebench.report.model.sides import Side
from devicebench.report.render.labels import describe, varying_params
from devicebench.schema import FORWARD_FLOPS, SERVING, TRAINING, gflops
from devicebench.util.fmt import SEP, fmt_amount, fmt_money, fmt_percent, fmt_s, fmt_x
from devicebench.util.stats import quantile

SPEEDUP_PNG = "speedup_by_workload.png"
GFLOPS_PNG = "matmul_gflops.png"
COST_PNG = "cost_vs_time_{}.png"  # one per workload
SCALING_PNG = "scaling.png"
SIZE_PNG = "speedup_vs_flops.png"
P99_PNG = "p99_vs_qps_{}.png"  # one per served model
MIN_LOG_SPAN = 10.0  # the least a log axis spans (hi / lo): a 2 % difference is then 1 % of the height
MARKERS_BY_SIDE = ("o", "^", "s", "D", "v", "P", "X", "*")  # the sides of one config, told apart


def _plt() -> Any:
    """pyplot on the Agg backend (no display), chosen before pyplot is imported, which fixes it."""
    import matplotlib  # lazy: a report without charts never pays it; the backend is set before pyplot

    matplotlib.use("Agg")
    # every label comes from run data: a GPU name tag `GPU $x^{$` once made mathtext raise and killed
    # the whole report; text is drawn as it is, never parsed as math
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt  # lazy: after the backend, as above

    return plt


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def log_limits(values: Sequence[float], min_span: float = MIN_LOG_SPAN) -> tuple[float, float]:
    """A log axis's limits over positive `values`: their range with a margin, widened about its
    geometric middle to at least `min_span`, so the axis never zooms a small spread into its whole
    length."""
    lo, hi = min(values), max(values)
    span = max(hi / lo, min_span)
    mid = math.sqrt(lo * hi)
    margin = span**0.05
    return mid / math.sqrt(span) / margin, mid * math.sqrt(span) * margin


def _log_axis(ax: Any, which: str, values: Sequence[float], spell: Any) -> None:
    """Axis `which` ("x" or "y") on a log scale over `values` (log_limits), ticks at 1-2-5 steps (1 per
    decade past three decades) spelt by `spell`, minor ticks unlabelled."""
    plt = _plt()
    lo, hi = log_limits(values)
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(lo, hi)
    subs = (1.0, 2.0, 5.0) if math.log10(hi / lo) <= 3 else (1.0,)
    axis.set_major_locator(plt.LogLocator(base=10, subs=subs))
    axis.set_major_formatter(plt.FuncFormatter(lambda x, _pos: spell(x)))
    axis.set_minor_formatter(plt.NullFormatter())


def _legend_below(ax: Any, columns: int = 1) -> None:
    """The legend under the axes, outside them: it hides no point, and the saved figure grows to hold it."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=columns, frameon=False)


def speedup_chart(pairs: Sequence[Pair], path: Path) -> bool:
    """Each pair's headline speedup as a dot per workload and device pair (log scale: 0.5× and 2× look alike)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for p in pairs:
        if p.headline is not None and p.headline > 0:
            groups[f"{p.workload}\n{p.other.device} vs {p.base.device}"].append(p.headline)
    if not groups:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(groups)), 4.5))
    names = sorted(groups)
    for i, name in enumerate(names):
        ys = groups[name]
        xs = [i + (j % 9 - 4) * 0.03 for j in range(len(ys))]
        ax.scatter(xs, ys, alpha=0.6, s=18)
        ax.hlines(quantile(sorted(ys), 0.5), i - 0.3, i + 0.3, colors="black")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    _log_axis(ax, "y", [1.0, *(y for ys in groups.values() for y in ys)], fmt_x)
    ax.set_ylabel("speedup (base time / other time)")
    ax.set_title("Speedup per workload (dots: configs; bar: median)")
    ax.grid(True, axis="y", alpha=0.3)
    _save(plt, fig, path)
    return True


def gflops_chart(sides: Sequence[Side], path: Path) -> bool:
    """GFLOP/s against n per device, backend and dtype: where each device stops gaining from size."""
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in sides:
        for (backend, dtype, size), v in s.product_points.items():
            if "time" in v and v["time"].median > 0:
                if backend == "numpy":  # NumPy runs on the host CPU whatever device the run asked for
                    where, model = "cpu", s.runs[0].tag("host.cpu_model") or "?"
                else:
                    where, model = s.device, s.device_name or "?"
                series[f"{backend} {dtype} on {where} ({model})"][size].append(gflops(size, v["time"].median))
    if not series:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in sorted(series):
        pts = sorted(series[label].items())
        ax.plot([n for n, _ in pts], [max(v) for _, v in pts], marker="o", label=label)
    sizes = sorted({n for pts in series.values() for n in pts})
    values = [max(v) for pts in series.values() for v in pts.values()]
    _log_log(ax, "matrix size n", "GFLOP/s (median of synchronised repeats)", "Matrix multiply throughput")
    _log_axis(ax, "y", values, fmt_amount)
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    _save(plt, fig, path)
    return True


def _heat(ax: Any, grid: Grid, values: dict[tuple[float, float], float], sign: float) -> Any:
    """One heatmap panel over width × batch_size: green where log10(x) × sign > 0, each cell spelled.
    `sign` 0 draws a share in [0, 1] (of the device's peak) on a plain scale, spelled as a percentage."""
    ws, bs = grid.widths, grid.batch_sizes
    data = [[values.get((w, b), math.nan) for b in bs] for w in ws]
    top = max([x for row in data for x in row if not math.isnan(x)] + [1e-9])
    if sign == 0:
        im = ax.imshow(data, cmap="Greens", vmin=0, vmax=top, aspect="auto", origin="lower")
    else:
        logs = [[sign * math.log10(x) if not math.isnan(x) and x > 0 else math.nan for x in r] for r in data]
        lim = max([*(abs(x) for row in logs for x in row if not math.isnan(x)), 0.3])
        im = ax.imshow(logs, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
    for i, row in enumerate(data):
        for j, x in enumerate(row):
            if not math.isnan(x):
                ax.text(
                    j,
                    i,
                    fmt_percent(x) if sign == 0 else fmt_x(x),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if sign == 0 and x > 0.6 * top else "black",  # readable on dark green
                )
    ax.set_xticks(range(len(bs)), [f"{b:g}" for b in bs])
    ax.set_yticks(range(len(ws)), [f"{w:g}" for w in ws])
    ax.set_xlabel("batch_size")
    ax.set_ylabel("width")
    return im


def _percent_ticks() -> Any:
    return _plt().FuncFormatter(lambda x, _pos: fmt_percent(x))


def crossover_chart(grid: Grid, path: Path) -> int:
    """Speedup over width × batch_size: where the GPU starts to pay off in time; beside it, where runs
    carry prices, the cost ratio of the same work: where it pays in money. Returns the panels drawn."""
    plt = _plt()
    panels = [(grid.cells, 1.0, f"Crossover: {grid.title}", "log10 speedup")]
    if grid.best_cpu_cells:  # against this CPU at its best (a tuned side): where the GPU really pays off
        panels.append((grid.best_cpu_cells, 1.0, f"{grid.other} over this CPU at its best", "log10 speedup"))
    if grid.cost_cells:  # no price on any cell: no money panel, never a made-up one
        panels.append(
            (
                grid.cost_cells,
                -1.0,
                f"Cost ratio of the same work: {grid.other} / {grid.cost_base or grid.base} "
                f"(green: cheaper on {grid.other})",
                "log10 (1 / cost ratio)",
            )
        )
    if grid.peak_cells:  # the GPU side's share of its dense peak: launch-bound where it stays tiny
        panels.append((grid.peak_cells, 0.0, f"{grid.other}: share of its dense peak", "share of peak"))
    # one panel a row: side by side, four panels were 2,500 px, shrunk to a quarter in the report
    size = (1.0 * len(grid.batch_sizes) + 3.5, 0.7 * len(grid.widths) + 2.2)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(size[0], size[1] * len(panels)), squeeze=False, layout="constrained"
    )
    for ax, (values, sign, title, bar) in zip(axes.flat, panels, strict=True):
        im = _heat(ax, grid, values, sign)
        ax.set_title(textwrap.fill(title, int(size[0] * 11)), fontsize=9)
        # a share's bar in percent: matplotlib's own ticks would put a "1e-5" offset over the title
        ticks = _percent_ticks() if sign == 0 else None
        fig.colorbar(im, ax=ax, label=bar, format=ticks)
    _save(plt, fig, path)
    return len(panels)


def crossover_caption(grid: Grid) -> str:
    """What the heatmap's panels beyond the speedup show, in the words of the report's chart list."""
    extra = [
        text
        for cells, text in (
            (grid.best_cpu_cells, "against this CPU at its best"),
            (grid.cost_cells, "where it pays in money"),
            (grid.peak_cells, "the share of the GPU's peak"),
        )
        if cells
    ]
    return f"; {', '.join(extra)}" if extra else ""


@dataclass(frozen=True)
class CostPoint:
    """One side on the cost chart: its time and cost per epoch, and what names it in the legend."""

    workload: str
    config: str
    side: str
    seconds: float
    cost: float
    currency: str


def cost_points(sides: Sequence[Side]) -> dict[str, list[CostPoint]]:
    """workload → its priced training sides' points, where it has two or more (one point compares
    nothing): one chart each, since an epoch of one workload is not an epoch of another. The config
    labels are the tables' (labels.describe over every side)."""
    varying = varying_params(sides)
    points: dict[str, list[CostPoint]] = defaultdict(list)
    for s in sides:
        c, t = side_cost(s), epoch_time(s)
        if c.unit == "epoch" and c.per_unit and t is not None and t.median > 0:
            points[s.workload].append(
                CostPoint(s.workload, describe(s, varying), s.label, t.median, c.per_unit, s.price.currency)
            )
    return {w: pts for w, pts in sorted(points.items()) if len(pts) > 1}


def cost_figure(workload: str, points: Sequence[CostPoint]) -> Any:
    """One workload's sides, cost per epoch against time per epoch on log axes of at least a decade
    each: a colour per config, a marker per side of it, each named in the legend under the axes."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    configs = list(dict.fromkeys(p.config for p in points))
    colours = plt.get_cmap("tab10")
    for i, config in enumerate(configs):
        mine = [p for p in points if p.config == config]
        for j, p in enumerate(mine):
            ax.scatter(
                [p.seconds],
                [p.cost],
                s=36,
                color=colours(i % 10),
                marker=MARKERS_BY_SIDE[j % len(MARKERS_BY_SIDE)],
                label=f"{config}: {p.side}",
            )
    currencies = sorted({p.currency or "USD" for p in points})
    spell = (lambda x: fmt_money(x, currencies[0])) if len(currencies) == 1 else fmt_amount
    _log_axis(ax, "x", [p.seconds for p in points], fmt_amount)
    _log_axis(ax, "y", [p.cost for p in points], spell)
    ax.set_xlabel("time per epoch (s, median of repeats)")
    ax.set_ylabel(f"cost per epoch ({', '.join(currencies)})")
    ax.set_title(f"{workload}: cost against time per epoch (lower left: cheaper and faster)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    _legend_below(ax)
    return fig


def cost_time_charts(sides: Sequence[Side], out: Path) -> dict[str, str]:
    """One cost chart per workload with priced training sides; file name → title."""
    plt = _plt()
    charts = {}
    for workload, points in cost_points(sides).items():
        name = COST_PNG.format(re.sub(r"[^A-Za-z0-9_-]+", "-", workload)[:40])
        _save(plt, cost_figure(workload, points), out / name)
        charts[name] = f"{workload}: cost per epoch against time per epoch, per config and side"
    return charts


def scaling_chart(series: Sequence[Series], path: Path, varying: dict[str, list[str]]) -> bool:
    """Job throughput against world size per series, beside its ideal line (base throughput × N / N_base),
    both axes log: perfect scaling is a straight line, and the gap to it reads the same at every N."""
    drawn = [s for s in series if s.base is not None]
    if not drawn:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in drawn:
        pts = [(p.world_size, p.throughput) for p in s.points if p.throughput is not None]
        xs = [n for n, _ in pts]
        ys = [t.median for _, t in pts]
        err = [[t.median - t.lo for _, t in pts], [t.hi - t.median for _, t in pts]]
        label = f"{describe(s.points[0].side, varying)} on {s.label}"
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
        ideal = [n for n in s.world_sizes if n >= (s.base_n or 1)]
        ax.plot(ideal, [s.ideal(n) for n in ideal], linestyle="--", color=line[0].get_color(), alpha=0.6)
    ax.plot([], [], linestyle="--", color="grey", label="ideal: base throughput × N / N_base")
    _log_log(
        ax,
        "world size N (processes; one GPU each on CUDA)",
        "training samples/s (job, median of repeats)",
        "Scaling: throughput against world size (dashed: ideal)",
    )
    sizes = sorted({n for s in drawn for n in s.world_sizes})
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    rates = [p.throughput for s in drawn for p in s.points if p.throughput is not None]
    ideal = [
        x for s in drawn for n in s.world_sizes if n >= (s.base_n or 1) and (x := s.ideal(n)) is not None
    ]
    _log_axis(ax, "y", [*(t.lo for t in rates), *(t.hi for t in rates), *ideal], fmt_amount)
    _save(plt, fig, path)
    return True


def _log_log(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    """Both throughput charts: powers of two along x (their ticks: the sizes drawn), a grid and a
    small legend under the axes; the y axis is `_log_axis`'s."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    _legend_below(ax)


def _flops(side: Side) -> float | None:
    s = side.metrics.get(FORWARD_FLOPS)
    return s.median if s and s.median > 0 else None


def _model_name(side: Side) -> str:
    """`resnet18`, or a factory's function name (`mymodel.py:build` → `build`)."""
    return side.params.get("model", "?").rpartition(":")[2] or "?"


def size_points(pairs: Sequence[Pair], unpaired: Sequence[Side]) -> dict[str, list[tuple[float, float, str]]]:
    """The speedup-against-size chart's series: (forward GFLOP per sample, speedup, model) for training
    as configured, training against the CPU at its best, and serving (throughput at each side's best
    batch); and CPU sides with no GPU side yet, at speedup 0 (drawn along the bottom)."""
    series: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for p in pairs:
        flops = _flops(p.base) or _flops(p.other)
        if not p.is_cpu_gpu or flops is None:  # only a model built by name logs its forward FLOPs
            continue
        name = _model_name(p.base)
        if p.kind is TRAINING and p.speedups.get("train"):
            series["training, as configured"].append((flops / 1e9, p.speedups["train"], name))
            if p.best_cpu is not None and p.best_cpu is not p.base and p.best_cpu_speedup:
                series["training, against the CPU at its best"].append(
                    (flops / 1e9, p.best_cpu_speedup, name)
                )
        elif p.kind is SERVING and p.speedups.get("serve_throughput"):
            series["serving (predictions/s)"].append((flops / 1e9, p.speedups["serve_throughput"], name))
    for s in unpaired:
        if s.is_cpu and (flops := _flops(s)) is not None:
            series["CPU only: no GPU side yet"].append((flops / 1e9, 0.0, f"{_model_name(s)} ({s.workload})"))
    return dict(series)


MARKERS = {
    "training, as configured": "o",
    "training, against the CPU at its best": "s",
    "serving (predictions/s)": "^",
    "CPU only: no GPU side yet": "x",
}


def size_chart(pairs: Sequence[Pair], unpaired: Sequence[Side], path: Path) -> bool:
    """Speedup against the model's forward FLOPs per sample, one point per model and question: the
    answer to "for my kind of model". No chart without a GPU side: a speedup axis with nothing on it
    read as speedups below zero. CPU-only models sit on the bottom edge beside the speedups until a GPU
    ran them. Each point is named in the legend under the axes (a colour per model, a marker per
    question), never beside the point, where names overprinted."""
    series = size_points(pairs, unpaired)
    speedups = [y for k, pts in series.items() if not k.startswith("CPU only") for _, y, _ in pts]
    if not speedups:
        return False
    plt = _plt()
    from matplotlib.transforms import blended_transform_factory  # lazy: with pyplot (above)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottom = blended_transform_factory(ax.transData, ax.transAxes)
    models = sorted({name for pts in series.values() for _, _, name in pts})
    colour = {name: f"C{i % 10}" for i, name in enumerate(models)}
    for label, points in series.items():
        alone = label.startswith("CPU only")
        for x, y, name in points:
            ax.scatter(
                [x],
                [0.04 if alone else y],
                marker=MARKERS[label],
                color="grey" if alone else colour[name],
                label=f"{name}: {label}",
                alpha=0.8,
                **({"transform": bottom} if alone else {}),
            )
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    _log_axis(ax, "y", [1.0, *speedups], fmt_x)
    _log_axis(ax, "x", [x for pts in series.values() for x, _, _ in pts], fmt_amount)
    ax.set_xlabel("model size: forward GFLOP per sample")
    ax.set_ylabel("GPU speedup over the CPU")
    ax.set_title("Speedup against the model's size")
    ax.grid(True, alpha=0.3)
    _legend_below(ax, columns=2 if len(models) > 3 else 1)
    _save(plt, fig, path)
    return True


def p99_figure(choice: ServingChoice, title: str) -> Any:
    """One served model's server searches: p99 against the QPS asked, a colour per device (VALID
    filled, INVALID hollow), the promise as a dashed horizontal line, both axes log."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.axhline(
        choice.promise_s, color="grey", linestyle="--", label=f"promise: p99 {fmt_s(choice.promise_s)}"
    )
    for i, curve in enumerate(choice.curves):
        colour = f"C{i % 10}"
        qps, p99 = [t[0] for t in curve.tests], [t[1] for t in curve.tests]
        ax.plot(qps, p99, color=colour, alpha=0.5)
        faces = [colour if valid else "none" for _, _, valid in curve.tests]
        said = f"{curve.side.label} ({curve.via}): {batching_said(curve.side)}"
        ax.scatter(qps, p99, color=colour, facecolors=faces, label=said)
    tests = [t for c in choice.curves for t in c.tests]
    _log_axis(ax, "x", [t[0] for t in tests], fmt_amount)
    _log_axis(ax, "y", [choice.promise_s, *(t[1] for t in tests if t[1] > 0)], fmt_s)
    ax.set_xlabel("QPS asked (LoadGen server scenario, Poisson arrivals)")
    ax.set_ylabel("p99 latency (filled: VALID)")
    ax.set_title(textwrap.fill(f"{title}: p99 against QPS per device", 70), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    _legend_below(ax)
    return fig


def served_model(side: Side) -> str:
    """`infer · resnet18 · 3x64x64`: the model a served side ran and its input, never its batch setting
    (each device's is in the legend)."""
    what = [side.params.get("model_uri") or side.params.get("model", "?"), side.params.get("input", "")]
    return SEP.join([side.workload, *(w for w in what if w)])


def p99_charts(choices: Sequence[ServingChoice], out: Path) -> dict[str, str]:
    """One p99-against-QPS chart per served model whose runs logged their server tests; name → title."""
    plt = _plt()
    charts = {}
    for i, choice in enumerate((c for c in choices if c.curves), 1):
        name, model = P99_PNG.format(i), served_model(choice.cheapest)
        _save(plt, p99_figure(choice, model), out / name)
        charts[name] = f"{model}: p99 against QPS per device, the promise as a dashed line"
    return charts


def write_charts(comp: Comparison, out: Path) -> dict[str, str]:
    """Write every chart that has data; returns file name → title, in report order."""
    charts: dict[str, str] = {}
    if speedup_chart(comp.pairs, out / SPEEDUP_PNG):
        charts[SPEEDUP_PNG] = "speedup per workload"
    if gflops_chart(comp.product_sides, out / GFLOPS_PNG):
        charts[GFLOPS_PNG] = "GFLOP/s against matrix size per device and dtype"
    charts.update(cost_time_charts(comp.all_sides, out))
    if size_chart(comp.pairs, comp.unpaired, out / SIZE_PNG):
        charts[SIZE_PNG] = "speedup against the model's forward GFLOP per sample (training and serving)"
    if scaling_chart(comp.scaling, out / SCALING_PNG, varying_params(comp.all_sides)):
        charts[SCALING_PNG] = "throughput against world size per config and device model, with the ideal line"
    if any(c.curves for c in comp.serving):
        charts.update(p99_charts(comp.serving, out))
    for i, grid in enumerate(comp.grids, 1):
        name = f"crossover_{i}_{grid.workload}.png"
        crossover_chart(grid, out / name)
        charts[name] = f"crossover heatmap: {grid.title}{crossover_caption(grid)}"
    return charts
