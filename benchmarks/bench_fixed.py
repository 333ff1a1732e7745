"""The fixed cost of a run: what a tiny cifar run pays beyond its training and evaluation (issues 39, 62).

`python -m benchmarks.bench_fixed [cpu|cuda]` (`make bench`: cpu; `make gpu-check`: cuda, where a run
also pays for its CUDA context). A tiny run (256 synthetic images, one epoch) is timed as a whole
process, cold (`python -m devicebench cifar`, as a person starts it) and warm (forked from the server a
plan's runs start from, handed the store the plan checked, as `suite` runs it). Its fixed cost is the
process's wall time minus the `time/train_s` and `time/eval_s` it logged, printed against a bare
`python -c "import torch"`; the cold runs alternate with the bare import and a bare training script
(import torch, one optimizer step: torch.optim imports torch._dynamo on it, the least any cold training
process pays), so a host whose speed drifts moves all three alike. The phases each run logged
(`time/start_s`, `store_s`, `host_s`, `artifacts_s`, `end_s`) say where the rest went. Targets: a cold
run's fixed cost <= 3x the bare import (issue 62), a warm one's <= 3 s (issue 39); exit 1 if either
is missed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from benchmarks import BadArgument, check_ran, exit_with
from devicebench.host.cpu import cpu_model
from devicebench.plan.handoff import Handoff, store_mark
from devicebench.plan.warm import WARM_MODULES
from devicebench.util.forkserver import ForkServer

TARGET_S = 3.0
RUNS = 3  # warm runs; the median is the figure
COLD_ROUNDS = 5  # rounds of (bare import, bare training script, cold run), alternated
COLD_TARGET = 3.0  # a cold run's fixed cost, in bare `import torch`s of the same sitting
DEVICES = ("cpu", "cuda")
TINY = ["cifar", "--data", "synthetic", "--train_limit", "256", "--test_limit", "64", "--epochs", "1"]
PHASES = ("start", "store", "host", "artifacts", "end")


# The least any cold training process pays before its first real step: torch, then one optimizer step
# on the device, which imports torch._dynamo (torch.optim's step wrapper does, compiling or not: 1.3-1.6 s
# here) and on cuda creates the CUDA context.
BARE_TRAINING = (
    "import torch; p = torch.zeros(1, requires_grad=True, device={device!r}); "
    "o = torch.optim.SGD([p], lr=0.1); p.sum().backward(); o.step(); p.sum().item()"
)


def bare_s(code: str = "import torch") -> float:
    """A bare `python -c CODE`: by default `import torch`, the smallest thing a run could cost."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def bench_env(workdir: Path) -> dict[str, str]:
    """The tiny runs' environment: an embedded store of their own in `workdir`, no .env read."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "DEVICEBENCH_EXPERIMENT": "bench-fixed",
        "DEVICEBENCH_SPOOL_DIR": str(workdir / "spool"),
        "DEVICEBENCH_DOTENV": "none",
    }


def _last_run(env: dict[str, str]) -> dict[str, float]:
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(env["DEVICEBENCH_EXPERIMENT"])
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)[0]
    return run.data.metrics


def fixed_cold(env: dict[str, str], workdir: Path, tiny: list[str]) -> tuple[float, dict[str, float]]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "devicebench", *tiny],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    check_ran("bench_fixed", "a tiny run", proc.returncode, proc.stderr)
    m = _last_run(env)
    return wall - m["time/train_s"] - m["time/eval_s"], m


def fixed_warm(
    server: ForkServer, env: dict[str, str], workdir: Path, tiny: list[str]
) -> tuple[float, dict[str, float]]:
    t0 = time.perf_counter()
    child = server.start("devicebench", tiny, env, workdir)
    _, err = child.communicate(600)
    wall = time.perf_counter() - t0
    check_ran("bench_fixed", "a tiny run", child.returncode, err)
    m = _last_run(env)
    return wall - m["time/train_s"] - m["time/eval_s"], m


def _line(
    kind: str, device: str, results: list[tuple[float, dict[str, float]]], bare: float
) -> tuple[str, float]:
    fixed, metrics = sorted(results, key=lambda r: r[0])[len(results) // 2]
    phases = ", ".join(f"{p} {metrics.get(f'time/{p}_s', float('nan')):.2f}" for p in PHASES)
    low, high = min(r[0] for r in results), max(r[0] for r in results)
    line = (
        f"fixed cost: tiny cifar run on {device}, {kind}: {fixed / bare:.2f}x a bare `import torch` "
        f"({fixed:.2f} s vs {bare:.2f} s; range {low:.2f}-{high:.2f} s over "
        f"{len(results)} runs; phases of the median one, s: {phases})"
    )
    return line, fixed


def main(device: str = "cpu") -> int:
    if device not in DEVICES:
        raise BadArgument(f"bench_fixed: device {device!r} is not allowed; allowed: {', '.join(DEVICES)}")
    tiny = [*TINY, "--device", device]
    with tempfile.TemporaryDirectory(prefix="bench-fixed-") as d:
        workdir = Path(d)
        env = bench_env(workdir)
        server = ForkServer(WARM_MODULES, env)
        try:
            fixed_cold(env, workdir, tiny)  # creates the store, as a first run anywhere does: not counted
            cold, bare, floor = [], [], []
            for _ in range(COLD_ROUNDS):  # alternated, so a host that slows down mid-bench moves all three
                bare.append(bare_s())
                floor.append(bare_s(BARE_TRAINING.format(device=device)))
                cold.append(fixed_cold(env, workdir, tiny))
            server.ready()
            mark = store_mark(env["MLFLOW_TRACKING_URI"], time.time())
            warm_env = Handoff("", "", "", "", "", True, mark).env(env)
            for k in ("DEVICEBENCH_SUITE", "DEVICEBENCH_PARENT_RUN_ID", "MLFLOW_EXPERIMENT_ID"):
                warm_env.pop(k, None)  # a plain run, handed only the store the plan checked
            warm = [fixed_warm(server, warm_env, workdir, tiny) for _ in range(RUNS)]
        finally:
            server.close()
    bare_med, floor_s = statistics.median(bare), statistics.median(floor)
    cold_line, cold_s = _line("cold process", device, cold, bare_med)
    warm_line, warm_s = _line("forked from a plan's warm server", device, warm, bare_med)
    cold_ok, warm_ok = cold_s <= COLD_TARGET * bare_med, warm_s <= TARGET_S
    print(cold_line)
    print(
        f"fixed cost: a bare training script (import torch, one SGD step on {device}) takes {floor_s:.2f} s = "
        f"{floor_s / bare_med:.2f}x a bare `import torch`: no cold training process here starts for less; the "
        f"cold run's fixed cost is {cold_s / floor_s:.2f}x it (MLflow, its SQLite store and model logging "
        f"on top). A cold run's target: <= {COLD_TARGET:.0f}x a bare `import torch` "
        f"[{'ok' if cold_ok else 'MISSED'}]; cpu {cpu_model()}, {os.cpu_count()} cores"
    )
    print(f"{warm_line} [target <= {TARGET_S:.0f} s] {'ok' if warm_ok else 'MISSED'}", flush=True)
    return 0 if cold_ok and warm_ok else 1


if __name__ == "__main__":
    exit_with(main, *sys.argv[1:2])
