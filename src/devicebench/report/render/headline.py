"""The report's answer where the MLflow UI shows it without opening an artifact.

A report run's overview page shows its metrics and its description (the `mlflow.note.content` tag,
rendered as Markdown). So the headline numbers become metrics (`speedup/<pair>` per CPU/GPU pair,
`cost_ratio/<pair>` beside it where both sides logged a price, `speedup/best`, `speedup/worst`,
`pairs`, `regressions`, and `scaling/<series>/efficiency_<N>` per world size of each scaling series)
and a short summary becomes the description.
Both read the speedups the comparison already holds (`Pair.headline`, the pairs table's NOTE view in
tables.py); nothing is computed twice, so the UI, the terminal and report.html cannot disagree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from devicebench.report.judge.judgement import Judgement
from devicebench.report.model.comparison import Comparison
from devicebench.report.model.pairs import Pair, against_best
from devicebench.report.model.regressions import Regression
from devicebench.report.model.scaling import Series
from devicebench.report.render.answer import answers
from devicebench.report.render.content import pair_items
from devicebench.report.render.document import Block, Doc, Table, paragraph, to_markdown
from devicebench.report.render.labels import describe, varying_params
from devicebench.report.render.tables import NOTE, PAIR_COLUMNS, cells, headers, regression_why, shown
from devicebench.schema import (
    COST_RATIO_PREFIX,
    MAX_RUN_NAME,
    MAX_TAG_VALUE,
    REPORT_REGRESSIONS,
    SPEEDUP_BEST_CPU_PREFIX,
    SPEEDUP_PREFIX,
    cost_ratio_key,
    scaling_efficiency_key,
    speedup_best_cpu_key,
    speedup_key,
)
from devicebench.util.fmt import fmt_change, fmt_share, fmt_sig3, fmt_sig4, fmt_x

MAX_PAIR_NAME = 100  # of MLflow's 250 characters per metric name: enough to tell pairs apart in a chart list
MAX_REGRESSION_LINES = 5
MAX_SCALING_LINES = 5
MAX_ANSWER_LINES = 8  # configs answered in the description; report.html answers every one
# MLflow allows alphanumerics, _ - . / and space in metric names (a colon nowhere on Windows);
# `/` would nest the pair a level deeper in the UI's metric groups, so it goes too
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.\- ]+")


def _speedup(p: Pair) -> float:
    return p.headline if p.headline is not None else math.nan


def _over_best(p: Pair) -> float:
    return p.best_cpu_speedup if p.best_cpu_speedup is not None else math.nan


def cpu_gpu_pairs(comp: Comparison) -> list[Pair]:
    """The pairs that answer "how much faster on the GPU than on the CPU": CPU base, a speedup known."""
    return [p for p in comp.pairs if p.is_cpu_gpu and p.headline is not None and math.isfinite(p.headline)]


def metric_part(text: str) -> str:
    """`cifar batch_size=4 cpu vs cuda:0` → `cifar batch_size_4 cpu vs cuda_0`: legal in a metric name."""
    return " ".join(_NOT_IN_NAME.sub("_", text).split())


def pair_name(p: Pair, varying: dict[str, list[str]]) -> str:
    """Workload, the params that tell its configs apart, the two devices, and the processes of each
    side's job where more than one (pairs are like with like, so one number)."""
    params = " ".join(f"{k}={p.base.params.get(k, '')}" for k in varying.get(p.workload) or [])
    world = f"{p.base.world_size} processes" if p.base.world_size > 1 else ""
    parts = (p.workload, params, p.base.device, "vs", p.other.device, world)
    return metric_part(" ".join(x for x in parts if x))


def series_name(s: Series, varying: dict[str, list[str]]) -> str:
    """Workload, the params that tell its configs apart, the device kind and its model."""
    params = " ".join(f"{k}={s.params.get(k, '')}" for k in varying.get(s.workload) or [])
    return metric_part(" ".join(x for x in (s.workload, params, s.device, s.device_name) if x))


def scaling_metrics(comp: Comparison) -> dict[str, float]:
    """`scaling/<series>/efficiency_<N>` for every world size of every series whose efficiency is known
    (the base's is 1.0 by definition, logged so a series reads whole in the UI's chart)."""
    varying = varying_params(comp.all_sides)
    names = unique_names([series_name(s, varying) for s in comp.scaling])
    return {
        scaling_efficiency_key(name, p.world_size): p.efficiency
        for name, s in zip(names, comp.scaling, strict=True)
        for p in s.points
        if p.efficiency is not None
    }


def unique_names(names: list[str], cap: int = MAX_PAIR_NAME) -> list[str]:
    """Each name cut to `cap` characters; a name already taken gets ` 2`, ` 3`... (still within `cap`):
    two pairs whose names differ only past the cut, or only in the device model, must not overwrite
    each other's metric."""
    seen: set[str] = set()
    out: list[str] = []
    for name in names:
        base = name[:cap].rstrip()
        candidate, n = base, 2
        while candidate in seen:
            candidate = f"{base[: cap - len(str(n)) - 1].rstrip()} {n}"
            n += 1
        seen.add(candidate)
        out.append(candidate)
    return out


def headline_metrics(comp: Comparison) -> dict[str, float]:
    """`speedup/<pair>` per CPU/GPU pair (and `cost_ratio/<pair>` where both sides have a price),
    `speedup/best` and `/worst` over them, and `regressions` when a baseline was asked for (None means
    "not judged", not zero): the metrics panel lists answers only."""
    metrics: dict[str, float] = {}  # how many pairs is the description's to say, not a metric's
    pairs = cpu_gpu_pairs(comp)
    varying = varying_params(comp.all_sides)
    names = unique_names([pair_name(p, varying) for p in pairs])
    for name, p in zip(names, pairs, strict=True):
        metrics[speedup_key(name)] = _speedup(p)
        if p.best_cpu is not None and p.best_cpu_speedup is not None:  # the GPU against this CPU at its best
            metrics[speedup_best_cpu_key(name)] = p.best_cpu_speedup
        # both priced: the GPU's cost of the same work / the CPU's, at its best where that was measured
        if p.cost_ratio is not None:
            metrics[cost_ratio_key(name)] = p.cost_ratio
    if pairs:
        metrics[speedup_key("best")] = max(map(_speedup, pairs))
        metrics[speedup_key("worst")] = min(map(_speedup, pairs))
    if over_best := against_best(pairs):
        metrics[speedup_best_cpu_key("best")] = max(_over_best(p) for p in over_best)
    if comp.regressions is not None:
        metrics[REPORT_REGRESSIONS] = float(len(comp.regressions))
    metrics.update(scaling_metrics(comp))
    return metrics


MAX_NOTE_METRICS = 12  # metric lines in the description; all of them are in the run's metrics table


def report_name(comp: Comparison, scope: str = "") -> str:
    """The report run's name says what it holds: `report · demo · 3 CPU/GPU pairs · best 34.2×`, or
    `report · demo · 3 runs · no CPU/GPU pair`, so the runs list shows the answer without a click.
    Where a CPU was also measured at its best, the name says that figure too: the H100's tutorial report
    read "best 5.31×" while against the tuned CPU its best was 0.65×. The two bests may be two pairs'."""
    pairs = cpu_gpu_pairs(comp)
    parts = ["report", scope]
    if pairs:
        parts.append(f"{len(pairs)} CPU/GPU pair{'s' if len(pairs) != 1 else ''}")
        parts.append(f"best {fmt_x(max(map(_speedup, pairs)))}")
        if over_best := against_best(pairs):
            parts.append(f"best over the fastest CPU {fmt_x(max(map(_over_best, over_best)))}")
    else:
        n = len(comp.finished)
        parts += [f"{n} run{'s' if n != 1 else ''}", "no CPU/GPU pair"]
    if comp.regressions:
        parts.append(f"{len(comp.regressions)} regression{'s' if len(comp.regressions) != 1 else ''}")
    return " · ".join(x for x in parts if x)[:MAX_RUN_NAME]


def metric_lines(metrics: dict[str, float]) -> list[str]:
    """The key metrics as the description lists them: `speedup/*` and `cost_ratio/*` (the pair
    metrics, best and worst), each `name = value`; the rest stay in the metrics table."""
    order = sorted(metrics, key=lambda k: (not k.startswith(SPEEDUP_PREFIX), k))
    keys = [
        k
        for k in order
        if k.startswith((SPEEDUP_PREFIX, SPEEDUP_BEST_CPU_PREFIX, COST_RATIO_PREFIX, REPORT_REGRESSIONS))
    ]
    lines = [f"`{k}` = {fmt_sig3(metrics[k])}" for k in keys[:MAX_NOTE_METRICS]]
    if len(keys) > MAX_NOTE_METRICS:
        lines.append(f"_{len(keys) - MAX_NOTE_METRICS} more in the metrics below_")
    return lines


def _where(p: Pair, varying: dict[str, list[str]]) -> str:
    return f"{describe(p.base, varying)}: {p.other.label} vs {p.base.label}"


def regression_line(g: Regression, config: str = "", newest: str = "") -> str:
    """One regression in a line: what slowed, by how much, against which baseline, and the run; the
    config and the run by the labels the report gives them where known (`regression_lines`), else by
    config key and run id."""
    b = g.baseline
    return (
        f"regression: {config or f'{g.workload} {g.config_key}'} on {g.device} @ {g.host}: {g.measure} "
        f"{fmt_sig4(g.newest)} s vs baseline median {fmt_sig4(b.median)} s ({fmt_change(g.change)}; "
        f"baseline {b.spread_kind} {fmt_sig4(b.lo)}–{fmt_sig4(b.hi)} s over {b.n} run(s)); newest run "
        f"{newest or g.run_ids[-1]}{f'; {regression_why(g)}' if g.explained else ''}"
    )


def regression_lines(comp: Comparison) -> list[str]:
    """Every regression's line, its config named as the report's tables name it (labels.describe) and
    its newest run by run name (its id is in runs.csv)."""
    varying = varying_params(comp.all_sides)
    named = {(s.workload, s.config_key): describe(s, varying) for s in comp.all_sides}
    runs = {r.run_id: r.run_name for r in comp.runs}
    return [
        regression_line(g, named.get((g.workload, g.config_key), ""), runs.get(g.run_ids[-1], ""))
        for g in comp.regressions or []
    ]


def verdict_lines(judged: Judgement) -> list[str]:
    """The answer in a few lines, one per config first (answer.py: who is faster, by how much, what it
    costs, the verdict; the MLflow UI shows the first two before "Show more"), then scaling verdicts
    and regressions when judged."""
    comp = judged.comp
    varying = varying_params(comp.all_sides)
    answered = answers(judged, lambda s: describe(s, varying))
    lines = []
    pairs = cpu_gpu_pairs(comp)
    if len(answered) > MAX_ANSWER_LINES and pairs:  # too many to read one by one: the range of them first
        best, worst = max(pairs, key=_speedup), min(pairs, key=_speedup)
        lines.append(
            f"**GPU over CPU: best {fmt_x(best.headline)}** ({_where(best, varying)}); "
            f"**worst {fmt_x(worst.headline)}** ({_where(worst, varying)})"
        )
    lines += [f"**{lead}**" + "".join(f"; {x}" for x in under) for lead, under in answered[:MAX_ANSWER_LINES]]
    if len(answered) > MAX_ANSWER_LINES:
        lines.append(f"_{len(answered) - MAX_ANSWER_LINES} more configs in report.html_")
    if not comp.pairs:
        lines.append(
            "**No CPU/GPU pair yet**: every config ran on one device only (a plan skips cuda runs on a "
            "host without a GPU). On a GPU host the same plan, or the same command with device=cuda, "
            "pairs them; the README shows an H100's answer."
        )
    elif over_best := against_best(pairs):
        top = max(over_best, key=_over_best)
        lines.append(
            f"**GPU over this CPU at its best: best {fmt_x(top.best_cpu_speedup)}** ({_where(top, varying)})"
        )
    said = [(s, v) for s in comp.scaling for v in judged.series(s)]
    for s, v in said[:MAX_SCALING_LINES]:
        lines.append(f"**scaling** {describe(s.points[0].side, varying)} on {s.label}: {v}")
    if len(said) > MAX_SCALING_LINES:
        lines.append(f"_{len(said) - MAX_SCALING_LINES} more scaling verdicts in report.html_")
    if comp.regressions:
        lines.append(f"**{len(comp.regressions)} regression(s)** beyond {fmt_share(comp.threshold)}:")
        lines.extend(f"`{line}`" for line in regression_lines(comp)[:MAX_REGRESSION_LINES])
    elif comp.regressions is not None:
        lines.append(
            f"No regression beyond {fmt_share(comp.threshold)} in {comp.regression_groups} group(s)."
        )
    return lines


def _note_doc(
    comp: Comparison, read: str, lines: list[str], rows: list[list[str]], cut: int, keys: Sequence[str] = ()
) -> Doc:
    blocks: list[Block] = []
    paragraph(blocks, "  \n".join(lines))  # two trailing spaces: a Markdown line break
    if keys:
        paragraph(blocks, "  \n".join(keys))
    if rows:
        blocks.append(Table(NOTE_HEADERS, rows, f"{cut} more pairs in report.html" if cut else ""))
    elif cut:
        paragraph(blocks, f"_{cut} pairs in report.html_")
    paragraph(
        blocks,
        f"{read[:1].upper()}{read[1:]}; {len(comp.pairs)} pairs, {len(comp.unpaired)} configs without a "
        "partner device. Full report: report.html in this run's artifacts.",
    )
    return Doc(tuple(blocks))


NOTE_COLUMNS = shown(PAIR_COLUMNS, NOTE)
NOTE_HEADERS = headers(NOTE_COLUMNS)


def summary_note(
    judged: Judgement, read: str, limit: int = MAX_TAG_VALUE, metrics: dict[str, float] | None = None
) -> str:
    """The run description: verdict lines, the key metrics (`metrics`: the run's headline metrics) and
    a table of the pairs, cut (at whole rows) to fit the tag limit with a pointer to report.html, which
    has everything."""
    comp = judged.comp
    rows = cells(NOTE_COLUMNS, pair_items(judged, comp.pairs, varying_params(comp.all_sides)))
    lines = verdict_lines(judged)
    keys = metric_lines(metrics if metrics is not None else headline_metrics(comp))
    lo, hi = 0, len(rows)  # the most rows that fit: the text only grows with rows
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(to_markdown(_note_doc(comp, read, lines, rows[:mid], len(rows) - mid, keys))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    text = to_markdown(_note_doc(comp, read, lines, rows[:lo], len(rows) - lo, keys)).strip()
    if len(text) > limit:  # even without the table (a very long read line): cut the text itself
        pointer = "\n\n… cut; see report.html in this run's artifacts."
        text = text[: limit - len(pointer)] + pointer
    return text
