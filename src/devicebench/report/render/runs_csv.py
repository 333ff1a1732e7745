"""`runs.csv`: every run the report read, one row each, for a spreadsheet or pandas.

Unlike the Markdown and HTML tables it is never cut, and it holds the raw values (`repr` of each metric),
not the report's rounded spelling.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from devicebench.report.read.records import RunRecord
from devicebench.schema import TAG_PREFIX

IDENTITY = ["run_id", "experiment_id", "run_name", "status", "start_time_ms"]


def write_csv(runs: Sequence[RunRecord], path: Path) -> None:
    """One row per run: identity, devicebench tags, every param and every (latest) metric."""
    tag_keys = sorted({k for r in runs for k in r.tags if k.startswith(TAG_PREFIX)})
    param_keys = sorted({k for r in runs for k in r.params})
    metric_keys = sorted({k for r in runs for k in r.metrics})
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [*IDENTITY, *tag_keys, *(f"param.{k}" for k in param_keys), *(f"metric.{k}" for k in metric_keys)]
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
