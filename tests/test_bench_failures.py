"""The benches on what can go wrong before a figure: bench_fixed's device it does not know, and a run a
bench needs that fails (as `cuda` does on a host without CUDA), each one line and exit 2, never a
traceback; `make bench` says that line and goes on to the next bench."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BadArgument, bench_matmul, bench_tune
from benchmarks.bench_fixed import bench_env, fixed_cold


def test_an_unknown_device_is_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_fixed", "gpu"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip().splitlines() == [
        "bench_fixed: device 'gpu' is not allowed; allowed: cpu, cuda"
    ]


def test_a_tiny_run_that_fails_ends_the_bench_with_its_own_line(tmp_path: Path) -> None:
    # a device spelling devicebench refuses before torch loads: the cheapest failing run
    with pytest.raises(BadArgument) as refused:
        fixed_cold(bench_env(tmp_path), tmp_path, ["cifar", "--device", "tpu"])
    said = str(refused.value)
    assert said.startswith("bench_fixed: a tiny run exited 2: devicebench: error: ") and "tpu" in said
    assert "\n" not in said


def test_a_matmul_or_tune_run_that_fails_ends_its_bench_with_the_runs_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # values devicebench refuses before torch loads: the cheapest failing runs
    with pytest.raises(BadArgument) as refused:
        bench_matmul.cli_runs(["--dtypes", "int8"], 1, tmp_path)
    said = str(refused.value)
    assert (
        said.startswith("bench_matmul: a cold matmul run exited 2: devicebench: error: ") and "int8" in said
    )
    monkeypatch.setattr(bench_tune, "ARGS", ["--batch_size", "0"])
    with pytest.raises(BadArgument) as refused:
        bench_tune.measured_over_trial(tmp_path)
    said = str(refused.value)
    assert said.startswith("bench_tune: tune cifar exited 2: devicebench: error: ") and "batch_size" in said
    assert "\n" not in said
