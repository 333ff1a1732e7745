"""The cifar workload end to end in-process (MemoryTracker), its bad input through the real CLI, and GPU runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from test_cifar_data import write_cifar

from devicebench.config.fields import build_config, config_key, field_names, to_params
from devicebench.errors import DataUnavailable, UsageError
from devicebench.host.context import Context
from devicebench.tracking.protocol import MemoryTracker
from devicebench.workloads.cifar import Config, run
from servers import MlflowServer, devicebench_env, one_error_line, run_cli, runs_of

CLASS_METRICS = [
    f"eval/acc/{c}"
    for c in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
]
SUMMARY_METRICS = [
    "time/warmup_s",
    "time/train_s",
    "time/data_wait_s",
    "time/eval_s",
    "throughput/train_samples_per_s",
    "throughput/eval_samples_per_s",
    "eval/accuracy",
    "eval/loss",
    "memory/peak_rss_bytes",
]
SMALL = {
    "data": "synthetic",
    "train_limit": "640",
    "test_limit": "200",
    "batch_size": "32",
    "num_workers": "0",
}


# A loader=tensor config that learns within seconds: 0.72 on the CPU (measured 2026-11-24), so the GPU
# test's threshold is one the CPU run of the same config clears by a margin. IEEE fp32 on both sides.
LEARNS = {**SMALL, "epochs": "4", "lr": "0.05", "loader": "tensor", "batch_size": "64", "precision": "fp32"}
LEARNS_ABOVE = 0.5

# One torch thread for this module (conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cpu(tmp_path: Path) -> Context:
    return Context(torch.device("cpu"), tmp_path, False)


def test_config_matches_the_mlproject_entry_point(repo_root: Path) -> None:
    import yaml

    spec = yaml.safe_load((repo_root / "MLproject").read_text())["entry_points"]["cifar"]["parameters"]
    assert field_names(Config) == list(spec)  # in the order a user sees them (config_fields)
    # each default spelled as the CLI logs it, so `mlflow run` and the CLI log the same params
    assert {
        k: str(v["default"]).lower() if isinstance(v["default"], bool) else str(v["default"])
        for k, v in spec.items()
    } == to_params(Config())
    assert Config().model == "tutorial" and Config().batch_size == 4 and Config().epochs == 2


def test_config_key_ignores_where_and_how_verbosely() -> None:
    a = build_config(Config, {"data_dir": "/a", "log_every": "10", "seed": "1", "download": "true"})
    b = build_config(Config, {"data_dir": "/b", "log_every": "2000"})
    assert config_key("cifar", a) == config_key("cifar", b)
    assert config_key("cifar", a) != config_key("cifar", build_config(Config, {"width": "2"}))


def test_width_with_resnet_and_zero_lr_are_rejected() -> None:
    with pytest.raises(UsageError, match="--width"):
        build_config(Config, {"model": "resnet18", "width": "2"})
    with pytest.raises(UsageError, match="--lr"):
        build_config(Config, {"lr": "0"})


def test_a_run_logs_the_schema_and_every_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = build_config(Config, {**SMALL, "epochs": "2", "lr": "0.02", "log_every": "5"})
    tracker = MemoryTracker()
    result = run(cfg, _cpu(tmp_path), tracker)
    names = {k for k, _, _ in tracker.metrics}
    assert set(CLASS_METRICS + SUMMARY_METRICS) <= names
    assert "memory/peak_bytes" not in names  # no device memory figure on the CPU (it repeated the RSS)
    assert "time/to_target_s" not in names
    losses = [(v, s) for k, v, s in tracker.metrics if k == "train/loss"]
    assert [s for _, s in losses] == [5, 10, 15, 20, 25, 30, 35, 40]  # 20 steps an epoch, 4 points each
    assert [s for k, _, s in tracker.metrics if k == "time/epoch_s"] == [1, 2]
    assert [s for k, _, s in tracker.metrics if k == "train/epoch_loss"] == [1, 2]
    assert result.accuracy == tracker.values("eval/accuracy")[0] > 0.3
    assert result.train_samples == 1280
    assert result.train_samples_per_s == pytest.approx(1280 / tracker.values("time/train_s")[0])
    assert tracker.tags["devicebench.init_weights"] and len(tracker.tags["devicebench.init_weights"]) == 16
    assert (
        tracker.tags["devicebench.model.params"] == "62006"
    )  # the tutorial Net, width 1 (models.count_parameters)
    assert {"per_class.json", "timings.json", "confusion_matrix.png", "confusion_matrix.json"} <= set(
        tracker.artifacts
    )
    assert "cifar_net.pth" not in tracker.artifacts  # the weights are the logged model's
    assert tracker.tables == {"per_class.json", "confusion_matrix.json"}
    per_class = tracker.artifacts["per_class.json"]
    assert list(per_class) == ["class", "accuracy", "correct", "total"]
    assert per_class["class"] == [m.split("/")[-1] for m in CLASS_METRICS]
    assert sum(per_class["total"]) == 200
    assert per_class["accuracy"] == [pytest.approx(tracker.values(m)[-1]) for m in CLASS_METRICS]
    json.dumps(per_class)
    confusion = tracker.artifacts["confusion_matrix.json"]
    assert confusion["true class"] == per_class["class"] and confusion["cat"][3] == per_class["correct"][3]
    timings = tracker.artifacts["timings.json"]
    assert len(timings["epochs"]) == 2 and timings["eval_s"] > 0
    # the model is named for its architecture and carries the final evaluation's metrics
    assert list(tracker.models) == ["cifar-tutorial"]
    linked = tracker.model_metrics["cifar-tutorial"]
    assert linked["eval/accuracy"] == result.accuracy and linked["eval/loss"] == result.eval_loss
    assert set(CLASS_METRICS) <= set(linked)
    # the tutorial's own evaluation code works on the logged model, for any batch size
    model, example = tracker.models["cifar-tutorial"]
    assert example.shape[1:] == (3, 32, 32) and example.dtype == torch.float32
    images = torch.randn(7, 3, 32, 32)
    outputs = model(images)
    _, predicted = torch.max(outputs, 1)
    assert predicted.shape == (7,)
    out = capsys.readouterr().out
    assert "[1,     5] loss: " in out and "[2,    20] loss: " in out
    assert "Accuracy of the network on the 200 test images: " in out
    assert out.count("Accuracy for class: ") == 10


def test_same_seed_same_start_and_same_result_for_both_loaders(tmp_path: Path) -> None:
    base = {**SMALL, "epochs": "1", "train_limit": "256", "test_limit": "64"}
    results, tags = [], []
    for loader in ("dataloader", "tensor"):
        tracker = MemoryTracker()
        results.append(run(build_config(Config, {**base, "loader": loader}), _cpu(tmp_path), tracker))
        tags.append(tracker.tags["devicebench.init_weights"])
    assert tags[0] == tags[1]
    assert all(0 <= r.accuracy <= 1 and r.train_samples == 256 for r in results)


def test_target_accuracy_logs_the_training_time_to_reach_it(tmp_path: Path) -> None:
    cfg = build_config(
        Config, {**SMALL, "epochs": "2", "lr": "0.02", "loader": "tensor", "target_accuracy": "0.2"}
    )
    tracker = MemoryTracker()
    result = run(cfg, _cpu(tmp_path), tracker)
    assert len(tracker.values("eval/accuracy")) == 2  # evaluated after every epoch
    (to_target,) = tracker.values("time/to_target_s")
    assert result.to_target_s == to_target
    assert 0 < to_target <= tracker.values("time/train_s")[0] + 1e-9


def test_bf16_channels_last_on_cpu(tmp_path: Path) -> None:
    cfg = build_config(
        Config,
        {
            **SMALL,
            "epochs": "1",
            "train_limit": "128",
            "test_limit": "64",
            "precision": "bf16",
            "channels_last": "true",
            "width": "2",
        },
    )
    tracker = MemoryTracker()
    result = run(cfg, _cpu(tmp_path), tracker)
    assert math.isfinite(tracker.values("train/epoch_loss")[0]) and 0 <= result.accuracy <= 1


def test_fp16_on_cpu_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--precision: fp16 autocast needs a CUDA device"):
        run(build_config(Config, {**SMALL, "precision": "fp16"}), _cpu(tmp_path), MemoryTracker())


def test_a_written_cifar_directory_trains_with_verify_off(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar", per_batch=16, test=24)
    cfg = build_config(
        Config,
        {
            "data_dir": str(tmp_path / "cifar"),
            "verify": "false",
            "epochs": "1",
            "batch_size": "8",
            "num_workers": "0",
        },
    )
    tracker = MemoryTracker()
    result = run(cfg, _cpu(tmp_path), tracker)
    assert result.train_samples == 80
    assert sum(tracker.artifacts["per_class.json"]["total"]) == 24


def test_missing_dataset_is_data_unavailable_never_synthetic(tmp_path: Path) -> None:
    tracker = MemoryTracker()
    with pytest.raises(DataUnavailable, match="data_batch_1 is missing"):
        run(build_config(Config, {"epochs": "1"}), _cpu(tmp_path), tracker)
    assert not tracker.metrics


# ------------------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "vgg16"], "--model: unknown value 'vgg16'; allowed: tutorial, resnet18"),
        (["--batch_size", "0"], "--batch_size: '0' is out of range"),
    ],
)
def test_bad_parameters_exit_2_before_any_run(args: list[str], needle: str, tmp_path: Path) -> None:
    proc = run_cli(["cifar", *args], devicebench_env(f"sqlite:///{tmp_path / 'm.db'}"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in one_error_line(proc.stderr)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without CUDA")
def test_fp16_on_cpu_exits_2_and_leaves_a_failed_run(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    proc = run_cli(["cifar", "--precision", "fp16", "--data", "synthetic"], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--precision: fp16 autocast needs a CUDA device" in one_error_line(proc.stderr)
    (failed,) = runs_of(mlflow_server.url, experiment_name)
    assert failed.info.status == "FAILED"
    assert "fp16" in failed.data.tags["devicebench.error"]


def test_missing_dataset_exits_2_naming_the_file(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    proc = run_cli(["cifar", "--data_dir", str(tmp_path / "nothing")], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert str(tmp_path / "nothing" / "cifar-10-batches-py" / "data_batch_1") in line
    assert "download=true" in line and "data=synthetic" in line
    (failed,) = runs_of(mlflow_server.url, experiment_name)
    assert failed.info.status == "FAILED"
    assert failed.data.tags["devicebench.data"] == "cifar10"


def test_corrupt_pickle_exits_2_with_one_line(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    folder = write_cifar(tmp_path / "cifar")
    (folder / "test_batch").write_bytes(b"\x80\x04not a pickle")
    env = devicebench_env(mlflow_server.url, DEVICEBENCH_EXPERIMENT=experiment_name)
    args = ["cifar", "--data_dir", str(tmp_path / "cifar"), "--verify", "false", "--num_workers", "0"]
    proc = run_cli(args, env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "test_batch is corrupt or truncated" in one_error_line(proc.stderr)


# ------------------------------------------------------------------------------------------- GPU


def _cuda(tmp_path: Path) -> Context:
    return Context(torch.device("cuda", 0), tmp_path, False)


@pytest.mark.gpu
def test_tutorial_defaults_on_cuda(tmp_path: Path) -> None:
    cfg = build_config(
        Config, {"device": "cuda", "data": "synthetic", "train_limit": "4000", "test_limit": "1000"}
    )
    tracker = MemoryTracker()
    result = run(cfg, _cuda(tmp_path), tracker)
    assert result.train_samples == 8000 and 0 <= result.accuracy <= 1
    assert tracker.values("memory/peak_bytes")[0] > 0
    model, _ = tracker.models["cifar-tutorial"]
    assert next(model.parameters()).device.type == "cuda"  # the tracker moves its own copy to the CPU
    # a GPU in the table has its share of the datasheet peak (of its SMs, on a MIG slice); one not in it says so
    source, fractions = tracker.tags["devicebench.util.peak_source"], tracker.values("util/peak_fraction")
    assert (source.startswith("datasheet: ") and 0 < fractions[0] < 1) or (
        source.startswith("unknown: ") and not fractions
    ), (source, fractions)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_on_cuda(precision: str, tmp_path: Path) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    cfg = build_config(
        Config,
        {
            **SMALL,
            "device": "cuda",
            "epochs": "2",
            "lr": "0.02",
            "precision": precision,
            "channels_last": "true",
            "width": "4",
        },
    )
    tracker = MemoryTracker()
    result = run(cfg, _cuda(tmp_path), tracker)
    assert all(math.isfinite(v) for v in tracker.values("train/epoch_loss"))
    assert result.accuracy > 0.3


@pytest.mark.gpu
def test_tensor_loader_on_cuda_matches_the_cpu_values_and_learns(tmp_path: Path) -> None:
    from devicebench.data.cifar import TensorLoader
    from devicebench.data.synthetic import make_split

    images, labels = make_split(train=False, limit=100)
    on_gpu = TensorLoader(images, labels, 50, torch.device("cuda", 0), shuffle=False)
    on_cpu = TensorLoader(images, labels, 50, torch.device("cpu"), shuffle=False)
    assert torch.equal(on_gpu.images.cpu(), on_cpu.images)  # bit for bit: normalised on the CPU
    shuffled_gpu = TensorLoader(images, labels, 32, torch.device("cuda", 0), shuffle=True, seed=7)
    shuffled_cpu = TensorLoader(images, labels, 32, torch.device("cpu"), shuffle=True, seed=7)
    for _ in range(2):  # two epochs: the same fresh order each time
        gpu_order = torch.cat([y for _, y in shuffled_gpu]).cpu()
        assert torch.equal(gpu_order, torch.cat([y for _, y in shuffled_cpu]))
    cfg = build_config(Config, {**LEARNS, "device": "cuda"})
    on_cuda = run(cfg, _cuda(tmp_path), MemoryTracker()).accuracy
    on_the_cpu = run(
        dataclasses.replace(cfg, device="cpu"), Context(torch.device("cpu"), tmp_path, False), MemoryTracker()
    )
    assert on_cuda > LEARNS_ABOVE and abs(on_cuda - on_the_cpu.accuracy) <= 0.1, (
        on_cuda,
        on_the_cpu.accuracy,
    )


def test_the_tensor_loader_config_the_gpu_test_uses_learns_on_the_cpu(tmp_path: Path) -> None:
    """The GPU test's threshold, checked where CI runs: at batch 64 for 2 epochs this gave 0.155 on the
    CPU and on an H100 alike (20 steps do not learn; the old threshold 0.3 had never been checked)."""
    cfg = build_config(Config, {**LEARNS, "device": "cpu"})
    assert run(cfg, Context(torch.device("cpu"), tmp_path, False), MemoryTracker()).accuracy > LEARNS_ABOVE


# The tutorial Net, counted by hand: multiply-adds × 2 per layer, forward.
TUTORIAL_FORWARD = (
    705_600 + 480_000 + 117_840
)  # conv1 6·28·28·75, conv2 16·10·10·150, fc 400·120+120·84+84·10


def test_a_run_logs_the_models_flops_and_the_share_of_the_cpus_measured_peak(tmp_path: Path) -> None:
    """Backward costs twice the forward, less conv1's input gradient (the images need none)."""
    cfg = build_config(Config, {**SMALL, "device": "cpu", "epochs": "1", "train_limit": "64"})
    tracker = MemoryTracker()
    result = run(cfg, Context(torch.device("cpu"), tmp_path, False), tracker)
    (per_sample,) = tracker.values("flops/train_per_sample")
    assert TUTORIAL_FORWARD == 1_303_440
    assert per_sample == 3 * TUTORIAL_FORWARD - 705_600
    (tflops,) = tracker.values("throughput/train_tflops")
    assert tflops == pytest.approx(per_sample * result.train_samples_per_s / 1e12)
    (peak,) = tracker.values("util/peak_tflops")
    (fraction,) = tracker.values("util/peak_fraction")
    assert 0 < fraction < 1 and fraction == pytest.approx(tflops / peak)
    assert tracker.tags["devicebench.util.dtype"] == "fp32"
    assert tracker.tags["devicebench.util.peak_source"].startswith("measured: torch.mm fp32 n=1024")


def test_the_cpus_peak_is_taken_on_every_usable_core_whatever_the_runs_threads() -> None:
    """A tuned run at 1 thread is held against the whole CPU, not one core; its threads are put back."""
    from devicebench.host.cpu import usable_cores
    from devicebench.train.summary import cpu_peak_tflops

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measured = cpu_peak_tflops("fp32", n=256)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert measured is not None and measured[0] > 0
    assert f"on this CPU's {usable_cores()} cores" in measured[1]
    from devicebench.train.summary import peak_devices

    # a CPU job of 4 processes on one node is one CPU; on 2 nodes of 2, two; 4 GPUs are four devices
    assert peak_devices(torch.device("cpu"), 4, 4) == 1 and peak_devices(torch.device("cpu"), 4, 2) == 2
    assert peak_devices(torch.device("cuda"), 4, 4) == 4


def test_a_peak_that_cannot_be_known_is_logged_as_unknown_with_the_reason() -> None:
    """No fraction is made up: a dtype with no CPU peak logs the FLOP rate, no peak, and says why."""
    from devicebench.host.peaks import peak_source
    from devicebench.train.summary import utilization_metrics

    metrics, tags = utilization_metrics(1e6, 1000.0, torch.device("cpu"), "fp16")
    assert metrics == {"flops/train_per_sample": 1e6, "throughput/train_tflops": pytest.approx(1e-3)}
    assert tags["devicebench.util.peak_source"] == "unknown: no fp16 peak for a cpu device"
    assert (
        peak_source("Some Future GPU") == "unknown: Some Future GPU is not in the peaks table (host/peaks.py)"
    )
    assert peak_source("NVIDIA A100-SXM4-80GB").startswith("datasheet: NVIDIA A100 datasheet")
