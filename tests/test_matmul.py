"""The matmul workload: arithmetic, accuracy, and `mlflow run . -e matmul` against real servers."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from own_tags import facts_of

from devicebench.config.fields import build_config
from devicebench.host.context import Context
from devicebench.host.timing import MAX_SAMPLES
from devicebench.schema import gflops, matmul_key, matmul_point_key
from devicebench.tracking.protocol import MemoryTracker
from devicebench.workloads.matmul import Config, rel_error, run
from servers import MlflowServer, devicebench_env, run_mlflow_project, runs_of


def test_gflops_is_two_n_cubed_over_time() -> None:
    assert gflops(1000, 2.0) == pytest.approx(1.0)
    assert gflops(8000, 1.024) == pytest.approx(1000.0)


def test_rel_error_is_zero_for_the_reference_and_small_for_float32() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 50)), rng.standard_normal((50, 50))
    rows = np.arange(10)
    assert rel_error((a @ b)[rows], a, b, rows) < 1e-15  # BLAS blocking may differ from the row product
    e32 = rel_error((a.astype(np.float32) @ b.astype(np.float32))[rows], a, b, rows)
    assert 0 < e32 < 1e-5


def test_run_logs_every_point_with_step_equal_to_size(tmp_path: Path) -> None:
    cfg = build_config(Config, {"sizes": "32,64", "dtypes": "float64,float32,bfloat16", "repeats": "2"})
    tracker = MemoryTracker()
    points = run(cfg, Context(torch.device("cpu"), tmp_path, False), tracker)
    # numpy: float64, float32; torch: all three → 5 series × 2 sizes
    assert len(points) == 10
    steps = sorted(s for k, _, s in tracker.metrics if k == "matmul/numpy/float64/gflops")
    assert steps == [32, 64]
    assert tracker.values("matmul/torch/bfloat16/rel_error")[0] < 0.05
    assert tracker.values("matmul/torch/float64/rel_error")[0] < 1e-12
    assert not [k for k, _, _ in tracker.metrics if k.endswith("unsynced_time_s")], (
        "CPU runs have no unsynced time"
    )
    assert {"timings.json", "matmul.csv", "gflops.png"} <= set(tracker.artifacts)
    # each point again as flat per-size keys, equal to the stepped ones (the report reads them)
    for p in points:
        for figure in ("gflops", "time_s"):
            stepped = {s: v for k, v, s in tracker.metrics if k == matmul_key(p.backend, p.dtype, figure)}
            (flat,) = tracker.values(matmul_point_key(p.backend, p.dtype, p.size, figure))
            assert flat == stepped[p.size]
    assert not [k for k, _, _ in tracker.metrics if k.endswith("/n32/rel_error")], "only what is read"


def test_each_backend_is_measured_in_a_fresh_process_where_no_other_pool_ran(tmp_path: Path) -> None:
    """The isolation's evidence: NumPy and torch points come from two processes other than this one,
    and torch's OpenMP runtime was never loaded where NumPy was measured."""
    cfg = build_config(Config, {"sizes": "32,64", "repeats": "2", "min_time_s": "0"})
    tracker = MemoryTracker()
    run(cfg, Context(torch.device("cpu"), tmp_path, False), tracker)
    rows = tracker.artifacts["timings.json"]
    pids = {b: {r["measured_in_pid"] for r in rows if r["backend"] == b} for b in ("numpy", "torch")}
    assert len(pids["numpy"]) == len(pids["torch"]) == 1
    assert pids["numpy"] != pids["torch"] and os.getpid() not in pids["numpy"] | pids["torch"]
    numpy_pools = {p for r in rows if r["backend"] == "numpy" for p in r["thread_pools_loaded"]}
    assert not [p for p in numpy_pools if p.startswith("openmp")], numpy_pools
    assert {r["isolation"] for r in rows} == {"process"}
    assert tracker.tags["devicebench.isolation"].startswith("one fresh process per backend")
    assert tracker.tags["devicebench.util.peak_source"].startswith("unknown: no datasheet peak for a CPU")


def test_isolation_none_measures_in_this_process(tmp_path: Path) -> None:
    cfg = build_config(Config, {"sizes": "32", "repeats": "2", "min_time_s": "0", "isolation": "none"})
    points = run(cfg, Context(torch.device("cpu"), tmp_path, False), MemoryTracker())
    assert {p.pid for p in points} == {os.getpid()}


def test_points_are_sampled_for_the_minimum_time_and_the_count_is_logged(tmp_path: Path) -> None:
    """Every point is sampled until 0.05 s were measured (a 32² product takes microseconds alone, so
    that is many samples; on a loaded host fewer), and the count is logged beside the figure."""
    cfg = build_config(Config, {"sizes": "32", "dtypes": "float32", "repeats": "3", "min_time_s": "0.05"})
    tracker = MemoryTracker()
    run(cfg, Context(torch.device("cpu"), tmp_path, False), tracker)
    for row in tracker.artifacts["timings.json"]:
        measured = sum(row["samples_s"]) * row["calls_per_sample"]
        assert measured >= 0.05 or row["repeats"] == MAX_SAMPLES, (row["backend"], measured, row["repeats"])
        assert row["repeats"] == len(row["samples_s"]) >= 3
        (logged,) = tracker.values(f"matmul/{row['backend']}/float32/samples")
        assert logged == row["repeats"]
    assert "samples" in tracker.artifacts["matmul.csv"].splitlines()[0]


def test_the_isolated_process_hands_back_results_and_exceptions() -> None:
    from devicebench.util import isolated

    assert isolated.call("math:sqrt", 4.0) == 2.0
    with pytest.raises(ValueError, match="math domain error"):
        isolated.call("math:sqrt", -1.0)
    with pytest.raises(MemoryError, match="SIGKILL"):  # what the kernel's OOM killer does
        isolated.call("signal:raise_signal", signal.SIGKILL)
    with pytest.raises(isolated.IsolatedProcessDied, match="exit 3"):
        isolated.call("os:_exit", 3)


def _read_run(uri: str, experiment: str):
    runs = runs_of(uri, experiment)
    assert len(runs) == 1, [r.info.status for r in runs]
    return runs[0]


def _check_matmul_run(uri: str, experiment: str) -> None:
    run = _read_run(uri, experiment)
    assert run.info.status == "FINISHED"
    tags = facts_of(run)
    assert tags["devicebench.device.resolved"] == "cpu"
    assert tags["devicebench.workload"] == "matmul"
    assert tags["devicebench.host.cpu_count"]
    assert tags["devicebench.host.torch"] == torch.__version__
    assert len(tags["devicebench.config_key"]) == 16
    assert run.data.params["sizes"] == "128,256"
    client = MlflowClient(uri)
    history = client.get_metric_history(run.info.run_id, "matmul/numpy/float64/gflops")
    assert sorted(m.step for m in history) == [128, 256]
    assert all(m.value > 0 for m in history)
    assert {"host.json", "timings.json", "matmul.csv", "gflops.png"} <= {
        a.path for a in client.list_artifacts(run.info.run_id)
    }


def mlflow_run_matmul(uri: str, experiment: str, quick: bool = False) -> None:
    """The acceptance command, `mlflow run . -e matmul`, against a server; then read the run back.
    `quick`: one process, no time floor, where the store is what is tested (not the timing)."""
    proc = run_mlflow_project(
        "matmul",
        {"device": "cpu", "sizes": "128,256", "repeats": 2}
        | ({"isolation": "none", "min_time_s": 0.0} if quick else {"min_time_s": 0.05}),
        devicebench_env(uri),
        experiment=experiment,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_matmul_run(uri, experiment)


@pytest.mark.e2e
def test_mlflow_run_matmul_on_a_sqlite_backed_server(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """On PostgreSQL: test_server_script.py, against the compose service's own server."""
    mlflow_run_matmul(mlflow_server.url, experiment_name)


@pytest.mark.gpu
def test_matmul_on_cuda_logs_the_unsynchronised_time(tmp_path: Path) -> None:
    cfg = build_config(Config, {"device": "cuda", "sizes": "2048", "dtypes": "float32", "backends": "torch"})
    tracker = MemoryTracker()
    run(cfg, Context(torch.device("cuda"), tmp_path, False), tracker)
    assert (
        tracker.values("matmul/torch/float32/unsynced_time_s")[0]
        < tracker.values("matmul/torch/float32/time_s")[0]
    )
    # a GPU in the peaks table gets its point's share of the datasheet peak; one not in it says so
    source = tracker.tags["devicebench.util.peak_source"]
    fractions = tracker.values("matmul/torch/float32/peak_fraction")
    assert (source.startswith("datasheet: ") and 0 < fractions[0] < 1) or (
        source.startswith("unknown: ") and not fractions
    ), (source, fractions)


def test_a_gpu_points_peak_fraction_is_its_gflops_over_the_datasheet_figure() -> None:
    """Planted points as an H100 SXM measured them on 2026-11-24 (bf16 n=4096 at ~701 TFLOP/s, fp32
    IEEE at ~51): the fraction is GFLOP/s over the table's dense figure; NumPy's CPU points get none,
    and a GPU the table does not know gets none either (never a made-up peak)."""
    from devicebench.host.peaks import gpu_peak
    from devicebench.host.timing import TimingStats
    from devicebench.workloads.matmul import MatmulPoint, point_peaks

    def point(backend: str, dtype: str, tflops: float) -> MatmulPoint:
        n = 4096
        return MatmulPoint(backend, dtype, n, TimingStats((2 * n**3 / (tflops * 1e12),)), 0.0, None)

    points = [
        point("torch", "bfloat16", 701.0),
        point("torch", "float32", 51.0),
        point("numpy", "float32", 1.1),
    ]
    peaks = point_peaks(points, "NVIDIA H100 80GB HBM3")
    assert peaks == {("torch", "bfloat16"): 989_500.0, ("torch", "float32"): 67_000.0}
    assert points[0].gflops / peaks[("torch", "bfloat16")] == pytest.approx(701 / 989.5)
    from devicebench.workloads.matmul import point_metrics

    assert point_metrics(points[0], peaks)["matmul/torch/bfloat16/peak_fraction"] == pytest.approx(
        701 / 989.5
    )
    assert "matmul/numpy/float32/peak_fraction" not in point_metrics(points[2], peaks)
    assert point_peaks(points, "NVIDIA H100 PCIe")[("torch", "float32")] == 51_000.0
    assert point_peaks(points, "Some Future GPU") == {}
    from devicebench.workloads.matmul import points_peak_source as peak_source

    assert peak_source("NVIDIA H100 80GB HBM3").startswith("datasheet: NVIDIA H100 datasheet, SXM")
    assert (
        peak_source("Some Future GPU") == "unknown: Some Future GPU is not in the peaks table (host/peaks.py)"
    )
    assert peak_source(None).startswith("unknown: no datasheet peak for a CPU")
    assert (
        gpu_peak("NVIDIA A10").tflops["tf32"] == 62.5 and gpu_peak("Tesla V100-SXM2-16GB").name == "V100 SXM2"
    )
    for name in (
        "Tesla V100-SXM2-16GB",
        "NVIDIA A10",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
    ):
        peak = gpu_peak(name)
        assert peak is not None and peak.source.startswith("NVIDIA"), name
        assert {"fp32", "fp16"} <= set(peak.tflops)
    # torch's names of variants pick their own rows; a name only like one in the table gets none
    variants = {
        "Tesla V100-PCIE-32GB": ("V100 PCIe", 14.0),
        "Tesla V100S-PCIE-32GB": ("V100S PCIe", 16.4),
        "NVIDIA A100 80GB PCIe": ("A100", 19.5),
        "NVIDIA H100 PCIe": ("H100 PCIe", 51.0),
        "NVIDIA H100 NVL": ("H100 NVL", 60.0),
        "NVIDIA GH200 480GB": ("GH200", 67.0),
        "NVIDIA H200 NVL": ("H200 NVL", 60.0),
    }
    for name, (row, fp32) in variants.items():
        peak = gpu_peak(name)
        assert peak is not None and (peak.name, peak.tflops["fp32"]) == (row, fp32), name
    assert gpu_peak("NVIDIA H100 NVL").tflops["bf16"] == 835.5, "1,671 with sparsity, halved"
    assert gpu_peak("NVIDIA RTX A1000") is None and gpu_peak("NVIDIA A10G") is None
    # a MIG slice is held against its share of the SMs, not the whole GPU's peak (its fraction read 7.7x low)
    mig = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    assert point_peaks(points, mig, 14)[("torch", "bfloat16")] == pytest.approx(312_000.0 * 14 / 108)
    assert (
        point_peaks(points, mig, 108)
        == point_peaks(points, mig)
        == point_peaks(points, "NVIDIA A100-SXM4-40GB")
    )
    assert peak_source(mig, 14).endswith("× 14/108 SMs (a MIG slice)")
    assert gpu_peak("NVIDIA H100 PCIe", 114) == gpu_peak("NVIDIA H100 PCIe"), "its own full count: unscaled"
