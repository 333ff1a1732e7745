"""`runs.csv`: every run the report read, one row each, for a spreadsheet or pandas.

Unlike the Markdown and HTML tables it is never cut, and it holds the raw values (`repr` of each metric),
not the report's rounded spelling; a text that a spreadsheet would run as a formula (it starts with
`=`, `+`, `-`, `@`, a tab or a carriage return, OWASP's list) gets a leading `'`, numbers stay numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from devicebench.report.read.records import RunRecord
from devicebench.schema import TAG_PREFIX

IDENTITY = ["run_id", "experiment_id", "run_name", "status", "start_time_ms"]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    """A CSV cell a spreadsheet shows and never runs: `=HYPERLINK(...)` becomes `'=HYPERLINK(...)`;
    `-1.5` or `1e-05` stays a number."""
    text = str(value)
    if not text.startswith(FORMULA_START):
        return text
    try:
        float(text)
    except ValueError:
        return "'" + text
    return text


def write_csv(runs: Sequence[RunRecord], path: Path) -> None:
    """One row per run: identity, devicebench tags, every param and every (latest) metric."""
    tag_keys = sorted({k for r in runs for k in r.tags if k.startswith(TAG_PREFIX)})
    param_keys = sorted({k for r in runs for k in r.params})
    metric_keys = sorted({k for r in runs for k in r.metrics})
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                cell(v)
                for v in (
                    *IDENTITY,
                    *tag_keys,
                    *(f"param.{k}" for k in param_keys),
                    *(f"metric.{k}" for k in metric_keys),
                )
            ]
        )
        for r in runs:
            row = [
                r.run_id,
                r.experiment_id,
                r.run_name,
                r.status,
                r.start_time,
                *(r.tags.get(k, "") for k in tag_keys),
                *(r.params.get(k, "") for k in param_keys),
                *(repr(r.metrics[k]) if k in r.metrics else "" for k in metric_keys),
            ]
            w.writerow([cell(v) for v in row])
