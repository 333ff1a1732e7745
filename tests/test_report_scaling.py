"""Scaling in the report (issue 18): runs of one config at world sizes 1/2/4/8, planted into a real
(embedded SQLite) store with the schema the data-parallel runs log, read back by `compare` in-process:
the series, its exact efficiencies and verdicts, the report run's metrics, scaling.png, a series without
a run of 1, and CPU/GPU pairs that never mix world sizes. A few rules are pinned on plain data too.

Runs are planted by the compare benchmark's writer (as test_report_store.py does) and compared by its
`compare_cli`; plain runs come from test_report_logic.py's `rec`/`train`.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_report_logic import rec, train
from test_report_store import compare_here

from benchmarks.bench_compare import Spec, log_runs, specs_for
from devicebench.report.judge import scaling_rules as scaling_verdicts
from devicebench.report.judge.judgement import judge
from devicebench.report.judge.scaling_rules import explain_scaling
from devicebench.report.model.comparison import compare
from devicebench.report.model.regressions import find_regressions
from devicebench.report.model.scaling import Series
from devicebench.report.read.options import Query
from devicebench.report.read.query import read_runs
from devicebench.report.read.records import RunRecord
from devicebench.report.render.files import write_report
from devicebench.report.render.tables import base_text
from devicebench.report.render.terminal import terminal_table
from servers import migrated_sqlite

SAMPLES = 100_000  # per epoch: time/train_s = SAMPLES / throughput, so pairs and series agree
GPU_SERIES = {1: (990.0, 1010.0), 2: (1880.0, 1920.0), 4: (3180.0, 3220.0), 8: (4380.0, 4420.0)}
GPU_EFFICIENCY = {1: 1.0, 2: 0.95, 4: 0.8, 8: 0.55}  # medians 1000, 1900, 3200, 4400
CPU_SERIES = {1: (100.0,), 2: (150.0,)}  # efficiency 0.75 at 2: no verdict
CPU_NO_ONE = {2: (200.0,), 4: (240.0,)}  # batch 32, no run of 1: over 2, efficiency 0.6 at 4
SERIES_NAME = "cifar batch_size_4 cuda NVIDIA A10"  # scaling/<this>/efficiency_<N>


def said(series: Series) -> list[str]:
    """Every verdict of a scaling series, smallest world size first."""
    return [line for p in series.points for line in explain_scaling(series, p)]


def median_time(throughputs: tuple[float, ...]) -> float:
    return statistics.median(SAMPLES / t for t in throughputs)


def planted(device: str, n: int, throughput: float, batch: int = 4, comm: float | None = None) -> Spec:
    """A finished cifar job of `n` processes as rank 0 logs it: world size tag and metrics, nproc and the
    global batch as params, and the config key of the work alone (nproc and the global batch are not)."""
    spec = specs_for("cifar", [device], batch=batch)[0]
    spec.params["nproc"] = str(n)
    key = spec.config_key()
    spec.params["global_batch_size"] = str(batch * n)
    spec.metrics |= {
        "throughput/train_samples_per_s": throughput,
        "time/train_s": SAMPLES / throughput,
        "time/data_wait_s": 0.0,
        "dist/world_size": float(n),
    }
    if comm is not None:
        spec.metrics["dist/comm_share"] = comm
    spec.extra_tags = {"devicebench.config_key": key}
    if n > 1:
        spec.extra_tags |= {"devicebench.world_size": str(n), "devicebench.dist.backend": "gloo"}
    return spec  # a job of 1 carries no world_size tag: as runs logged before issue 18, it counts as 1


def scaling_runs() -> list[Spec]:
    specs = [
        planted("cuda:0", n, t, comm=0.4 if n == 8 else 0.1 if n > 1 else None)
        for n, ts in GPU_SERIES.items()
        for t in ts
    ]
    specs += [planted("cpu", n, t) for n, ts in CPU_SERIES.items() for t in ts]
    specs += [planted("cpu", n, t, batch=32, comm=0.05) for n, ts in CPU_NO_ONE.items() for t in ts]
    return specs


@pytest.fixture
def sqlite_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MlflowClient, str, Path]:
    """An embedded SQLite store (no server to start) holding the planted runs, set up for `compare`."""
    for k in [k for k in os.environ if k.startswith(("MLFLOW_", "DEVICEBENCH_"))]:
        monkeypatch.delenv(k)
    uri = migrated_sqlite(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DEVICEBENCH_EXPERIMENT", "scaling")
    monkeypatch.setenv("DEVICEBENCH_DOTENV", "none")
    monkeypatch.setenv("DEVICEBENCH_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    client = MlflowClient(uri)
    exp_id = client.create_experiment("scaling", artifact_location=str(tmp_path / "artifacts"))
    log_runs(client, exp_id, scaling_runs(), workers=1)
    return client, exp_id, tmp_path


def test_planted_world_sizes_make_series_pairs_metrics_and_a_chart(sqlite_env, capsys) -> None:
    client, exp_id, tmp = sqlite_env
    comp = compare(read_runs(client, Query(experiments=("scaling",))).runs)

    gpu, cpu, cpu32 = (
        next(s for s in comp.scaling if s.device == d and s.params["batch_size"] == b)
        for d, b in (("cuda", "4"), ("cpu", "4"), ("cpu", "32"))
    )
    assert len(comp.scaling) == 3
    assert gpu.world_sizes == [1, 2, 4, 8] and gpu.base_n == 1 and gpu.unit == "GPUs"
    assert {p.world_size: p.efficiency for p in gpu.points} == pytest.approx(GPU_EFFICIENCY)
    assert [p.throughput.median for p in gpu.points] == pytest.approx([1000, 1900, 3200, 4400])
    assert {p.world_size: explain_scaling(gpu, p) for p in gpu.points} == {
        1: [],
        2: [],  # 0.95 >= 0.7
        4: [],  # 0.80
        8: [
            "communication-bound at 8 GPUs (efficiency 0.55; all-reduce up to 40% of training): "
            "larger batch or fewer processes"
        ],
    }
    assert cpu.world_sizes == [1, 2] and cpu.points[1].efficiency == pytest.approx(0.75) and not said(cpu)
    # no run of 1: the smallest world size is the base, and the table says so
    assert cpu32.base_n == 2 and base_text(cpu32) == "2 (smallest here; no run of 1)"
    assert [p.speedup for p in cpu32.points] == pytest.approx([1.0, 1.2])
    assert [p.efficiency for p in cpu32.points] == pytest.approx([1.0, 0.6])
    assert said(cpu32) == [
        "scales poorly at 4 processes (efficiency 0.60 over 2) though all-reduce took at most 5% of "
        "training: not communication; look at data wait and the slowest rank"
    ]

    # CPU/GPU pairs are like with like: 1 against 1 and 2 against 2, never across
    assert sorted((p.base.world_size, p.other.world_size) for p in comp.pairs) == [(1, 1), (2, 2)]
    for p in comp.pairs:
        assert {r.world_size for r in p.base.runs + p.other.runs} == {p.base.world_size}
    by_n = {p.base.world_size: p for p in comp.pairs}
    assert by_n[1].speedups["train"] == pytest.approx(median_time(CPU_SERIES[1]) / median_time(GPU_SERIES[1]))
    assert by_n[2].speedups["train"] == pytest.approx(median_time(CPU_SERIES[2]) / median_time(GPU_SERIES[2]))
    assert not comp.unpaired  # cuda at 4 and 8, cpu at batch 32: no partner device, but in a series

    out = tmp / "report"
    assert compare_here("scaling", "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert (
        "scaling: cifar · bs 4 on cuda (NVIDIA A10): efficiency 1.00 at 1, 0.95 at 2, 0.80 at 4, "
        "0.55 at 8 (over N=1): communication-bound at 8 GPUs" in stdout
    )
    assert (out / "scaling.png").stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "## Scaling" in md and "![throughput against world size" in md
    row = "| cifar · bs 4 | cuda (NVIDIA A10) | 8 (2) | 4,400 (4,380–4,420, n=2) | 4.40× over N=1 | 0.55 | 40% |"
    assert row in md
    assert (
        "| cifar · bs 32 | cpu (AMD EPYC 7J13) | 4 (1) | 240 | 1.20× over N=2 (smallest here; no run of 1) |"
        in md
    )
    assert "- cifar · bs 4 on cuda (NVIDIA A10), 8 processes\n  - communication-bound at 8 GPUs" in md
    assert "| cpu (AMD EPYC 7J13, 2 processes) | cuda:0 (NVIDIA A10, 2 processes) |" in md  # the N=2 pair
    html = (out / "report.html").read_text()
    assert "<h2>Scaling</h2>" in html and html.count("data:image/png;base64,") == 2  # speedup + scaling

    (report,) = client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'")
    m = report.data.metrics
    got = {k: v for k, v in m.items() if k.startswith(f"scaling/{SERIES_NAME}/")}
    assert got == pytest.approx(
        {f"scaling/{SERIES_NAME}/efficiency_{n}": e for n, e in GPU_EFFICIENCY.items()}
    )
    assert m["scaling/cifar batch_size_32 cpu AMD EPYC 7J13/efficiency_4"] == pytest.approx(0.6)
    assert m["speedup/cifar batch_size_4 cpu vs cuda_0"] == pytest.approx(by_n[1].speedups["train"])
    assert m["speedup/cifar batch_size_4 cpu vs cuda_0 2 processes"] == pytest.approx(
        by_n[2].speedups["train"]
    )
    assert "scaling.png" in {a.path for a in client.list_artifacts(report.info.run_id)}
    note = report.data.tags["mlflow.note.content"]
    assert "**scaling** cifar · bs 4 on cuda (NVIDIA A10): communication-bound at 8 GPUs" in note


# --------------------------------------------------------------------------------------------- plain data


def job(device: str, n: int, throughput: float, key: str = "k1", **more: float) -> RunRecord:
    tags = {"devicebench.world_size": str(n)} if n > 1 else {}
    metrics = train(SAMPLES / throughput, **{"throughput/train_samples_per_s": throughput, **more})
    return rec(device, key=key, metrics=metrics, tags=tags)


def test_the_verdict_threshold_is_strict_and_old_runs_count_as_one_process() -> None:
    """Efficiency exactly 0.7 gets no verdict, 0.69 does; a run without the world_size tag is a job of 1."""
    at_07 = compare([job("cuda:0", 1, 100.0), job("cuda:0", 4, 280.0)]).scaling[0]
    assert at_07.points[1].efficiency == pytest.approx(scaling_verdicts.SCALING_EFFICIENCY) and not said(
        at_07
    )
    below = compare([job("cuda:0", 1, 100.0), job("cuda:0", 4, 276.0)]).scaling[0]
    assert said(below) == ["communication-bound at 4 GPUs (efficiency 0.69): larger batch or fewer processes"]
    assert rec("cpu").world_size == 1 and job("cpu", 4, 1.0).world_size == 4


def test_without_two_world_sizes_there_is_no_scaling_section_or_chart(tmp_path: Path) -> None:
    comp = compare([job("cpu", 1, 10.0), job("cuda:0", 1, 100.0), job("cuda:0", 1, 90.0, key="k2")])
    assert comp.scaling == [] and "scaling:" not in terminal_table(judge(comp))
    names = {f.name for f in write_report(judge(comp), tmp_path, {})}
    assert "scaling.png" not in names and "## Scaling" not in (tmp_path / "report.md").read_text()


def test_a_lone_world_size_without_a_series_or_partner_is_unpaired() -> None:
    """cuda at 2 processes with cpu at 1 only: no pair across world sizes, no series of one point."""
    comp = compare([job("cpu", 1, 10.0), job("cuda:0", 2, 100.0)])
    assert comp.pairs == [] and comp.scaling == []
    assert sorted(s.world_size for s in comp.unpaired) == [1, 2]


def test_regressions_never_judge_one_world_size_against_another() -> None:
    """A night at 1 process after nights at 8 is slower by design, not a regression."""
    nights = [job("cuda:0", 8, 800.0) for _ in range(3)]
    newest = job("cuda:0", 1, 100.0)
    found, groups = find_regressions([*nights, newest], threshold=0.1)
    assert found == [] and groups == 1  # only the 8-process group has earlier runs
    slower = job("cuda:0", 8, 400.0)
    found, _ = find_regressions([*nights, newest, slower], threshold=0.1)
    assert [g.device for g in found] == ["cuda:0 (8 processes)"]
