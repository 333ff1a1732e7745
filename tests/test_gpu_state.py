"""host/gpu_state against a fake NVML (its samples, clocks and cap counters as NVML answers them), the
run line's caveat from those figures, and a real CUDA run's figures where a GPU exists."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from devicebench.config.fields import build_config
from devicebench.host.context import Context
from devicebench.host.gpu_state import watch, watching
from devicebench.run.run_line import summary_line
from devicebench.schema import (
    GPU_BUSY_SHARE,
    GPU_POWER_CAPPED_S,
    GPU_SM_CLOCK_MHZ,
    GPU_SM_CLOCK_SHARE,
    GPU_THERMAL_CAPPED_S,
)
from devicebench.tracking.protocol import MemoryTracker
from devicebench.util.gpu_caveat import gpu_caveat
from devicebench.workloads import cifar

CUDA = torch.device("cuda", 0)
UUID = "GPU-11111111-2222-3333-4444-555555555555"


class NotSupported(Exception):
    pass


def _sample(stamp_us: int, value: int) -> Any:
    return SimpleNamespace(timeStamp=stamp_us, sampleValue=SimpleNamespace(uiVal=value))


def fake_nvml(*, utilization: list[int], clocks: list[int], mig: bool = False) -> Any:
    """NVML as it answers for one GPU: samples newer than the asked time stamp (the older ones, from before
    training, are never returned), a max SM clock of 1,980 MHz, cap counters that grow by `capped_ns`
    between two reads. A MIG slice answers NotSupported for samples, as NVML does."""
    calls: list[str] = []
    state = {"capped_ns": [0, 0], "reads": 0}

    def samples(handle: str, kind: int, since_us: int) -> tuple[int, list[Any]]:
        calls.append(f"samples {kind}")
        if mig:
            raise NotSupported("Not Supported")
        old = [_sample(since_us - 500_000, 100)]  # before the watch began: NVML leaves it out
        values = utilization if kind == 1 else clocks
        new = [_sample(since_us + 100_000 * (i + 1), v) for i, v in enumerate(values)]
        return 0, [s for s in old + new if s.timeStamp > since_us]

    def violation(handle: str, policy: int) -> Any:
        state["reads"] += 1
        later = state["reads"] > 2  # the second pair of reads is after training
        ns = {0: 3_000_000_000, 1: 0}[policy] if later else 0
        return SimpleNamespace(referenceTime=0, violationTime=10_000 + ns)

    return SimpleNamespace(
        calls=calls,
        NVML_GPU_UTILIZATION_SAMPLES=1,
        NVML_PROCESSOR_CLK_SAMPLES=5,
        NVML_CLOCK_SM=1,
        NVML_PERF_POLICY_POWER=0,
        NVML_PERF_POLICY_THERMAL=1,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda u: {UUID: "h"}[u],
        nvmlDeviceGetSamples=samples,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetViolationStatus=violation,
    )


def test_a_watch_reads_what_nvml_sampled_since_training_began_and_closes_nvml() -> None:
    nvml = fake_nvml(utilization=[40, 50, 45], clocks=[1980, 1485])
    w = watch(CUDA, nvml=nvml, uuid=UUID.removeprefix("GPU-"))
    assert w is not None and nvml.calls == ["init"]
    got = w.read()
    assert got[GPU_BUSY_SHARE] == pytest.approx(0.45)  # the 100 % sample before training is not counted
    assert got[GPU_SM_CLOCK_MHZ] == pytest.approx(1732.5)
    assert got[GPU_SM_CLOCK_SHARE] == pytest.approx(1732.5 / 1980)
    assert (got[GPU_POWER_CAPPED_S], got[GPU_THERMAL_CAPPED_S]) == (pytest.approx(3.0), 0.0)
    assert nvml.calls[-1] == "shutdown"


def test_a_mig_slice_gives_its_cap_figures_only_and_no_cuda_or_no_nvml_gives_none() -> None:
    got = watch(CUDA, nvml=fake_nvml(utilization=[90], clocks=[1980], mig=True), uuid=UUID).read()
    assert set(got) == {GPU_POWER_CAPPED_S, GPU_THERMAL_CAPPED_S}
    assert watch(torch.device("cpu"), nvml=fake_nvml(utilization=[], clocks=[]), uuid=UUID) is None
    unknown = fake_nvml(utilization=[], clocks=[])
    assert watch(CUDA, nvml=unknown, uuid="GPU-unknown") is None
    assert unknown.calls == ["init", "shutdown"]

    def no_library() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    broken = SimpleNamespace(**{**vars(fake_nvml(utilization=[], clocks=[])), "nvmlInit": no_library})
    assert watch(CUDA, nvml=broken, uuid=UUID) is None


def test_nvml_is_shut_down_once_whether_the_watched_epochs_end_or_raise() -> None:
    """NVML's init is counted, so a watch shuts it down exactly once: after its read, or when training
    raised before the read (it was left initialised then)."""
    failed = fake_nvml(utilization=[40], clocks=[1980])
    with pytest.raises(RuntimeError, match="an epoch failed"), watching(CUDA, nvml=failed, uuid=UUID) as w:
        assert w is not None
        raise RuntimeError("an epoch failed")
    assert failed.calls == ["init", "shutdown"]
    ended = fake_nvml(utilization=[40], clocks=[1980])
    with watching(CUDA, nvml=ended, uuid=UUID) as w:
        assert w is not None and w.read()[GPU_BUSY_SHARE] == pytest.approx(0.4)
    assert [c for c in ended.calls if c in ("init", "shutdown")] == ["init", "shutdown"]
    with watching(torch.device("cpu"), nvml=ended, uuid=UUID) as w:
        assert w is None


def test_the_run_line_says_why_a_gpu_runs_speed_may_not_repeat() -> None:
    assert gpu_caveat({GPU_BUSY_SHARE: 0.41, GPU_SM_CLOCK_SHARE: 0.98}, 10.0) == "host-bound: GPU busy 41%"
    assert (
        gpu_caveat({GPU_POWER_CAPPED_S: 1.2, GPU_THERMAL_CAPPED_S: 0.1}, 10.0)
        == "power-capped 12% of training"
    )
    assert gpu_caveat({GPU_SM_CLOCK_SHARE: 0.72, GPU_BUSY_SHARE: 0.99}, 10.0) == "SM clock at 72% of max"
    assert gpu_caveat({GPU_BUSY_SHARE: 0.95, GPU_SM_CLOCK_SHARE: 0.99, GPU_POWER_CAPPED_S: 0.1}, 10.0) == ""
    assert gpu_caveat({GPU_BUSY_SHARE: math.nan}, 10.0) == "" and gpu_caveat({}, 10.0) == ""
    glance = {"at_a_glance/train_s": 10.0, "at_a_glance/train_samples_per_s": 11852.0}
    line = summary_line("cifar", "cuda:0", glance, "no price", gpu={GPU_BUSY_SHARE: 0.41})
    assert line == "train 10.00 s · 11,852 img/s · cuda:0 · host-bound: GPU busy 41% · no price: no price"


@pytest.mark.gpu
def test_a_cuda_training_run_logs_what_its_gpu_did(tmp_path: Path) -> None:
    """On a real GPU: the figures come from NVML's own samples over the epochs, in range."""
    asked = {"device": "cuda", "data": "synthetic", "train_limit": "4096", "test_limit": "64", "epochs": "1"}
    cfg = build_config(cifar.Config, {**asked, "batch_size": "64", "loader": "tensor"})
    tracker = MemoryTracker()
    result = cifar.run(cfg, Context(CUDA, tmp_path, False), tracker)
    logged = {k: v for k, v, _ in tracker.metrics}
    assert result.gpu and set(result.gpu) <= set(logged)
    assert 0.0 <= logged[GPU_BUSY_SHARE] <= 1.0 and 0.0 < logged[GPU_SM_CLOCK_SHARE] <= 1.05
