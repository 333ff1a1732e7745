"""A Comparison → `report.md`, self-contained `report.html`, `runs.csv` and PNG charts, in one folder.

What the report says is built once (content.py) and each format only writes it (markdown.py,
htmlpage.py, runs_csv.py, charts.py), so the Markdown and the HTML cannot disagree. The terminal table
(terminal.py) and the pair rows are re-exported here for the CLI and the tests that read them.
"""

from __future__ import annotations

from pathlib import Path

from devicebench.report.charts import write_charts
from devicebench.report.compare import Comparison
from devicebench.report.content import PAIR_HEADERS, build_doc, pair_rows
from devicebench.report.htmlpage import to_html
from devicebench.report.markdown import to_markdown
from devicebench.report.runs_csv import write_csv
from devicebench.report.terminal import terminal_table

__all__ = ["PAIR_HEADERS", "pair_rows", "terminal_table", "write_report"]


def write_report(comp: Comparison, out: Path, meta: dict[str, str]) -> list[Path]:
    """All files into `out`; returns their paths (what the report run logs as artifacts)."""
    out.mkdir(parents=True, exist_ok=True)
    charts = write_charts(comp, out)
    doc = build_doc(comp, meta, charts)
    (out / "report.md").write_text(to_markdown(doc), encoding="utf-8")
    (out / "report.html").write_text(to_html(doc, out), encoding="utf-8")
    write_csv(comp.runs, out / "runs.csv")
    return [out / "report.md", out / "report.html", out / "runs.csv", *(out / c for c in charts)]
