"""Issue 41, finding 1: the MLproject's commands run `src/mlproject-python`, not a bare `python`.

`.venv/bin/mlflow run . -e cifar ... --env-manager local` in a new shell (no venv activated) ran the
`python` first on PATH, which had no torch: a traceback, and a FAILED run under MLflow's random name.
Every `mlflow run` test now runs with the venv off PATH (servers.run_mlflow_project), so each of them
shows that the launcher finds the project's .venv; here, a project with no usable Python at all.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from servers import VENV_BIN, devicebench_env, migrated_sqlite, without_venv

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = "sh src/mlproject-python -m devicebench"


def test_every_entry_point_runs_through_the_launcher() -> None:
    entries = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]
    for name, entry in entries.items():
        assert f"{LAUNCHER} {name} " in entry["command"], name
        assert " python -m" not in entry["command"], name


@pytest.mark.e2e
def test_a_project_without_a_usable_python_says_what_to_do_and_leaves_no_run(tmp_path: Path) -> None:
    """A clone without .venv, whose `python` and `python3` are real interpreters without torch (as a new
    shell's are here): one line naming `make setup`, no traceback, and the run MLflow made is deleted."""
    project = tmp_path / "clone"
    (project / "src").mkdir(parents=True)
    for name in ("MLproject", "conda.yaml", "src/mlproject-python"):
        shutil.copy2(ROOT / name, project / name)
    bare = tmp_path / "bin"
    bare.mkdir()
    for name in ("python", "python3"):  # this interpreter with no site-packages: no torch, no MLflow
        (bare / name).write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
        (bare / name).chmod(0o755)
    uri = migrated_sqlite(tmp_path / "mlflow.db")
    env = devicebench_env(uri)
    env["PATH"] = f"{bare}:{without_venv(env['PATH'])}"
    cmd = [str(VENV_BIN / "mlflow"), "run", str(project), "-e", "suite", "-P", "dry_run=true"]
    proc = subprocess.run(
        [*cmd, "--env-manager", "local", "--experiment-name", "nowhere"],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("devicebench:")]
    assert len(ours) == 1, proc.stderr
    assert "no Python with torch, torchvision and mlflow" in ours[0]
    assert f"run `make setup` in {project}" in ours[0] and "is deleted" in ours[0], ours[0]
    assert "Traceback" not in proc.stderr, proc.stderr
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("nowhere").experiment_id
    deadline = time.monotonic() + 60  # the deleter waits for `mlflow run` to end the run first
    while client.search_runs([exp]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.search_runs([exp]) == [], "the run MLflow made is still in the experiment"
    (gone,) = client.search_runs([exp], run_view_type=ViewType.DELETED_ONLY)
    assert gone.info.status == "FAILED"
