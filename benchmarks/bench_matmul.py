"""Harness efficiency and tracking overhead of the matmul workload, each a ratio measured in one run.

* harness efficiency: the project's NumPy float64 GFLOP/s at n=2048 against a bare `numpy.dot` loop in
  the same process (target >= 0.90): the timer itself must not cost throughput;
* tracking overhead: the matmul workload tracked into a real local `mlflow server` against the same
  workload with a no-op tracker, run start and end included (target <= 3 %).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from devicebench.config import build_config, to_params
from devicebench.settings import load_settings
from devicebench.tracking import null_tracker, run_context
from devicebench.workloads import Context
from devicebench.workloads.matmul import Config, gflops, measure
from servers import MlflowServer

N = 2048
ROUNDS = 5


def harness_efficiency() -> float:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    cfg = build_config(Config, {"sizes": str(N), "dtypes": "float64", "backends": "numpy", "repeats": "3"})
    np.dot(a, b)
    ratios = []
    for _ in range(ROUNDS):
        bare = []
        for _ in range(3):
            t0 = time.perf_counter()
            np.dot(a, b)
            bare.append(time.perf_counter() - t0)
        ours = measure(cfg, torch.device("cpu"))[0].gflops
        ratios.append(ours / gflops(N, statistics.median(bare)))
    return statistics.median(ratios)


def tracking_overhead() -> float:
    from devicebench.workloads.matmul import run

    # A run of ~20 s here: short enough for a benchmark, long enough that a run's fixed costs (creating
    # it, uploading four artifacts, ending it) are weighed against real work, as in a real run.
    cfg = build_config(Config, {"sizes": "2048,4096", "dtypes": "float64,float32", "repeats": "3"})
    ctx = Context(torch.device("cpu"), Path("."), False)
    with tempfile.TemporaryDirectory() as d:
        server = MlflowServer(f"sqlite:///{d}/mlflow.db", Path(d) / "artifacts").start()
        try:
            settings = load_settings(
                {**os.environ, "MLFLOW_TRACKING_URI": server.url, "DEVICEBENCH_SPOOL_DIR": f"{d}/spool"}
            )

            def tracked() -> float:
                t0 = time.perf_counter()
                with run_context(settings, "matmul", to_params(cfg)) as tracker:
                    run(cfg, ctx, tracker)
                return time.perf_counter() - t0

            def untracked() -> float:
                t0 = time.perf_counter()
                run(cfg, ctx, null_tracker())
                return time.perf_counter() - t0

            tracked(), untracked()  # warm-up: imports, store migration, BLAS threads
            ratios = [tracked() / untracked() for _ in range(2)]
        finally:
            server.stop()
    return statistics.median(ratios) - 1.0


def main() -> int:
    eff = harness_efficiency()
    ok_eff = eff >= 0.90
    print(
        f"matmul: harness efficiency (ours / bare numpy.dot, float64 n={N}) = {eff:.3f} [target >= 0.90] {'ok' if ok_eff else 'MISSED'}"
    )
    over = tracking_overhead()
    ok_over = over <= 0.03
    print(
        f"matmul: tracking overhead (mlflow server / no-op tracker) = {over * 100:+.1f} % [target <= 3 %] {'ok' if ok_over else 'MISSED'}"
    )
    return 0 if ok_eff and ok_over else 1


if __name__ == "__main__":
    sys.exit(main())
