"""Which experiments a report reads, and how to say so.

Without `--experiment` (or with `--experiment all`, what MLproject passes) compare reads every active
experiment: devicebench's runs land in more than one place (the configured `devicebench`, the demo's
`devicebench-demo`, MLflow's `Default` under `mlflow run`), and a report that silently read one of them
answered a different question than the one asked. Which experiments were read, with how many runs from
each, is printed once and shown in the report's selection table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException

from devicebench.errors import UsageError
from devicebench.util.text import visible


def active_experiments(client: Any, page_size: int = 1000) -> dict[str, str]:
    """Every active experiment as {id: name}, page by page until MLflow returns no page token
    (`search_experiments` stops at its `max_results` as silently as `search_runs` does)."""
    out: dict[str, str] = {}
    token: str | None = None
    while True:
        page = client.search_experiments(
            view_type=ViewType.ACTIVE_ONLY, max_results=page_size, page_token=token
        )
        out.update((e.experiment_id, visible(e.name)) for e in page)
        token = page.token
        if not token:
            return out


def resolve_experiments(client: Any, names: Sequence[str]) -> dict[str, str]:
    """Experiment names (or ids) → {id: name}; an unknown one is a usage error that lists the known ones."""
    out: dict[str, str] = {}
    for name in names:
        exp = client.get_experiment_by_name(name)
        if exp is None and name.isdigit():
            try:
                exp = client.get_experiment(name)
            except MlflowException:
                exp = None
        if exp is None or exp.lifecycle_stage == "deleted":
            known = sorted(visible(e.name) for e in client.search_experiments(max_results=50))
            hint = f"; known: {', '.join(known)}" if known else "; the store has no experiments yet"
            raise UsageError(f"unknown experiment {name!r}{hint}", param="experiment")
        out[exp.experiment_id] = visible(exp.name)
    return out


def run_counts(
    experiments: dict[str, str], run_experiment_ids: Sequence[str], every: bool
) -> list[tuple[str, int]]:
    """(name, runs read) per experiment, most runs first. Reading every experiment lists only those
    that held runs (a store has many experiments); named ones are listed even when empty."""
    counts = Counter(run_experiment_ids)
    rows = [(name, counts.get(eid, 0)) for eid, name in experiments.items()]
    if every:
        rows = [r for r in rows if r[1]]
    return sorted(rows, key=lambda r: (-r[1], r[0]))


def read_line(experiments: dict[str, str], run_experiment_ids: Sequence[str], every: bool) -> str:
    """`read 14 runs from 3 experiments: devicebench (8), devicebench-demo (5), Default (1)`."""
    rows = run_counts(experiments, run_experiment_ids, every)
    n = len(run_experiment_ids)
    where = f"{len(rows)} experiment{'s' if len(rows) != 1 else ''}"
    listed = ", ".join(f"{name} ({count})" for name, count in rows)
    return f"read {n} run{'s' if n != 1 else ''} from {where}: {listed}"
