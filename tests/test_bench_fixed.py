"""`benchmarks/bench_fixed.py` on what can go wrong before a figure: a device it does not know, and a tiny
run that fails (as `cuda` does on a host without CUDA), each one line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BadArgument
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
