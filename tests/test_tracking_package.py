"""The tracking package's own contracts: a light import for workloads, an explicit run id that wins over
`MLFLOW_RUN_ID`, and an artifact-repository cache that stays small however many runs a process sends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient
from test_tracking import settings_for

from devicebench.tracking import artifacts
from devicebench.tracking.runs import run_context
from servers import MlflowServer


@pytest.mark.parametrize("module", ["devicebench.tracking", "devicebench.tracking.protocol"])
def test_what_workloads_import_does_not_import_mlflow_or_torch(module: str) -> None:
    code = f"import sys, {module}; print(sorted({{'mlflow', 'torch'}} & set(sys.modules)))"
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": src}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_explicit_run_id_wins_over_mlflow_run_id(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = MlflowClient(mlflow_server.url)
    exp_id = client.create_experiment(experiment_name)
    mine, other = client.create_run(exp_id).info.run_id, client.create_run(exp_id).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", other)
    s = settings_for(mlflow_server.url, tmp_path, experiment_name)
    with run_context(s, "matmul", {"sizes": "64"}, run_id=mine) as t:
        assert t.run_id == mine
    assert client.get_run(mine).info.status == "FINISHED"
    assert client.get_run(mine).data.tags["devicebench.workload"] == "matmul"
    assert client.get_run(other).info.status == "RUNNING", "the environment's run is left alone"


def test_the_artifact_repository_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow.store.artifact.artifact_repository_registry as registry

    monkeypatch.setattr(artifacts, "_REPOS", type(artifacts._REPOS)())
    monkeypatch.setattr(registry, "get_artifact_repository", lambda uri: ("repo", uri))
    looked_up: list[str] = []

    def get_run(run_id: str) -> SimpleNamespace:
        looked_up.append(run_id)
        return SimpleNamespace(info=SimpleNamespace(artifact_uri=f"file:///a/{run_id}"))

    client = SimpleNamespace(tracking_uri="http://store", get_run=get_run)
    for i in range(3 * artifacts._REPO_CACHE_SIZE):
        assert artifacts._artifact_repo(client, f"run{i}") == ("repo", f"file:///a/run{i}")
    assert len(artifacts._REPOS) == artifacts._REPO_CACHE_SIZE
    last = f"run{3 * artifacts._REPO_CACHE_SIZE - 1}"
    artifacts._artifact_repo(client, last)
    assert looked_up.count(last) == 1, "a recent run's repository is looked up once"
