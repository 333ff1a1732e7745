"""The report's PNG charts (matplotlib, Agg, imported only when a chart is drawn).

Each chart function returns whether it had anything to draw, so the report lists only charts that exist.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicebench.report.compare import Comparison, Grid
from devicebench.report.pairs import Pair
from devicebench.report.sides import Side
from devicebench.schema import fmt_speedup, gflops
from devicebench.stats import quantile

SPEEDUP_PNG = "speedup_by_workload.png"
GFLOPS_PNG = "matmul_gflops.png"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


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
    ax.set_yscale("log")
    ax.set_ylabel("speedup (base time / other time)")
    ax.set_title("Speedup per workload (dots: configs; bar: median)")
    ax.grid(True, axis="y", alpha=0.3)
    _save(plt, fig, path)
    return True


def gflops_chart(sides: Sequence[Side], path: Path) -> bool:
    """GFLOP/s against n per device, backend and dtype: where each device stops gaining from size."""
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in sides:
        for (backend, dtype, size), v in s.matmul.items():
            if "time" in v and v["time"].median > 0:
                if backend == "numpy":  # NumPy runs on the host CPU whatever device the run asked for
                    where, model = "cpu", s.runs[0].tag("host.cpu_model") or "?"
                else:
                    where, model = s.device, s.device_name or "?"
                series[f"{backend} {dtype} on {where} ({model})"][size].append(gflops(size, v["time"].median))
    if not series:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label in sorted(series):
        pts = sorted(series[label].items())
        ax.plot([n for n, _ in pts], [max(v) for _, v in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("matrix size n")
    ax.set_ylabel("GFLOP/s (median of synchronised repeats)")
    ax.set_title("Matrix multiply throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    _save(plt, fig, path)
    return True


def crossover_chart(grid: Grid, path: Path) -> None:
    """Speedup over width × batch_size: where the GPU starts to pay off."""
    plt = _plt()
    ws, bs = grid.widths, grid.batch_sizes
    data = [[grid.cells.get((w, b), math.nan) for b in bs] for w in ws]
    fig, ax = plt.subplots(figsize=(1.2 * len(bs) + 3, 0.8 * len(ws) + 2.5))
    logs = [[math.log10(x) if not math.isnan(x) and x > 0 else math.nan for x in row] for row in data]
    lim = max([*(abs(x) for row in logs for x in row if not math.isnan(x)), 0.3])
    im = ax.imshow(logs, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
    for i, row in enumerate(data):
        for j, x in enumerate(row):
            if not math.isnan(x):
                ax.text(j, i, fmt_speedup(x), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(bs)), [f"{b:g}" for b in bs])
    ax.set_yticks(range(len(ws)), [f"{w:g}" for w in ws])
    ax.set_xlabel("batch_size")
    ax.set_ylabel("width")
    ax.set_title(f"Crossover: {grid.title}", fontsize=9)
    fig.colorbar(im, ax=ax, label="log10 speedup")
    _save(plt, fig, path)


def write_charts(comp: Comparison, out: Path) -> dict[str, str]:
    """Write every chart that has data; returns file name → title, in report order."""
    charts: dict[str, str] = {}
    if speedup_chart(comp.pairs, out / SPEEDUP_PNG):
        charts[SPEEDUP_PNG] = "speedup per workload"
    if gflops_chart(comp.matmul_sides, out / GFLOPS_PNG):
        charts[GFLOPS_PNG] = "GFLOP/s against matrix size per device and dtype"
    for i, grid in enumerate(comp.grids, 1):
        name = f"crossover_{i}_{grid.workload}.png"
        crossover_chart(grid, out / name)
        charts[name] = f"crossover heatmap: {grid.title}"
    return charts
