"""`mlflow run . -e unet` against a real `mlflow server`: the issue's acceptance runs, read back from the store.

Runs are kept small (limits, base 8, 64²) so the file stays within its time budget on a shared 2-core host;
OMP_NUM_THREADS=1 because two OpenMP threads competing with other processes there slow a UNet step ~50×.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from own_tags import facts_of
from test_unet_data import write_voc

from devicebench.data.voc import CLASSES
from devicebench.train import seeding
from devicebench.workloads.unet import Config, build_unet
from servers import MlflowServer, devicebench_env, run_cli, run_mlflow_project, runs_of

SYNTHETIC = {
    "device": "cpu",
    "data": "synthetic",
    "base_channels": 8,
    "image_size": 64,
    "train_limit": 48,
    "val_limit": 8,
    "log_every": 1,
}


def _env(server: MlflowServer) -> dict[str, str]:
    return devicebench_env(server.url, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def synthetic_run(mlflow_server: MlflowServer) -> Iterator:
    """The acceptance command (with limits), run once for the tests of this module."""
    experiment = f"unet-synthetic-{os.getpid()}"
    proc = run_mlflow_project("unet", SYNTHETIC, _env(mlflow_server), experiment=experiment)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = runs_of(mlflow_server.url, experiment)
    assert len(runs) == 1
    yield runs[0], experiment


@pytest.mark.e2e
def test_synthetic_run_finishes_with_the_schema(
    synthetic_run: tuple, mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    run, _ = synthetic_run
    assert run.info.status == "FINISHED"
    tags, metrics = facts_of(run), run.data.metrics
    params = {k: v for k, v in run.data.params.items() if not k.startswith("devicebench.")}  # the config
    assert tags["devicebench.workload"] == "unet" and tags["devicebench.data"] == "synthetic"
    assert tags["devicebench.device.resolved"] == "cpu"
    assert len(tags["devicebench.init_weights"]) == 16
    assert set(params) == {f.name for f in dataclasses.fields(Config)} | {"global_batch_size"}
    assert params["base_channels"] == "8" and params["image_size"] == "64" and params["bilinear"] == "false"
    assert 0.0 <= metrics["eval/miou"] <= 1.0
    iou = {k for k in metrics if k.startswith("eval/iou/")}
    assert "eval/iou/background" in iou and 1 <= len(iou) <= 21
    for key in ("eval/dice", "eval/pixel_accuracy", "time/train_s", "time/eval_s", "memory/peak_rss_bytes"):
        assert key in metrics, key
    client = MlflowClient(mlflow_server.url)
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in history] == [1, 2, 3]  # 48 images / batch 16, every step
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts >= {"predictions.png", "per_class.json", "confusion_matrix.png", "timings.json"}
    assert "memory/peak_bytes" not in metrics  # the CPU has no device memory figure
    tables = json.loads(tags["mlflow.loggedArtifacts"])
    assert tables == [{"path": p, "type": "table"} for p in ("per_class.json", "confusion_matrix.json")]
    local = Path(client.download_artifacts(run.info.run_id, "per_class.json", str(tmp_path)))
    table = json.loads(local.read_text())  # pandas' "split" JSON, as MlflowClient.log_table writes it
    assert table["columns"] == ["class", "iou", "dice", "accuracy", "truth_pixels", "predicted_pixels"]
    assert [row[0] for row in table["data"]] == list(CLASSES)
    # the model is named for what it is, and its quality metrics are linked to it
    (model,) = client.search_logged_models([run.info.experiment_id], f"source_run_id = '{run.info.run_id}'")
    assert model.name == "unet"
    linked = {m.key: m.value for m in client.get_logged_model(model.model_id).metrics}
    assert linked["eval/miou"] == metrics["eval/miou"] and {"eval/loss", "eval/dice"} <= set(linked)


@pytest.mark.e2e
def test_logged_model_loads_and_predicts_masks(
    synthetic_run: tuple, mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    import mlflow
    import mlflow.pytorch
    import torch

    run, _ = synthetic_run
    mlflow.set_tracking_uri(mlflow_server.url)
    model = mlflow.pytorch.load_model(f"runs:/{run.info.run_id}/unet", dst_path=str(tmp_path))
    model.eval()
    for n in (1, 3):
        with torch.no_grad():
            masks = model(torch.randn(n, 3, 64, 64)).argmax(dim=1)
        assert masks.shape == (n, 64, 64)
        assert int(masks.min()) >= 0 and int(masks.max()) < 21


@pytest.fixture(scope="module")
def voc_run(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A run on a VOC directory written by the test, same seed and widths as the synthetic run; through
    the CLI (the `mlflow run` path is the synthetic run's), so one interpreter less to start."""
    data_dir = tmp_path_factory.mktemp("voc")
    root = write_voc(data_dir, n_train=12, n_val=4)
    experiment = f"unet-voc-{os.getpid()}"
    params = {
        "device": "cpu",
        "data_dir": str(data_dir),
        "base_channels": 8,
        "image_size": 32,
        "batch_size": 4,
    }
    args = ["unet", *(a for k, v in params.items() for a in (f"--{k}", str(v)))]
    proc = run_cli(args, {**_env(mlflow_server), "DEVICEBENCH_EXPERIMENT": experiment}, cwd=data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_of(mlflow_server.url, experiment)
    yield run, root


def test_a_run_on_a_voc_directory(voc_run: tuple) -> None:
    run, root = voc_run
    assert run.info.status == "FINISHED" and run.data.tags["devicebench.data"] == "voc2012"
    assert "eval/miou" in run.data.metrics and "eval/iou/background" in run.data.metrics
    assert run.data.params["data_dir"] == str(root.parent.parent)
    sample = root / "ImageSets/Segmentation/devicebench_train300.txt"
    assert sample.read_text().split() == [f"2007_{k:06d}" for k in range(12)]


@pytest.mark.e2e
def test_same_seed_same_initial_weights(synthetic_run: tuple, voc_run: tuple) -> None:
    """Two runs with seed 0 and base 8 (different data, sizes and config keys) start from the same
    weights, and those are the weights `build_unet` makes in this process."""
    (first, _), (second, _) = synthetic_run, voc_run
    assert second.data.tags["devicebench.config_key"] != first.data.tags["devicebench.config_key"]
    assert facts_of(second)["devicebench.init_weights"] == facts_of(first)["devicebench.init_weights"]
    expected = seeding.weights_fingerprint(build_unet(Config(base_channels=8)))
    assert facts_of(first)["devicebench.init_weights"] == expected


def test_missing_voc_data_fails_the_run_with_one_line(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    env = _env(mlflow_server) | {"DEVICEBENCH_EXPERIMENT": experiment_name}
    proc = run_cli(["unet", "--data_dir", str(tmp_path), "--base_channels", "4"], env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "VOCdevkit/VOC2012" in lines[0] and "data=synthetic" in lines[0], proc.stderr
    (run,) = runs_of(mlflow_server.url, experiment_name)
    assert run.info.status == "FAILED"  # never a silent switch to synthetic data
    assert "VOCdevkit/VOC2012" in facts_of(run)["devicebench.error"]
