"""The report reads well where it is read: in MLflow's artifact view, an iframe about 625 px wide, and
on a wide screen (issue 41, findings 3-5).

Every table fits the narrow view (few columns, no long unbreakable word); no run id is shown where a
name fits (ids stay in runs.csv); a config has one label in every table and chart; the time of a unit
of work is one figure with its unit; the cost chart keeps one workload per axes and an axis never
zooms a 2 % difference into its whole height. The last test opens report.html in a real headless
Chromium at 625 px where one is installed.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report_golden import META, planted_runs
from test_report_logic import rec, train

from devicebench.report.judge.judgement import judge
from devicebench.report.model.comparison import compare
from devicebench.report.model.cost import epoch_time
from devicebench.report.read.records import RunRecord
from devicebench.report.render.charts import cost_figure, cost_points, log_limits
from devicebench.report.render.content import build_doc
from devicebench.report.render.document import Bullets, Paragraph, Table, to_html, to_markdown
from devicebench.report.render.files import write_report
from devicebench.report.render.labels import describe, varying_params
from devicebench.report.render.tables import REPORT_MAX_COLUMNS
from devicebench.schema import TOTAL_S
from devicebench.util.fmt import fmt_stat_s

FRAME = 625  # MLflow's artifact view, px
BUDGET = FRAME - 16  # what the page's narrow margins leave a table
CHAR = 6.6  # px per character of the 12 px table type, on average
PAD = 9  # px of padding and border per cell
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{40}\b")  # an MLflow run id, a git commit


def _hexed(runs: list[RunRecord]) -> list[RunRecord]:
    """The planted runs with ids as MLflow makes them (32 hex) and one suite launch's tag on each."""
    launch = "demo:" + "9" * 32
    return [
        dataclasses.replace(
            r,
            run_id=f"{i:032x}",
            tags={**r.tags, "devicebench.suite": r.tags.get("devicebench.suite", launch)},
        )
        for i, r in enumerate(runs)
    ]


@pytest.fixture(scope="module")
def planted() -> tuple:
    runs = _hexed(planted_runs())
    judged = judge(compare(runs, baseline="previous", threshold=0.1))
    meta = {**META, "filter (sent to MLflow)": "tags.`devicebench.suite` = 'demo:" + "9" * 32 + "'"}
    return judged, build_doc(judged, meta, {})


def _tables(doc) -> list[Table]:
    return [b for b in doc.blocks if isinstance(b, Table)]


def _min_width(t: Table) -> float:
    """The least width a browser can give the table: each column as wide as its longest word (a cell
    breaks only between words) in the 12 px type, plus padding."""
    words = [
        max((len(w) for text in (h, *(r[i] for r in t.rows)) for w in re.split(r"[ –]", text)), default=0)
        for i, h in enumerate(t.headers)
    ]
    return sum(n * CHAR + PAD for n in words)


def test_every_table_fits_the_artifact_view(planted) -> None:
    _, doc = planted
    tables = _tables(doc)
    assert len(tables) > 15, "the planted report shows every kind of table"
    for t in tables:
        assert len(t.headers) <= REPORT_MAX_COLUMNS, t.headers
        assert _min_width(t) <= BUDGET, (t.headers, _min_width(t))
    # the verdicts, sentences, are lists at the page's width, not a column
    assert not any("verdict" in t.headers for t in tables)
    said = [b for b in doc.blocks if isinstance(b, Bullets)]
    assert said and any("loader-bound" in line for b in said for _, lines in b.items for line in lines)


def test_no_run_id_is_shown_where_a_name_fits(planted, tmp_path: Path) -> None:
    judged, doc = planted
    shown = [c for t in _tables(doc) for c in (*t.headers, *(x for r in t.rows for x in r))]
    shown += [b.text for b in doc.blocks if isinstance(b, Paragraph)]
    shown += [
        x for b in doc.blocks if isinstance(b, Bullets) for lead, lines in b.items for x in (lead, *lines)
    ]
    assert not [x for x in shown if RUN_ID.search(x)]
    assert "the runs of one launch of plan demo, started 2023-11-14 22:13 UTC" in shown
    assert "golden-20" in shown and "golden-41" in shown  # the unpaired side, a failed run: by name
    files = write_report(judged, tmp_path, {})
    assert not RUN_ID.search((tmp_path / "report.md").read_text())
    assert f"{0:032x}" in (tmp_path / "runs.csv").read_text(), "the ids are kept in runs.csv"
    assert {f.name for f in files} >= {"report.html", "report.md", "runs.csv"}


def test_a_config_has_one_label_in_every_table_and_chart(planted) -> None:
    judged, doc = planted
    varying = varying_params(judged.comp.all_sides)
    labels = {describe(s, varying) for s in judged.comp.all_sides}
    seen: dict[str, int] = {}
    for t in _tables(doc):
        if "config" in t.headers:
            i = t.headers.index("config")
            for row in t.rows:
                assert row[i] in labels, row[i]
                seen[row[i]] = seen.get(row[i], 0) + 1
    unet = next(x for x in labels if x.startswith("unet"))
    assert unet == "unet · fp32 · ep 2" and seen[unet] >= 6  # four pair tables, price, work, quality
    assert all(re.fullmatch(r"[a-z]+( · [^·=]+)+", x) for x in labels), "one style: run names', no k=v"
    for points in cost_points(judged.comp.all_sides).values():
        assert {p.config for p in points} <= labels


def test_a_unit_of_work_has_one_time_whether_priced_or_not(planted) -> None:
    """Unpriced unet runs: per epoch in the price table, all epochs in the pairs table; never the whole
    run (setup and logging included) under "time per unit"."""
    judged, doc = planted
    cpu = next(s for s in judged.comp.all_sides if s.workload == "unet" and s.is_cpu)
    price = next(t for t in _tables(doc) if "time per unit" in t.headers)
    row = next(r for r in price.rows if r[0].startswith("unet") and r[1] == cpu.label)
    cell = row[price.headers.index("time per unit")]
    assert cell == f"{fmt_stat_s(epoch_time(cpu))} per epoch" == "150 s (150 s–150 s, n=2) per epoch"
    assert fmt_stat_s(cpu.metrics[TOTAL_S]) not in cell
    speed = next(t for t in _tables(doc) if "base time" in t.headers)
    pair = next(r for r in speed.rows if r[0].startswith("unet"))
    assert pair[speed.headers.index("what is timed")] == "training, all epochs"


def test_the_cost_chart_keeps_one_workload_per_axes_and_a_real_spread() -> None:
    """The issue's demo: cifar and unet costs 1.09e-4 and 1.11e-4 a unit on one axis pair, the y axis
    zoomed so that 2 % filled its height."""
    runs = []
    for workload, t in (("cifar", 39.24), ("unet", 39.96)):
        for device, usd in (("cpu", 0.01), ("cuda:0", 0.02)):
            m = train(t if device == "cpu" else t / 2)
            m["cost/usd_per_epoch"] = usd * m["time/train_s"] / 2 / 3600
            r = rec(device, key=workload, metrics=m)
            r.tags.update({"devicebench.workload": workload, "devicebench.price.usd_per_hour": str(usd)})
            r.tags["devicebench.price.currency"] = "USD"
            runs.append(r)
    points = cost_points(compare(runs).all_sides)
    assert list(points) == ["cifar", "unet"]
    assert all(p.workload == w for w, pts in points.items() for p in pts)
    fig = cost_figure("cifar", points["cifar"])
    try:
        (ax,) = fig.axes
        lo, hi = ax.get_ylim()
        costs = [p.cost for p in points["cifar"]]
        assert lo <= min(costs) and hi >= max(costs) and hi / lo >= 10
        fig.canvas.draw()
        ticks = [t for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text() and t.get_visible()]
        assert ticks and not [t.get_text() for t in ticks if "$" in t.get_text() and "\\" in t.get_text()]
        boxes = sorted(
            (t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()), key=lambda b: b.x0
        )
        assert all(a.x1 <= b.x0 for a, b in itertools.pairwise(boxes)), "x labels overlap"
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == [f"{p.config}: {p.side}" for p in points["cifar"]]
    finally:
        import matplotlib.pyplot as plt  # lazy: matplotlib only where a chart is drawn

        plt.close(fig)
    a, b = log_limits([1.09e-4, 1.11e-4])
    assert a < 1.09e-4 and b > 1.11e-4 and b / a >= 10
    a, b = log_limits([1.0, 1000.0])
    assert a < 1.0 and b > 1000.0 and b / a < 2000, "a wide spread keeps its own range"


def test_the_html_wraps_between_words_and_scrolls_only_inside_a_table(planted) -> None:
    _, doc = planted
    html = to_html(doc, Path("."))
    assert "@media (max-width:800px)" in html and ".t{max-width:100%;overflow-x:auto" in html
    assert html.count("<div class='t'><table>") == len(_tables(doc))
    assert "40.80\u00a0s (40.00\u00a0s–41.60\u00a0s, n=3)" in html  # a figure never breaks from its unit
    assert "cifar · bs\u00a04 · w\u00a01" in html
    assert "40.80 s (40.00 s–41.60 s, n=3)" in to_markdown(doc), "Markdown keeps plain spaces"


_MEASURE = """<script>
window.addEventListener('load', () => {
  const d = document.documentElement, out = ['page ' + d.scrollWidth + ' ' + d.clientWidth];
  document.querySelectorAll('.t').forEach(t => out.push('table ' + t.scrollWidth + ' ' + t.clientWidth));
  document.querySelectorAll('img').forEach(m => out.push('img ' + m.offsetWidth + ' ' + d.clientWidth));
  const p = document.createElement('pre'); p.id = 'measured'; p.textContent = out.join(';');
  document.body.appendChild(p);
});
</script>"""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium to render the page in")
def test_report_html_needs_no_sideways_scrolling_at_625_px(planted, tmp_path: Path) -> None:
    judged, _ = planted
    write_report(judged, tmp_path / "r", META)
    page = tmp_path / "measure.html"
    page.write_text((tmp_path / "r" / "report.html").read_text() + _MEASURE, encoding="utf-8")
    argv = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    argv += [f"--window-size={FRAME},900", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r"<pre id=\"measured\">(.*?)</pre>", dom)
    assert found, dom[-500:]
    rows = [x.split() for x in found.group(1).split(";")]
    head, *boxes = rows
    assert head[0] == "page" and int(head[1]) <= FRAME, head
    assert len([b for b in boxes if b[0] == "table"]) > 15
    assert not [b for b in boxes if int(b[1]) > int(b[2])], "a table or chart wider than the frame"
