"""The demo plan runs in `make test`: it must stay fast, offline, and end with a report and a run count."""

from __future__ import annotations

import re
import time
from pathlib import Path

from servers import devicebench_env, run_cli, runs_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_plan_runs_offline_on_the_embedded_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = devicebench_env(
        uri, DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"), DEVICEBENCH_DATA_DIR=str(tmp_path / "data")
    )
    t0 = time.monotonic()
    proc = run_cli(
        ["suite", str(ROOT / "experiments" / "demo.yaml")], env, cwd=tmp_path, timeout_s=300, real=True
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert took < 180, f"the demo must finish within 3 minutes here; took {took:.0f} s"
    out = proc.stdout
    assert re.search(r"suite demo: 3 finished, 0 failed, \d skipped", out), out
    assert "mlflow ui --backend-store-uri" in out
    html = re.search(r"(\S+report\.html)", out)
    assert html, out
    report = Path(html.group(1))
    report = report if report.is_absolute() else tmp_path / report
    assert report.is_file() and report.stat().st_size > 10_000, "a self-contained report with inline charts"
    assert not (tmp_path / "data").exists(), "the demo downloads nothing"
    runs = runs_of(uri, "devicebench-demo")
    workloads = sorted(r.data.tags.get("devicebench.workload") for r in runs)
    assert workloads == ["cifar", "matmul", "report", "suite", "unet"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert {
        r.data.tags.get("devicebench.data")
        for r in runs
        if r.data.tags.get("devicebench.workload") in ("cifar", "unet")
    } == {"synthetic"}
