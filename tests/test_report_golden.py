"""The report's every output for one planted store, byte for byte: report.md, report.html (charts
left out: their pixels are matplotlib's), runs.csv, the terminal table, `--budget`, and the report
run's name, description and metrics.

The planted runs cover what the report does: CPU/GPU pairs over a width × batch grid (crossover),
a tuned CPU side (the best CPU) and a tuned GPU side (each device at its best), prices in two shapes and an illustrative one, a matmul sweep, a
scaling series, two hosts (the per-host tables), regressions against earlier nights, unfinished and
unpaired runs. A change to the report's structure must leave these files as they are; a change to
what it says updates them on purpose (`DEVICEBENCH_GOLDEN_UPDATE=1 pytest tests/test_report_golden.py`)
and the diff of tests/golden/ shows it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from devicebench.report.command import budget_text
from devicebench.report.judge.judgement import judge
from devicebench.report.model.comparison import compare
from devicebench.report.read.records import RunRecord
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import headline_metrics, report_name, summary_note
from devicebench.report.render.terminal import terminal_table
from devicebench.schema import matmul_point_key

GOLDEN = Path(__file__).resolve().parent / "golden"
META = {"tracking store": "sqlite:///golden.db", "experiments": "1 run", "baseline": "previous"}
READ = "read 65 runs from 1 experiment: golden (65)"


class Planted:
    """Deterministic runs: ids and start times count up in the order they are made."""

    def __init__(self) -> None:
        self.runs: list[RunRecord] = []

    def add(
        self,
        device: str,
        key: str,
        metrics: dict[str, float],
        *,
        workload: str = "cifar",
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
        host: str = "A",
        status: str = "FINISHED",
        history: dict[str, dict[int, float]] | None = None,
    ) -> None:
        i = len(self.runs)
        cpu = device.startswith("cpu")
        base_tags = {
            "workload": workload,
            "device": device.split(":")[0],
            "device.resolved": device,
            "device.name": "EPYC 9J14" if cpu else "NVIDIA A10",
            "config_key": key,
            "work_key": key.split("~")[0],
            "data": "synthetic",
            "host.label": f"host-{host}",
            "host.cpu_model": "EPYC 9J14",
            "host.gpu_name": "NVIDIA A10",
            "host.gpu_capability": "8.6",
            "host.torch_threads": "8",
            "host.blas_threads": "8",
            **(tags or {}),
        }
        self.runs.append(
            RunRecord(
                run_id=f"run{i:03d}",
                status=status,
                start_time=1_700_000_000_000 + i * 60_000,
                tags={f"devicebench.{k}": v for k, v in base_tags.items()},
                params={"epochs": "2", "loader": "dataloader", "num_workers": "2", **(params or {})},
                metrics=metrics,
                experiment_id="1",
                run_name=f"golden-{i}",
                history=history or {},
            )
        )


def priced(shape: str, usd: float, source: str = "table:prices.yaml", units: str = "") -> dict[str, str]:
    """A run's price tags as a run logs them: per use (`units`, "as if" for a CPU side off a CPU shape);
    a price set by hand has no shape and no units."""
    tags = {
        "price.usd_per_hour": f"{usd}",
        "price.currency": "USD",
        "price.source": source,
        "price.shape": shape,
    }
    if units:
        tags |= {"price.units": units, "price.as_if": "true" if "OCPU" in units else ""}
    return {k: v for k, v in tags.items() if v}


CPU_AS_IF = ("VM.Standard.E5.Flex", 0.126, "table:prices.yaml", "4 OCPUs + 3 GB")  # 8 threads, 2.5 GB
A10 = ("VM.GPU.A10.1", 2.0, "table:prices.yaml", "1 of its 1 GPUs")


def train(t: float, rate: float, *, wait: float = 0.0, acc: float = 0.5, usd: float | None = None) -> dict:
    m = {
        "time/train_s": t,
        "time/eval_s": t / 10,
        "time/total_s": t + 3,
        "time/data_wait_s": wait,
        "throughput/train_samples_per_s": rate,
        "eval/accuracy": acc,
        "memory/peak_rss_bytes": 2.5e9,
    }
    if usd is not None:
        m["cost/usd_per_epoch"] = usd * t / 2 / 3600
        m["cost/usd_per_1k_samples"] = usd / rate / 3.6
        m["cost/usd"] = usd * (t + 3) / 3600
        m["cost/usd_per_hour"] = usd
    return m


def cifar_grid(p: Planted) -> None:
    """A width × batch grid, CPU and A10, priced; three repeats a side at batch 4."""
    for width in ("1", "2"):
        for batch, cpu_t, gpu_t in (("4", 40.0, 20.0), ("64", 30.0, 3.0), ("256", 28.0, 1.2)):
            key = f"cifar-w{width}-b{batch}"
            params = {"width": width, "batch_size": batch}
            reps = 3 if batch == "4" else 1
            for r in range(reps):
                jitter = 1 + 0.02 * r
                p.add("cpu", key, train(cpu_t * jitter, 50000 / cpu_t, usd=0.126), params=params,
                      tags=priced(*CPU_AS_IF))  # fmt: skip
                gpu = train(gpu_t * jitter, 50000 / gpu_t, wait=gpu_t * 0.6 if batch == "256" else 0.1,
                            usd=2.0)  # fmt: skip
                gpu["util/peak_fraction"] = 0.002 if batch == "4" else 0.2
                gpu["memory/peak_bytes"] = 1.5e9
                p.add("cuda:0", key, gpu, params=params,
                      tags={**priced(*A10), "util.dtype": "tf32"})  # fmt: skip
    # the CPU at its best for width 1, batch 64: threads and data in memory, a tuned run
    p.add("cpu", "cifar-w1-b64~tensor", train(12.0, 50000 / 12.0, usd=0.064),
          params={"width": "1", "batch_size": "64", "loader": "tensor", "num_workers": "0"},
          tags={**priced("VM.Standard.E5.Flex", 0.064, "table:prices.yaml", "2 OCPUs + 2 GB"), "tuned": "true",
                "tuned.setting": "4 threads, data in memory"})  # fmt: skip
    # the GPU at its best for the same work: data in memory, compiled with CUDA graphs, bf16 (reduced
    # precision, so its accuracy is set beside the GPU's own at full precision), a tuned run
    best = train(0.8, 50000 / 0.8, acc=0.48, usd=2.0)
    best["time/compile_s"] = 40.0
    p.add("cuda:0", "cifar-w1-b64~gpu-best", best,
          params={"width": "1", "batch_size": "64", "loader": "tensor", "num_workers": "0", "compile": "true",
                  "compile_mode": "reduce-overhead", "precision": "bf16"},
          tags={**priced(*A10), "tuned": "true", "tuned.eager_median_samples_per_s": "20000",
                "tuned.setting": "data in memory, compiled with CUDA graphs, bf16 autocast (reduced precision)",
                "tuned.reduced_precision": "true"})  # fmt: skip


def unet_and_oddities(p: Planted) -> None:
    """unet loader-bound on the GPU; an oversubscribed CPU; strict fp32 on a TF32 GPU; a lone config."""
    params = {"batch_size": "16", "image_size": "256", "precision": "fp32"}
    over = {"cpu.oversubscribed": "true", "cpu.busy_threads": "12", "cpu.usable_cores": "8"}
    for r in range(2):
        m = train(300.0 + r, 20.0, acc=0.0)
        del m["eval/accuracy"]
        m["eval/miou"] = 0.31
        p.add("cpu", "unet-1", m, workload="unet", params=params, tags=over)
        g = train(60.0 + r, 100.0, wait=45.0, acc=0.0)
        del g["eval/accuracy"]
        g["eval/miou"] = 0.42
        p.add("cuda:0", "unet-1", g, workload="unet", params=params, tags={"fp32_math": "ieee"})
    # no GPU side yet, but a GPU shape to weigh it against (price_shape): the break-even line
    weigh = {**priced(*CPU_AS_IF), "price.gpu_shape": "VM.GPU.A10.1", "price.gpu_usd_per_hour": "2"}
    p.add(
        "cpu",
        "cifar-lonely",
        train(9.0, 900.0, usd=0.126),
        params={"width": "4", "batch_size": "32"},
        tags=weigh,
    )


def matmul(p: Planted) -> None:
    """A matmul sweep on both devices with flat per-size points, priced."""
    for device, t_np, t_torch in (("cpu", 0.020, 0.012), ("cuda:0", 0.021, 0.0004)):
        m: dict[str, float] = {"time/total_s": 9.0}
        hist: dict[str, dict[int, float]] = {}
        for size, scale in ((1024, 1.0), (4096, 50.0)):
            for backend, t in (("numpy", t_np), ("torch", t_torch)):
                key = f"matmul/{backend}/float32/time_s"
                hist.setdefault(key, {})[size] = t * scale
                m[matmul_point_key(backend, "float32", size, "time_s")] = t * scale
                if backend == "torch" and device != "cpu":
                    u = f"matmul/{backend}/float32/unsynced_time_s"
                    hist.setdefault(u, {})[size] = t * scale / 40
                    m[matmul_point_key(backend, "float32", size, "unsynced_time_s")] = t * scale / 40
        shape = (
            ("VM.Standard.E5.Flex", 0.248, "table:prices.yaml", "8 OCPUs + 4 GB") if device == "cpu" else A10
        )
        p.add(device, "mm-1", m, workload="matmul", params={"sizes": "1024,4096", "repeats": "5"},
              tags=priced(*shape), history=hist)  # fmt: skip


def scaling(p: Planted) -> None:
    """One config at 1, 2 and 4 GPUs, and at 2 CPU processes beside a CPU run of 1."""
    for n, rate, comm in ((1, 1000.0, None), (2, 1500.0, 0.05), (4, 1800.0, 0.3)):
        m = train(50000 / rate, rate, usd=2.0 * n)
        if comm is not None:
            m["dist/comm_share"] = comm
        used = priced("BM.GPU.A10.4", 2.0 * n, units=f"{n} of its 4 GPUs")
        p.add("cuda:0", "cifar-ddp", m, params={"batch_size": "128", "width": "8"},
              tags={"world_size": str(n), "host.gpu_count": "4", **used}, host="B")  # fmt: skip
    # the CPU side on the same host, priced as the CPU shape that gives it its cores
    p.add("cpu", "cifar-ddp", train(500.0, 100.0, usd=CPU_AS_IF[1]), params={"batch_size": "128", "width": "8"},
          tags=priced(*CPU_AS_IF), host="B")  # fmt: skip


def nights(p: Planted) -> None:
    """Three earlier nights of a suite and a slower newest one: a regression; and unfinished runs."""
    for night, t in enumerate((10.0, 10.2, 9.9, 13.0)):
        for device, scale in (("cpu", 4.0), ("cuda:0", 1.0)):
            shape = (
                (*CPU_AS_IF[:2], "illustrative", CPU_AS_IF[3])
                if device == "cpu"
                else (*A10[:2], "illustrative", A10[3])
            )
            p.add(device, "cifar-nightly", train(t * scale, 5000 / (t * scale), usd=shape[1]),
                  params={"batch_size": "512", "width": "1"},
                  tags={**priced(*shape), "suite": f"nightly:{night}"},
                  host="B")  # fmt: skip
    p.add("cuda:0", "cifar-w1-b4", {}, params={"width": "1", "batch_size": "4"}, status="FAILED",
          tags={"error": "RuntimeError: CUDA out of memory"})  # fmt: skip
    p.add("cpu", "cifar-w1-b4", {}, params={"width": "1", "batch_size": "4"}, status="KILLED")


def planted_runs() -> list[RunRecord]:
    p = Planted()
    cifar_grid(p)
    unet_and_oddities(p)
    matmul(p)
    scaling(p)
    nights(p)
    return p.runs


def outputs(tmp_path: Path) -> dict[str, str]:
    """Every output of the report for the planted runs, as text, by file name."""
    judged = judge(compare(planted_runs(), baseline="previous", threshold=0.1))
    comp = judged.comp
    out = tmp_path / "report"
    write_report(judged, out, META)
    html = (out / "report.html").read_text()
    metrics = headline_metrics(comp)
    return {
        "report.md": (out / "report.md").read_text(),
        "report.html": re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,…", html),
        "runs.csv": (out / "runs.csv").read_text(),
        "terminal.txt": terminal_table(judged) + "\n",
        "budget.txt": budget_text(judged) + "\n",
        "report_run.txt": report_name(comp, "golden")
        + "\n\n"
        + summary_note(judged, READ, metrics=metrics)
        + "\n",
        "metrics.json": json.dumps(metrics, indent=1, sort_keys=True) + "\n",
        "charts.txt": "\n".join(sorted(p.name for p in out.glob("*.png"))) + "\n",
    }


def test_the_report_says_exactly_what_the_golden_files_say(tmp_path: Path) -> None:
    got = outputs(tmp_path)
    if os.environ.get("DEVICEBENCH_GOLDEN_UPDATE") == "1":
        GOLDEN.mkdir(exist_ok=True)
        for name, text in got.items():
            (GOLDEN / name).write_text(text, encoding="utf-8")
        pytest.skip("golden files written")
    for name, text in got.items():
        assert text == (GOLDEN / name).read_text(encoding="utf-8"), f"tests/golden/{name} differs"


def test_each_config_s_break_even_is_said_once_in_report_md() -> None:
    """A price's break-even read three times per config (its answer, the verdicts under the tables, the
    price section): each config says it once, in its answer or, where another verdict leads, below."""
    said: dict[str, int] = {}
    config = ""
    for line in (GOLDEN / "report.md").read_text().splitlines():
        if line.startswith("- "):  # an answer's or a pair's lead: the config is named before its first colon
            config = line[2:].split(":")[0]
        elif not line.startswith("  - "):
            config = line.split(":")[0] if ": " in line and not line.startswith(("|", "#")) else ""
        if "break-even" in line:
            said[config] = said.get(config, 0) + 1
    assert said and all(n == 1 for n in said.values()), said
