"""A judged comparison → `report.md`, self-contained `report.html`, `runs.csv` and PNG charts, in one
folder.

What the report says is built once (content.py) and each format only writes it (document.py:
to_markdown and to_html; runs_csv.py, charts.py), so the Markdown and the HTML cannot disagree.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from devicebench.report.judge.judgement import Judgement
from devicebench.report.render.charts import write_charts
from devicebench.report.render.content import build_doc
from devicebench.report.render.document import to_html, to_markdown
from devicebench.report.render.runs_csv import write_csv
from devicebench.util.files import UMASK, new_folder


def write_report(judged: Judgement, out: Path, meta: dict[str, str], fresh: bool = False) -> list[Path]:
    """All files into `out`; returns their paths (what the report run logs as artifacts).

    The report is written into a temporary folder beside `out` and renamed into place, so a failure (a
    full disk left a folder holding one chart) leaves no half-written report, and an earlier report in
    `out` is replaced whole files at a time. `fresh` (a name the user did not choose): never into a
    folder another report has, but `out-2`, `out-3`... (util.files.new_folder)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        names = _write_all(judged, tmp, meta)
        out = new_folder(out) if fresh else out
        _into_place(tmp, out, names)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / n for n in names]


def _write_all(judged: Judgement, folder: Path, meta: dict[str, str]) -> list[str]:
    comp = judged.comp
    charts = write_charts(comp, folder)
    doc = build_doc(judged, meta, charts)
    (folder / "report.md").write_text(to_markdown(doc), encoding="utf-8")
    (folder / "report.html").write_text(to_html(doc, folder), encoding="utf-8")
    write_csv(comp.runs, folder / "runs.csv")
    return ["report.md", "report.html", "runs.csv", *charts]


def _into_place(tmp: Path, out: Path, names: list[str]) -> None:
    """Rename the finished folder to `out`; into an existing `out`, move each file (an atomic rename)."""
    tmp.chmod(0o777 & ~UMASK)  # mkdtemp makes it 0700; a report folder is as readable as any other
    if not out.exists():
        tmp.rename(out)
        return
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / name, out / name)
    shutil.rmtree(tmp, ignore_errors=True)
