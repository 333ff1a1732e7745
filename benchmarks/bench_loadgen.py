"""LoadGen through devicebench against a bare LoadGen harness: what devicebench's system under test
(the batching worker, the sample library, the detail log read back) costs a SingleStream p90.

The same resnet18 at 3x64x64, in-process, no MLflow, in this process: a bare harness of LoadGen's own
demo's shape (`bare_p90`: the SUT completes each query on LoadGen's thread) and devicebench's
`workloads.serving.drive`, alternated `ROUNDS` times. Printed: each side's median p90 and their ratio,
bare over devicebench. Target: >= 0.95 (devicebench at most about 5 % slower at the p90).
"""

from __future__ import annotations

import re
import statistics
import tempfile
from pathlib import Path

import mlperf_loadgen as lg
import torch
import torchvision

from devicebench.config.workloads import InferConfig
from devicebench.workloads.serving import drive, in_process

ROUNDS = 3
TARGET = 0.95
SHAPE = (3, 64, 64)
SECONDS = 3.0


def bare_p90(model: torch.nn.Module, xs: torch.Tensor, out: Path) -> float:
    """The bare harness: LoadGen, a forward per query, its summary's p90."""

    def issue(queries: list) -> None:
        for q in queries:
            with torch.inference_mode():
                model(xs[q.index : q.index + 1]).cpu()
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in queries])

    settings = lg.TestSettings()
    settings.scenario, settings.mode = lg.TestScenario.SingleStream, lg.TestMode.PerformanceOnly
    settings.min_duration_ms, settings.min_query_count = int(SECONDS * 1000), 100
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(len(xs), len(xs), lambda _: None, lambda _: None)
    log = lg.LogOutputSettings()
    log.outdir, log.copy_summary_to_stdout = str(out), False
    logs = lg.LogSettings()
    logs.log_output = log
    lg.StartTestWithLogSettings(sut, qsl, settings, logs)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    text = (out / "mlperf_log_summary.txt").read_text()
    return float(re.search(r"^90.0th percentile latency \(ns\)\s*:\s*(\d+)", text, re.M).group(1)) * 1e-9


def devicebench_p90(model: torch.nn.Module, xs: torch.Tensor, out: Path) -> float:
    cfg = InferConfig(scenarios=("single_stream",), min_duration_s=SECONDS, min_queries=100)
    predict = in_process(model, xs, torch.device("cpu"), None)
    return drive(cfg, predict, "in_process", 1, out).outcomes["single_stream"].p90_s


def main() -> int:
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    xs = torch.randn(64, *SHAPE)
    sides: dict[str, list[float]] = {"bare": [], "devicebench": []}
    with tempfile.TemporaryDirectory(prefix="devicebench-loadgen-bench-") as tmp:
        for i in range(ROUNDS):
            for name, fn in (("bare", bare_p90), ("devicebench", devicebench_p90)):
                folder = Path(tmp) / f"{name}{i}"
                folder.mkdir()
                sides[name].append(fn(model, xs, folder))
    bare, ours = (statistics.median(sides[k]) for k in ("bare", "devicebench"))
    ratio = bare / ours
    print(
        f"LoadGen SingleStream p90, resnet18 3x64x64: bare {bare * 1e3:.2f} ms, devicebench {ours * 1e3:.2f} ms"
    )
    print(
        f"  each round: bare {[round(x * 1e3, 2) for x in sides['bare']]} ms, devicebench {[round(x * 1e3, 2) for x in sides['devicebench']]} ms"
    )
    print(
        f"  ratio bare/devicebench {ratio:.3f} (target >= {TARGET}): {'ok' if ratio >= TARGET else 'MISSED'}"
    )
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
