"""`devicebench tune`: the measured run against the trial that chose it, one ratio taken alone.

`tune cifar` tries thread counts and ways of feeding data within a budget, then measures the fastest
setting in a fresh process of its own (run/workload._measure_tuned). That run must train at its trial's
rate, or the tuned CPU side a report pairs with a GPU is not the CPU at its best. Alone, 0.95-1.01 of the
trial's rate was measured (2026-11-25); under `make test`'s three workers on two cores the same ratio read
0.47 and 1.5, which is why it is a benchmark's figure and not a test's (tests/test_cifar_mlflow.py checks
what holds at any speed). Printed: the measured run's samples/s over the chosen trial's median (target
>= 0.9), from `RUNS` tunes in turn, each its own process: the median one is the figure, printed with the
range. With a measured run of one epoch (0.3 s here) one tune moved too: 0.665 inside a full `make
bench`, then 0.474-1.07 over ten tunes alone (2026-11-28, the same code).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import check_ran, exit_with
from devicebench.schema import TRAIN_RATE

TARGET = 0.9
RUNS = 3  # tunes, each a process of its own; the median one is the figure
EXPERIMENT = "bench-tune"
# One epoch, as each trial trains: like for like (a measured run of three epochs read 1.00-1.42 of its
# one-epoch trial, 2026-11-28: not the same figure, and it would hide a slow measured run)
ARGS = ["--data", "synthetic", "--epochs", "1", "--batch_size", "8", "--train_limit", "1600"]
ARGS += ["--test_limit", "100", "--tune_budget_s", "30"]


def measured_over_trial(tmp: Path) -> tuple[float, str]:
    """(measured samples/s over the chosen trial's median, the chosen setting) of one `tune cifar`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp / 'mlflow.db'}",
        DEVICEBENCH_EXPERIMENT=EXPERIMENT,
        DEVICEBENCH_DOTENV="none",
        DEVICEBENCH_SPOOL_DIR=str(tmp / "spool"),
    )
    cmd = [sys.executable, "-m", "devicebench", "tune", "cifar", *ARGS]
    proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    check_ran("bench_tune", "tune cifar", proc.returncode, proc.stderr)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    (run,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    facts = {**run.data.params, **run.data.tags}  # a run's facts are tags or params (schema.RUN_TAGS)
    chosen = float(facts["devicebench.tuned.chosen_median_samples_per_s"])
    return run.data.metrics[TRAIN_RATE] / chosen, facts["devicebench.tuned.setting"]


def main() -> int:
    results = []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="devicebench-tune-") as tmp:
            results.append(measured_over_trial(Path(tmp)))
    results.sort()
    ratio, setting = results[len(results) // 2]
    ok = ratio >= TARGET
    print(
        f"tune: the measured run / its trial ({setting}) = {ratio:.3f} (range {results[0][0]:.3f}-"
        f"{results[-1][0]:.3f} over {RUNS} tunes) [target >= {TARGET}] {'ok' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    exit_with(main)
