"""What the stack left in its store, read from the host through the server with the trainer's credentials."""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.request
from typing import Any

from devicebench.config.workloads import WORKLOADS

SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"


def http_status(url: str, user: str = "", password: str = "") -> int:
    request = urllib.request.Request(url)
    if user:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def client(uri: str, user: str, password: str) -> Any:
    """An MlflowClient on the server with basic-auth credentials (MLflow reads them from the environment)."""
    os.environ.update(
        MLFLOW_TRACKING_USERNAME=user,
        MLFLOW_TRACKING_PASSWORD=password,
        MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
    )
    from mlflow.tracking import MlflowClient  # deferred: only the store checks need MLflow

    return MlflowClient(tracking_uri=uri)


def experiment_runs(mlflow: Any, name: str) -> list[Any]:
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        raise AssertionError(f"no experiment {name!r} in the store")
    return list(mlflow.search_runs([experiment.experiment_id], max_results=500))


def check_plan_runs(mlflow: Any, name: str) -> dict[str, Any]:
    """Every run of the plan FINISHED with metrics, artifacts through the server's proxy, a logged model
    whose files come back, and the plan's report run. What was found, for the summary."""
    runs = experiment_runs(mlflow, name)
    if not runs:
        raise AssertionError(f"experiment {name!r} has no runs")
    unfinished = [f"{r.info.run_name}: {r.info.status}" for r in runs if r.info.status != "FINISHED"]
    if unfinished:
        raise AssertionError(f"runs not FINISHED: {unfinished}")
    # the plan's measurements: not its parent run or its report run, whose figures are their answers
    workloads = [r for r in runs if r.data.tags.get("devicebench.workload") in WORKLOADS]
    without = [r.info.run_name for r in workloads if not r.data.metrics]
    if not workloads or without:
        raise AssertionError(f"workload runs without metrics: {without or 'no workload runs'}")
    proxied = [r.info.run_name for r in runs if not r.info.artifact_uri.startswith("mlflow-artifacts:")]
    if proxied:
        raise AssertionError(f"artifacts not through the server's proxied store: {proxied}")
    reports = [r for r in runs if "devicebench.report.run_count" in r.data.tags]
    if not reports:
        raise AssertionError("no report run")
    models = mlflow.search_logged_models(experiment_ids=[runs[0].info.experiment_id])
    if not models:
        raise AssertionError("no logged model")
    return {"runs": len(runs), "workload runs": len(workloads), "models": models, "report runs": len(reports)}


def model_files(model: Any, dest: str, tracking_uri: str) -> int:
    """The logged model's files, downloaded through the server: how many."""
    from mlflow.artifacts import download_artifacts  # deferred: only the store checks need MLflow

    local = download_artifacts(artifact_uri=model.artifact_location, dst_path=dest, tracking_uri=tracking_uri)
    return sum(len(files) for _, _, files in os.walk(local))


def metric_points(mlflow: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in mlflow.get_metric_history(run_id, key)]
