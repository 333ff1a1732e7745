"""`mlflow run . -e cifar` against a real `mlflow server`: read back every metric, artifact and the model."""

from __future__ import annotations

from pathlib import Path

import mlflow
import mlflow.pytorch
import pytest
import torch
from mlflow.tracking import MlflowClient
from test_cifar_data import write_cifar
from test_cifar_workload import CLASS_METRICS, SUMMARY_METRICS

from devicebench.config import build_config, to_params
from devicebench.configs import CifarConfig
from devicebench.models.cifar_net import Net
from servers import MlflowServer, devicebench_env, run_mlflow_project, runs_of

ARTIFACTS = {"cifar_net.pth", "confusion_matrix.png", "per_class.json", "timings.json", "host.json"}


def _env(server: MlflowServer) -> dict[str, str]:
    # one OpenMP thread: on a small machine shared with other jobs two threads spin against each other
    return devicebench_env(server.url, OMP_NUM_THREADS="1")


def _finished_run(uri: str, experiment: str):
    runs = runs_of(uri, experiment)
    assert len(runs) == 1, [r.info.status for r in runs]
    run = runs[0]
    assert run.info.status == "FINISHED"
    return run


def _check_model(uri: str, run_id: str) -> None:
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        net = mlflow.pytorch.load_model(f"runs:/{run_id}/model")
    finally:
        mlflow.set_tracking_uri(previous)
    for n in (1, 7):
        images = torch.rand(n, 3, 32, 32) * 2 - 1  # the tutorial's normalised input range
        outputs = net(images)  # the tutorial's evaluation code, unchanged
        _, predicted = torch.max(outputs, 1)
        assert outputs.shape == (n, 10) and predicted.shape == (n,)


def test_mlflow_run_cifar_on_synthetic_data(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    params = {
        "device": "cpu",
        "data": "synthetic",
        "epochs": 1,
        "train_limit": 2000,
        "test_limit": 500,
        "batch_size": 32,
        "log_every": 10,
        "momentum": "0.90",  # spelled unlike the CLI's 0.9: MLflow refuses to change a logged param
    }
    proc = run_mlflow_project("cifar", params, _env(mlflow_server), experiment=experiment_name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Accuracy of the network on the 500 test images" in proc.stdout
    run = _finished_run(mlflow_server.url, experiment_name)
    # every default as the CLI logs it (no `''` for an empty one, no `0` for 0.0); a -P value as given
    cli_logs = to_params(build_config(CifarConfig, {k: str(v) for k, v in params.items()}))
    assert run.data.params == {**cli_logs, "momentum": "0.90"}
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["devicebench.workload"] == "cifar" and tags["devicebench.data"] == "synthetic"
    assert len(tags["devicebench.init_weights"]) == 16
    assert run.data.params["batch_size"] == "32" and run.data.params["loader"] == "dataloader"
    expected = (
        CLASS_METRICS + SUMMARY_METRICS + ["train/loss", "train/epoch_loss", "time/epoch_s", "time/total_s"]
    )
    missing = [m for m in expected if m not in metrics]
    assert not missing
    assert all(0 <= metrics[m] <= 1 for m in [*CLASS_METRICS, "eval/accuracy"])
    assert metrics["throughput/train_samples_per_s"] > 0 and metrics["memory/peak_rss_bytes"] > 0
    client = MlflowClient(mlflow_server.url)
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in history] == [10, 20, 30, 40, 50, 60]  # 63 steps, a point every 10
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= ARTIFACTS
    _check_model(mlflow_server.url, run.info.run_id)
    state = torch.load(client.download_artifacts(run.info.run_id, "cifar_net.pth", str(tmp_path)))
    Net().load_state_dict(state)  # the tutorial's `net.load_state_dict(torch.load(PATH))`


def test_mlflow_run_cifar_on_a_cifar_format_directory(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    write_cifar(tmp_path / "cifar", per_batch=40, test=50)
    params = {
        "device": "cpu",
        "data_dir": str(tmp_path / "cifar"),
        "verify": "false",
        "epochs": 1,
        "batch_size": 16,
        "loader": "tensor",
        "log_every": 5,
    }
    proc = run_mlflow_project("cifar", params, _env(mlflow_server), experiment=experiment_name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = _finished_run(mlflow_server.url, experiment_name)
    assert run.data.tags["devicebench.data"] == "cifar10"
    assert not [m for m in CLASS_METRICS if m not in run.data.metrics]
    assert run.data.metrics["throughput/train_samples_per_s"] > 0
    _check_model(mlflow_server.url, run.info.run_id)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without CUDA")
def test_mlflow_run_cifar_on_cuda_here_fails_with_one_line(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    proc = run_mlflow_project(
        "cifar",
        {"device": "cuda", "data": "synthetic"},
        devicebench_env(mlflow_server.url),
        experiment=experiment_name,
    )
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("devicebench:")]
    assert len(ours) == 1 and "finds no CUDA device" in ours[0]
    assert "Traceback" not in proc.stderr
    (run,) = runs_of(mlflow_server.url, experiment_name)
    assert run.info.status == "FAILED"
