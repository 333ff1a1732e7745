"""Links into the MLflow UI that land on the report, printed at the end of `demo`, `suite` and `compare`.

MLflow 3 opens an experiment on its GenAI overview (traces, token usage); the runs list a user of this
tool wants is `#/experiments/<id>/runs?workflowType=machine_learning` (the experiment tag
`mlflow.experimentKind` did not change the landing page). The links point at the UI the user just
started: the tracking server itself when the tracking URI is one (without its credentials), the
`MLFLOW_UI_URL` setting when the UI is reached elsewhere (an SSH tunnel, a proxy), else `make ui`'s
address on this host, with the command that starts it. mlflow-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from devicebench.util.files import write_text_atomic
from devicebench.util.redact import redact

REPORT_RUN_FILE = "report_run.json"  # beside the report: which run holds it (the suite prints its link)
# Set by a suite for the compare it starts: the suite prints the links last, after its summary, and a
# compare that printed them too showed each link twice at the end of `make demo`.
PARENT_PRINTS_LINKS = "DEVICEBENCH_PARENT_PRINTS_LINKS"
VIEW = "workflowType=machine_learning"  # MLflow 3's "Model training" view, not the GenAI overview
DEFAULT_UI_PORT = "5000"


def venv_command(name: str) -> str:
    """`name` as a fresh shell finds it: the path of this interpreter's own script (relative when it is
    under the working directory, e.g. `.venv/bin/mlflow`), since a new shell has no venv activated."""
    exe = Path(sys.executable).parent / name
    if not exe.exists():
        return name
    with contextlib.suppress(ValueError):
        return str(exe.absolute().relative_to(Path.cwd()))
    return str(exe)


def is_server(tracking_uri: str) -> bool:
    """A tracking server serves its own UI; any other store (SQLite, files, a database) needs one started."""
    return tracking_uri.lower().startswith(("http://", "https://"))


def ui_start_command(tracking_uri: str, shown_uri: str) -> str:
    """How to start a UI on a store that has no server (`make ui` on the default embedded store); one
    worker: one person's browser, where MLflow's default 4 each import its server (~0.5 GB each)."""
    ui = f"{venv_command('mlflow')} ui --backend-store-uri {shown_uri} --workers 1"
    if tracking_uri == "sqlite:///mlflow.db" and Path("Makefile").is_file():
        return f"make ui   (or: {ui})"
    return ui


def ui_base(tracking_uri: str, ui_url: str = "", ui_port: str = "") -> str:
    """The UI's address: MLFLOW_UI_URL when set, the server's own (credentials dropped), else the
    address `make ui` listens on (127.0.0.1, MLFLOW_UI_PORT or 5000)."""
    if ui_url.strip():
        return ui_url.strip().rstrip("/")
    if is_server(tracking_uri):
        parts = urllib.parse.urlsplit(tracking_uri)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return f"http://127.0.0.1:{ui_port.strip() or DEFAULT_UI_PORT}"


def runs_list_url(base: str, experiment_id: str) -> str:
    """The experiment's runs list in the machine-learning view, not MLflow 3's GenAI overview."""
    return f"{base}/#/experiments/{experiment_id}/runs?{VIEW}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """One run's page, in the same view, so its breadcrumb leads back to the runs list."""
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{VIEW}"


def link_lines(
    tracking_uri: str,
    experiment_id: str,
    report_run_id: str | None,
    *,
    shown_uri: str = "",
    ui_url: str = "",
    ui_port: str = "",
    start_hint: bool = True,
) -> list[str]:
    """The closing lines, each named for the page it opens: the report run (its verdicts, whether or not
    there is a CPU/GPU pair) and the runs list, and for a store without a server, the command that starts
    the UI those links open in (`start_hint=False`: said already)."""
    base = ui_base(tracking_uri, ui_url, ui_port)
    lines = []
    if report_run_id:
        lines.append(f"the report run: {run_url(base, experiment_id, report_run_id)}")
    lines.append(f"the runs list: {runs_list_url(base, experiment_id)}")
    if start_hint and not ui_url.strip() and not is_server(tracking_uri):
        lines.append(f"  (start the UI first: {ui_start_command(tracking_uri, shown_uri or tracking_uri)})")
    return lines


def settings_link_lines(
    settings: Any, experiment_id: str, report_run_id: str | None, *, start_hint: bool = True
) -> list[str]:
    """`link_lines` for the configured store (`Settings`: its URI, MLFLOW_UI_URL and port), the URI
    shown with its password redacted: what compare and a suite both end with; none for the compare a
    suite starts (PARENT_PRINTS_LINKS), whose suite prints them once, last."""
    if os.environ.get(PARENT_PRINTS_LINKS) == "1":
        return []
    return link_lines(
        settings.tracking_uri,
        experiment_id,
        report_run_id,
        shown_uri=redact(settings.tracking_uri),
        ui_url=settings.ui_url,
        ui_port=settings.ui_port,
        start_hint=start_hint,
    )


def write_report_run(out: Path, run_id: str, experiment_id: str) -> None:
    """`report_run.json` beside the report: the run that holds it, for whoever launched this compare."""
    write_text_atomic(out / REPORT_RUN_FILE, json.dumps({"run_id": run_id, "experiment_id": experiment_id}))


def read_report_run(out: Path) -> tuple[str, str] | None:
    """(run id, experiment id) of the report run a compare wrote into `out`; None when it logged none."""
    try:
        data = json.loads((out / REPORT_RUN_FILE).read_text())
        return str(data["run_id"]), str(data["experiment_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
