"""Fidelity, stability and tracking overhead of the matmul workload, each a ratio measured in one run.

* fidelity: for torch and NumPy, float64 and float32, n = 512, 1024, 2048 on the CPU, the GFLOP/s that
  `devicebench matmul` logs (both backends in one run) against the same product timed in a fresh
  process that runs nothing else (target >= 0.95 at every point); the same figure with
  `isolation=none` is printed beside it, to show what the isolation removes;
* warm fidelity: the same points from runs forked from a plan's warm server against cold processes,
  a low point weighed against how often random arms of the same runs read as low (this sitting's noise);
* stability: five `devicebench matmul --sizes 256 --dtypes float32` runs, each backend's five medians
  within ±10 % of their median, beside the bare product's spread over five fresh processes;
* tracking overhead: the matmul workload tracked into a real local `mlflow server` against the same
  workload with a no-op tracker, run start and end included (target <= 3 %).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from mlflow.tracking import MlflowClient

from benchmarks import check_ran, deviation, exit_with
from devicebench.config.fields import build_config, to_params
from devicebench.config.settings import load_settings
from devicebench.host.context import Context
from devicebench.plan.warm import warm_server
from devicebench.tracking.protocol import null_tracker
from devicebench.tracking.runs import run_context
from devicebench.util.forkserver import ForkServer
from devicebench.workloads.matmul import Config
from testbed.mlflow_server import MlflowServer

SIZES = (512, 1024, 2048)
DTYPES = ("float64", "float32")
BACKENDS = ("numpy", "torch")

# The reference: one product, bare, in an interpreter that has done nothing else. No devicebench code.
FRESH = """
import statistics, sys, time
import numpy as np
backend, dtype, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)
a, b = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
out = np.empty_like(a)
if backend == "torch":
    import torch
    a, b, out = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
    f = lambda: torch.mm(a, b, out=out)
else:
    f = lambda: np.dot(a, b, out=out)
f()
ts, stop = [], time.perf_counter() + 0.5
while len(ts) < 5 or time.perf_counter() < stop:
    t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
print(2 * n**3 / statistics.median(ts) / 1e9)
"""


def fresh_gflops(backend: str, dtype: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FRESH, backend, dtype, str(n)], capture_output=True, text=True
    )
    check_ran("bench_matmul", f"the fresh {backend} {dtype} n={n} product", out.returncode, out.stderr)
    return float(out.stdout.strip())


def cli_runs(
    args: list[str], times: int, workdir: Path, server: ForkServer | None = None
) -> list[dict[tuple[str, str, int], float]]:
    """`devicebench matmul ARGS` run `times` times into an embedded store (each a fresh process, or a
    fork of `server`, as a plan starts its runs); GFLOP/s per point of each run."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "DEVICEBENCH_EXPERIMENT": "bench-matmul",
        "DEVICEBENCH_SPOOL_DIR": str(workdir / "spool"),
    }
    for _ in range(times):
        if server is None:
            cmd = [sys.executable, "-m", "devicebench", "matmul", *args]
            proc = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True)
            code, err = proc.returncode, proc.stderr
        else:
            child = server.start("devicebench", ["matmul", *args], {**server.env, **env}, workdir)
            _, err = child.communicate()
            code = child.returncode
        check_ran("bench_matmul", f"a {'warm' if server else 'cold'} matmul run", code, err)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("bench-matmul")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])[-times:]
    out = []
    for r in runs:
        points = {}
        for b in BACKENDS:
            for d in DTYPES:
                for m in client.get_metric_history(r.info.run_id, f"matmul/{b}/{d}/gflops"):
                    points[(b, d, m.step)] = m.value
        out.append(points)
    return out


def fidelity(workdir: Path) -> tuple[float, float]:
    """(worst ratio with isolation=process, worst with isolation=none) against fresh processes."""
    sizes, dtypes = ",".join(map(str, SIZES)), ",".join(DTYPES)
    (isolated,) = cli_runs(["--sizes", sizes, "--dtypes", dtypes], 1, workdir)
    (shared,) = cli_runs(["--sizes", sizes, "--dtypes", dtypes, "--isolation", "none"], 1, workdir)
    worst = {"process": 1e9, "none": 1e9}
    for point in sorted(isolated):
        ref = fresh_gflops(*point)
        worst["process"] = min(worst["process"], isolated[point] / ref)
        worst["none"] = min(worst["none"], shared[point] / ref)
        print(
            f"  {point[0]:5} {point[1]:7} n={point[2]:<5} fresh {ref:7.1f}  logged {isolated[point]:7.1f} "
            f"({isolated[point] / ref:.3f})  isolation=none {shared[point]:7.1f} ({shared[point] / ref:.3f})"
        )
    return worst["process"], worst["none"]


WARM_ROUNDS = 8  # a warm run and two cold ones per round, their order turned each round
WARM_WORST, WARM_POOLED = 0.97, 0.98  # issue 39: >= 0.97 of a fresh process; "within 2 %"
NOISE = 0.05  # a figure as low in this share of random splits of the same runs is the host's noise

Runs = list[dict[tuple[str, str, int], float]]


@dataclass(frozen=True)
class Arms:
    """Warm runs over cold ones, each point the median of its arm's runs: the worst of the 12 points and
    all points pooled (their geometric mean), each with its chance: the share of random splits of the
    same runs into an arm as large as the warm one and the rest that read as low."""

    worst: float
    pooled: float
    worst_chance: float
    pooled_chance: float


def medians(runs: Runs) -> dict[tuple[str, str, int], float]:
    """Each point's median over `runs`."""
    return {p: statistics.median(r[p] for r in runs) for p in runs[0]}


def point_ratios(warm: Runs, cold: Runs) -> list[float]:
    """Per point, in sorted order, the median of `warm` over the median of `cold`."""
    w, c = medians(warm), medians(cold)
    return [w[p] / c[p] for p in sorted(c)]


def arms(warm: Runs, cold: Runs, tries: int = 2000) -> Arms:
    """The figures of `warm` over `cold`, and how often a random arm of len(warm) runs drawn from all of
    them reads as low: if warm runs cost nothing they are as any other runs, and that is often. The
    worst point is the lowest of twelve noisy ratios, so its chance is judged over all twelve at once."""
    ratios = point_ratios(warm, cold)
    worst, pooled = min(ratios), statistics.geometric_mean(ratios)
    runs, rng, k = [*warm, *cold], random.Random(0), len(warm)
    low_worst = low_pooled = 0
    for _ in range(tries):
        rng.shuffle(runs)
        split = point_ratios(runs[:k], runs[k:])
        low_worst += min(split) <= worst
        low_pooled += statistics.geometric_mean(split) <= pooled
    return Arms(worst, pooled, low_worst / tries, low_pooled / tries)


def warm_fidelity(workdir: Path) -> Arms:
    """Runs forked from a plan's warm server against cold processes: `WARM_ROUNDS` warm runs and twice
    as many cold ones, the order turned each round so a neighbour's load or a slow spell of the host
    falls on each arm alike.

    On the 2-core VM one cold run's point lies anywhere in 0.4-1.4x of its median (2026-11-28), with a
    fast mode as well as slow ones, so no count of runs one sitting can afford holds a point to 3 %: over
    every 4 of 8 rounds in one sitting, two cold arms met the worst-point target 39 % of the time by
    their bests (40 % by medians); by medians of 8 their worst point read 0.974, 0.946 and 0.986 in
    three sittings. Warm over cold, all points pooled, read 1.017, 1.002, 0.960 and 1.041 in four
    sittings (chance 21-86 %); their 32 warm and 64 cold runs together, each over its own sitting's cold
    medians, read 1.002 pooled and 0.974 at the worst point. So each figure is weighed against the runs'
    own spread (`arms`). Run on two sittings' runs with a cost added to every warm run, it finds 15 % at
    one point (chance 0.5 % and 4.4 %) and not 10 % (9-10 %); the GC walk `gc.freeze` removed put n=512
    at 0.85 in each."""
    sizes, dtypes = ",".join(map(str, SIZES)), ",".join(DTYPES)
    args = ["--sizes", sizes, "--dtypes", dtypes]
    warm: Runs = []
    cold: Runs = []
    with warm_server(dict(os.environ)) as server:
        assert server is not None and server.ready() == 1, "no warm server to measure"
        slots = [True, False, False]  # warm, cold, cold
        for i in range(WARM_ROUNDS):
            for is_warm in slots[i % 3 :] + slots[: i % 3]:
                if is_warm:
                    warm += cli_runs(args, 1, workdir, server)
                else:
                    cold += cli_runs(args, 1, workdir)
    c, w = medians(cold), medians(warm)
    for point in sorted(c):
        print(
            f"  {point[0]:5} {point[1]:7} n={point[2]:<5} cold {c[point]:7.1f}  warm {w[point]:7.1f} "
            f"({w[point] / c[point]:.3f})"
        )
    return arms(warm, cold)


def warm_verdict(a: Arms) -> tuple[bool, str]:
    """ok where both targets are met. A figure under its target that random arms of the same runs read
    as low at least `NOISE` of the time is this sitting's noise, not a cost of the warm start: the line
    says it was not judged, and how often. Otherwise it is MISSED."""
    missed = [
        (name, chance)
        for name, figure, target, chance in (
            ("all points", a.pooled, WARM_POOLED, a.pooled_chance),
            ("worst point", a.worst, WARM_WORST, a.worst_chance),
        )
        if figure < target
    ]
    if any(chance < NOISE for _, chance in missed):
        return False, "MISSED"
    if not missed:
        return True, "ok"
    said = "; ".join(
        f"{name} not judged: random arms of the same runs read as low {c:.0%} of the time"
        for name, c in missed
    )
    return True, said


STABLE = 0.10  # each run's median within ±10 % of the five runs' median


def stability(workdir: Path) -> tuple[float, float]:
    """(the largest deviation of one of five runs' medians from their median, over both backends; the
    same of the bare product in five fresh processes that run nothing else, alternating with the runs).

    The second is this sitting's noise: on the 2-core VM (2026-11-25) NumPy float32 at n=256 read 113,
    120, 166, 181, 182 and 183 GFLOP/s bare in six fresh processes, as bimodal as the logged runs beside
    them (115-186): a 0.2 ms product on two BLAS threads, one of them sharing its core with the host's
    own services for the process's whole 0.2 s of samples, or not."""
    runs: list[dict[tuple[str, str, int], float]] = []
    bare: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(5):
        runs += cli_runs(["--sizes", "256", "--dtypes", "float32"], 1, workdir)
        for b in BACKENDS:
            bare[b].append(fresh_gflops(b, "float32", 256))
    worst, noise = 0.0, 0.0
    for b in BACKENDS:
        values = [r[(b, "float32", 256)] for r in runs]
        worst, noise = max(worst, deviation(values)), max(noise, deviation(bare[b]))
        print(
            f"  {b:5} float32 n=256 GFLOP/s of five runs: {', '.join(f'{v:.1f}' for v in values)}; "
            f"bare, fresh: {', '.join(f'{v:.1f}' for v in bare[b])}"
        )
    return worst, noise


def stability_verdict(spread: float, noise: float) -> str:
    """ok within ±10 %; where the bare product itself spread beyond ±10 % in the same sitting, the target
    cannot be judged there, and the line says so rather than blame devicebench for the host (a slow
    process lands in either arm: in two sittings here it hit the bare arm twice in six, then the logged
    arm once in five with the bare arm at ±13.5 %); MISSED where only devicebench's runs spread."""
    if spread <= STABLE:
        return "ok"
    if noise > STABLE:
        return "not judged: the bare product spread beyond the target in this sitting too"
    return "MISSED"


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
    with tempfile.TemporaryDirectory() as d:
        iso, shared = fidelity(Path(d))
        ok_iso = iso >= 0.95
        print(
            f"matmul: fidelity (logged / fresh process, worst of {len(SIZES) * 4} CPU points) = {iso:.3f} "
            f"[target >= 0.95]; with isolation=none: {shared:.3f} {'ok' if ok_iso else 'MISSED'}"
        )
        warm = warm_fidelity(Path(d))
        ok_warm, said = warm_verdict(warm)
        print(
            f"matmul: forked from a plan's warm server / cold process, medians of {WARM_ROUNDS} and "
            f"{2 * WARM_ROUNDS} runs: all points {warm.pooled:.3f} [target >= {WARM_POOLED}], "
            f"worst point {warm.worst:.3f} [target >= {WARM_WORST}] {said}"
        )
        spread, noise = stability(Path(d))
        said = stability_verdict(spread, noise)
        ok_spread = said != "MISSED"
        print(
            f"matmul: stability (five runs at n=256, worst deviation from their median) = ±{spread:.1%} "
            f"[target <= {STABLE:.0%}]; the bare product in five fresh processes: ±{noise:.1%} {said}"
        )
    over = tracking_overhead()
    ok_over = over <= 0.03
    print(
        f"matmul: tracking overhead (mlflow server / no-op tracker) = {over * 100:+.1f} % [target <= 3 %] {'ok' if ok_over else 'MISSED'}"
    )
    return 0 if ok_iso and ok_warm and ok_spread and ok_over else 1


if __name__ == "__main__":
    exit_with(main)
