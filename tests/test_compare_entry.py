"""`mlflow run . -e compare`: the report is itself a run whose artifacts open in the MLflow UI."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from servers import (
    QUICK_MATMUL,
    MlflowServer,
    compared_runs,
    devicebench_env,
    run_cli,
    run_mlflow_project,
    runs_of,
)


@pytest.mark.e2e
def test_mlflow_run_compare_logs_a_report_run(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    env = devicebench_env(
        mlflow_server.url,
        DEVICEBENCH_EXPERIMENT=experiment_name,
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
    )
    for _ in range(2):
        proc = run_cli(
            ["matmul", "--sizes", "64,128", "--repeats", "2", "--backends", "numpy", *QUICK_MATMUL],
            env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
    out = tmp_path / "report"
    proc = run_mlflow_project(
        "compare", {"experiment": experiment_name, "out": str(out)}, env, experiment=experiment_name
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name in ("report.md", "report.html", "runs.csv"):
        assert (out / name).is_file(), name
    reports = [
        r
        for r in runs_of(mlflow_server.url, experiment_name)
        if r.data.tags.get("devicebench.workload") == "report"
    ]
    assert len(reports) == 1
    report = reports[0]
    assert report.info.status == "FINISHED"
    # the run `mlflow run` made carries the answer too: numpy on the CPU only, so no pair yet
    assert "pairs" not in report.data.metrics  # its metrics are answers; how many pairs, its description says
    assert "No CPU/GPU pair yet" in report.data.tags["mlflow.note.content"]
    # named for what it holds (not MLflow's random name); the printed link opens this very run, in
    # the experiment MLflow put it in
    assert report.info.run_name == f"report · {experiment_name} · 2 runs · no CPU/GPU pair"
    link = (
        f"/#/experiments/{report.info.experiment_id}/runs/{report.info.run_id}?workflowType=machine_learning"
    )
    assert link in proc.stdout, proc.stdout[-2000:]
    matmul_ids = {
        r.info.run_id
        for r in runs_of(mlflow_server.url, experiment_name)
        if r.data.tags.get("devicebench.workload") == "matmul"
    }
    assert {r["run_id"] for r in compared_runs(mlflow_server.url, report.info.run_id)} == matmul_ids
    artifacts = {a.path for a in MlflowClient(mlflow_server.url).list_artifacts(report.info.run_id)}
    assert {"report.md", "report.html", "runs.csv"} <= artifacts
