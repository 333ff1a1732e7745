"""A Comparison → terminal table, `report.md`, self-contained `report.html`, `runs.csv` and PNG charts.

Markdown and HTML are rendered from one list of blocks, so the two files cannot disagree. The HTML
embeds its charts as base64 PNG: one file that opens from the MLflow UI's artifact view or an e-mail,
with nothing next to it to lose.
"""

from __future__ import annotations

import base64
import csv
import html
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicebench.report.compare import NOT_WORK, Comparison, Grid, Pair, Side, Stat, gflops
from devicebench.report.query import RunRecord

SPEEDUP_PNG = "speedup_by_workload.png"
GFLOPS_PNG = "matmul_gflops.png"
MAX_ROWS = 500  # per table in md/html; the CSV always has every run


# --------------------------------------------------------------------------------------------- format


def fmt_s(x: float | None) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def fmt_stat_s(s: Stat | None) -> str:
    if s is None:
        return "–"
    if s.n == 1:
        return fmt_s(s.median)
    return f"{fmt_s(s.median)} ({fmt_s(s.lo)}–{fmt_s(s.hi)}, n={s.n})"


def fmt_x(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def fmt_share(s: Stat | None) -> str:
    return "–" if s is None else f"{s.median:.0%}"


def fmt_bytes(s: Stat | None) -> str:
    if s is None:
        return "–"
    x = s.median
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def fmt_q(s: Stat | None) -> str:
    if s is None:
        return "–"
    return f"{s.median:.3f}" if s.n == 1 else f"{s.median:.3f} ({s.lo:.3f}–{s.hi:.3f})"


# --------------------------------------------------------------------------------------------- blocks


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Doc:
    """Headings, paragraphs, tables and images, in order."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, headers: list[str], rows: list[list[str]]) -> None:
        note = ""
        if len(rows) > MAX_ROWS:
            note = f"{len(rows) - MAX_ROWS} more rows in runs.csv"
            rows = rows[:MAX_ROWS]
        self.blocks.append(("table", Table(headers, rows, note)))

    def img(self, name: str, alt: str) -> None:
        self.blocks.append(("img", (name, alt)))


def varying_params(sides: Sequence[Side]) -> dict[str, list[str]]:
    """workload → the params whose values differ between its configs: what tells two rows apart."""
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for s in sides:
        for k, v in s.params.items():
            values[s.workload][k].add(v)
    return {
        w: sorted(k for k, vs in params.items() if len(vs) > 1 and k not in NOT_WORK)
        for w, params in values.items()
    }


def describe(side: Side, varying: dict[str, list[str]]) -> str:
    keys = varying.get(side.workload) or []
    text = " ".join(f"{k}={side.params.get(k, '')}" for k in keys)
    return text or side.config_key


def fmt_memory(side: Side) -> str:
    """A side's peak memory, saying which kind: on CUDA what the caching allocator handed out
    (`max_memory_allocated`) beside the process's RSS; elsewhere the process's peak RSS, which is all
    `memory/peak_bytes` holds there. A bare number of each kind side by side read as one measure."""
    rss = side.metrics.get("memory/peak_rss_bytes")
    if side.device.startswith("cuda"):
        return f"GPU alloc {fmt_bytes(side.metrics.get('memory/peak_bytes'))}, RSS {fmt_bytes(rss)}"
    return f"RSS {fmt_bytes(rss or side.metrics.get('memory/peak_bytes'))}"


def pair_rows(
    pairs: Sequence[Pair], varying: dict[str, list[str]], with_verdict: bool = True
) -> list[list[str]]:
    rows = []
    for p in pairs:
        key = p.base.time_metric() or "time/total_s"
        if p.workload == "matmul" and "matmul" in p.speedups:
            what = f"matmul n={int(p.speedups['matmul_point'])}"
            a_time = b_time = "–"
        else:
            what = key.removeprefix("time/").removesuffix("_s")
            a_time, b_time = fmt_stat_s(p.base.metrics.get(key)), fmt_stat_s(p.other.metrics.get(key))
        rng = f" ({fmt_x(p.speedup_range[0])}–{fmt_x(p.speedup_range[1])})" if p.speedup_range else ""
        row = [
            p.workload,
            describe(p.base, varying),
            p.base.label,
            p.other.label,
            what,
            a_time,
            b_time,
            fmt_x(p.headline) + rng,
            f"{fmt_share(p.base.wait_share)} / {fmt_share(p.other.wait_share)}",
            f"{fmt_memory(p.base)} / {fmt_memory(p.other)}",
        ]
        if with_verdict:
            row.append("; ".join(p.verdicts) or "–")
        rows.append(row)
    return rows


PAIR_HEADERS = [
    "workload",
    "config",
    "base",
    "other",
    "timed",
    "base time",
    "other time",
    "speedup",
    "data wait",
    "peak memory (GPU allocated / process RSS)",
]


def build_doc(comp: Comparison, meta: dict[str, str], charts: dict[str, str]) -> Doc:
    """The report's content, independent of its format. `charts`: file name → title."""
    doc = Doc()
    all_sides = [s for ss in comp.sides.values() for s in ss]
    varying = varying_params(all_sides)
    doc.h(1, "devicebench compare")
    doc.p(
        f"{len(comp.runs)} runs read ({len(comp.finished)} finished, {len(comp.unfinished)} failed/killed/running); "
        f"{len(comp.pairs)} pairs, {len(comp.unpaired)} configs without a partner device."
    )
    doc.table(["selection", "value"], [[k, v] for k, v in meta.items() if v])
    data = sorted({s.data for s in all_sides if s.data})
    if "synthetic" in data:
        doc.p("Note: some runs used synthetic data (timings are real; accuracy/mIoU are not comparable).")

    doc.h(2, "Speedups")
    doc.p(
        "speedup = base time / other time (median of repeats; range from the repeats' spread). "
        "data wait = share of training time spent waiting for the next batch."
    )
    if comp.pairs:
        doc.table([*PAIR_HEADERS, "verdict"], pair_rows(comp.pairs, varying))
    else:
        doc.p("No config ran on two devices yet: run the same config with another --device to get a speedup.")

    matmul_rows = []
    for s in comp.matmul_sides:
        for (backend, dtype, size), v in s.matmul.items():
            t, u = v.get("time"), v.get("unsynced")
            matmul_rows.append(
                [
                    s.label,
                    backend,
                    dtype,
                    str(size),
                    f"{gflops(size, t.median):.1f}" if t else "–",
                    fmt_stat_s(t),
                    fmt_s(u.median) if u else "–",
                ]
            )
    if matmul_rows:
        doc.h(2, "Matrix multiply")
        doc.table(
            ["side", "backend", "dtype", "n", "GFLOP/s", "time (synchronised)", "unsynchronised"], matmul_rows
        )
        point_rows = [
            [p.base.label, backend, p.other.label, dtype, str(size), fmt_x(x)]
            for p in comp.pairs
            for (backend, dtype, size), x in sorted(p.matmul.items())
        ]
        if point_rows:
            doc.p("torch on the other side against each backend on the base side, per size:")
            doc.table(["base", "base backend", "other (torch)", "dtype", "n", "speedup"], point_rows)

    quality = [
        [s.workload, describe(s, varying), s.label, s.data, fmt_q(s.metrics.get(k)), k.removeprefix("eval/")]
        for s in all_sides
        for k in ("eval/accuracy", "eval/miou")
        if k in s.metrics
    ]
    if quality:
        doc.h(2, "Quality")
        doc.table(["workload", "config", "device", "data", "value (range)", "metric"], quality)

    if comp.unpaired:
        doc.h(2, "Runs without a partner device")
        doc.table(
            ["workload", "config", "config key", "device", "runs", "time", "run ids"],
            [
                [
                    s.workload,
                    describe(s, varying),
                    s.config_key,
                    s.label,
                    str(len(s.runs)),
                    fmt_stat_s(s.metrics.get(s.time_metric() or "")),
                    ", ".join(r.run_id for r in s.runs[:5]) + (" …" if len(s.runs) > 5 else ""),
                ]
                for s in comp.unpaired
            ],
        )
    if comp.unfinished:
        doc.h(2, "Failed, killed or unfinished runs (not counted)")
        doc.table(
            ["run id", "workload", "device", "status", "error"],
            [[r.run_id, r.workload, r.device, r.status, r.tag("error") or "–"] for r in comp.unfinished],
        )
    if comp.hosts:
        doc.h(2, "Per host")
        for host, pairs in comp.hosts.items():
            doc.h(3, host)
            if pairs:
                doc.table(PAIR_HEADERS, pair_rows(pairs, varying, with_verdict=False))
            else:
                doc.p("no config ran on two devices on this host")
    if comp.regressions is not None:
        doc.h(2, f"Regressions (threshold {comp.threshold:.0%}, beyond the baseline's spread)")
        if comp.regressions:
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
        else:
            doc.p(f"none across {comp.regression_groups} config/device/host groups with earlier runs")
    if charts:
        doc.h(2, "Charts")
        for name, title in charts.items():
            doc.img(name, title)
    return doc


# --------------------------------------------------------------------------------------------- formats


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Doc) -> str:
    out: list[str] = []
    for kind, value in doc.blocks:
        if kind == "h":
            out.append("#" * value[0] + " " + value[1])
        elif kind == "p":
            out.append(value)
        elif kind == "table":
            t: Table = value
            out.append("| " + " | ".join(map(_md_cell, t.headers)) + " |")
            out.append("|" + "---|" * len(t.headers))
            out.extend("| " + " | ".join(map(_md_cell, r)) + " |" for r in t.rows)
            if t.note:
                out.append(f"\n_{t.note}_")
        elif kind == "img":
            out.append(f"![{value[1]}]({value[0]})")
        out.append("")
    return "\n".join(out)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3} img{max-width:100%;margin:1em 0;display:block}
"""


def to_html(doc: Doc, image_dir: Path) -> str:
    """One self-contained page: images read from `image_dir` and inlined as base64 PNG."""
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>devicebench compare</title>"]
    out.append(f"<style>{CSS}</style></head><body>")
    for kind, value in doc.blocks:
        if kind == "h":
            out.append(f"<h{value[0]}>{html.escape(value[1])}</h{value[0]}>")
        elif kind == "p":
            out.append(f"<p>{html.escape(value)}</p>")
        elif kind == "table":
            t: Table = value
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr>")
            out.extend(
                "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in t.rows
            )
            out.append("</table>")
            if t.note:
                out.append(f"<p><em>{html.escape(t.note)}</em></p>")
        elif kind == "img":
            data = base64.b64encode((image_dir / value[0]).read_bytes()).decode()
            out.append(f"<img alt='{html.escape(value[1])}' src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out)


def terminal_table(comp: Comparison, limit: int = 40) -> str:
    """A plain fixed-width table of the pairs for the terminal (no colours: it lands in CI logs too)."""
    varying = varying_params([s for ss in comp.sides.values() for s in ss])
    headers = ["workload", "config", "base", "other", "speedup", "wait", "verdict"]
    rows = [
        [r[0], r[1], r[2], r[3], r[7], r[8], (p.verdicts[0] if p.verdicts else "–")]
        for p, r in zip(comp.pairs, pair_rows(comp.pairs, varying), strict=True)
    ]
    lines = [
        f"{len(comp.runs)} runs: {len(comp.finished)} finished, {len(comp.unfinished)} not; "
        f"{len(comp.pairs)} pairs; {len(comp.unpaired)} configs without a partner device"
    ]
    if rows:
        shown = rows[:limit]
        widths = [min(max(len(str(x)) for x in col), 48) for col in zip(headers, *shown, strict=True)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        lines += [line(headers), line(["-" * w for w in widths]), *map(line, shown)]
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more pairs in report.md")
    for s in comp.unpaired[:limit]:
        lines.append(
            f"no partner: {s.workload} {describe(s, varying)} on {s.label} ({len(s.runs)} run(s), "
            f"{fmt_stat_s(s.metrics.get(s.time_metric() or ''))})"
        )
    if len(comp.unpaired) > limit:
        lines.append(f"... {len(comp.unpaired) - limit} more configs without a partner in report.md")
    return "\n".join(lines)


def write_csv(runs: Sequence[RunRecord], path: Path) -> None:
    """One row per run: identity, devicebench tags, every param and every (latest) metric."""
    tag_keys = sorted({k for r in runs for k in r.tags if k.startswith("devicebench.")})
    param_keys = sorted({k for r in runs for k in r.params})
    metric_keys = sorted({k for r in runs for k in r.metrics})
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "run_id",
                "experiment_id",
                "run_name",
                "status",
                "start_time_ms",
                *tag_keys,
                *(f"param.{k}" for k in param_keys),
                *(f"metric.{k}" for k in metric_keys),
            ]
        )
        for r in runs:
            w.writerow(
                [
                    r.run_id,
                    r.experiment_id,
                    r.run_name,
                    r.status,
                    r.start_time,
                    *(r.tags.get(k, "") for k in tag_keys),
                    *(r.params.get(k, "") for k in param_keys),
                    *(repr(r.metrics[k]) if k in r.metrics else "" for k in metric_keys),
                ]
            )


# --------------------------------------------------------------------------------------------- charts


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
        med = sorted(ys)[len(ys) // 2]
        ax.hlines(med, i - 0.3, i + 0.3, colors="black")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup (base time / other time)")
    ax.set_title("Speedup per workload (dots: configs; bar: median)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
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
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def crossover_chart(grid: Grid, path: Path) -> None:
    """Speedup over width × batch_size: where the GPU starts to pay off."""
    plt = _plt()
    ws, bs = grid.widths, grid.batch_sizes
    data = [[grid.cells.get((w, b), float("nan")) for b in bs] for w in ws]
    fig, ax = plt.subplots(figsize=(1.2 * len(bs) + 3, 0.8 * len(ws) + 2.5))
    logs = [[math.log10(x) if x == x and x > 0 else float("nan") for x in row] for row in data]
    finite = [abs(x) for row in logs for x in row if x == x]
    lim = max([*finite, 0.3])
    im = ax.imshow(logs, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
    for i, row in enumerate(data):
        for j, x in enumerate(row):
            if x == x:
                ax.text(j, i, f"{x:.1f}×", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(bs)), [f"{b:g}" for b in bs])
    ax.set_yticks(range(len(ws)), [f"{w:g}" for w in ws])
    ax.set_xlabel("batch_size")
    ax.set_ylabel("width")
    ax.set_title(f"Crossover: {grid.title}", fontsize=9)
    fig.colorbar(im, ax=ax, label="log10 speedup")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


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


def write_report(comp: Comparison, out: Path, meta: dict[str, str]) -> list[Path]:
    """All files into `out`; returns their paths (what the report run logs as artifacts)."""
    out.mkdir(parents=True, exist_ok=True)
    charts = write_charts(comp, out)
    doc = build_doc(comp, meta, charts)
    (out / "report.md").write_text(to_markdown(doc), encoding="utf-8")
    (out / "report.html").write_text(to_html(doc, out), encoding="utf-8")
    write_csv(comp.runs, out / "runs.csv")
    return [out / "report.md", out / "report.html", out / "runs.csv", *(out / c for c in charts)]
