"""The compare report against a real `mlflow server` (SQLite): paging, filters, errors, exit codes, the
report run, and an end-to-end CPU matmul read into a report. Runs are logged with the schema's tags by
the benchmark's own writer (the same one that fills the 2,000-run store), or by the real workload."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.bench_compare import Spec, log_runs, specs_for
from devicebench.errors import UsageError
from devicebench.report import cli as report_cli
from devicebench.report.judge.pair_rules import explain
from devicebench.report.links import read_report_run
from devicebench.report.model.comparison import compare
from devicebench.report.read.options import Query
from devicebench.report.read.query import read_runs, record, search_pages, slice_clauses, time_slices
from devicebench.report.read.records import RunRecord
from devicebench.report.read.rest import rest_store, search_page
from servers import QUICK_MATMUL, compared_runs, devicebench_env, migrated_sqlite, run_cli

DAY_MS = 86_400_000


@pytest.fixture
def store(mlflow_server, experiment_name: str):
    client = MlflowClient(mlflow_server.url)
    exp_id = client.create_experiment(experiment_name)
    return client, exp_id


@pytest.fixture
def env(mlflow_server, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Settings for in-process `report.cli.run`, restored afterwards (MLflow's HTTP knobs included)."""
    for k in [k for k in os.environ if k.startswith(("MLFLOW_", "DEVICEBENCH_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("DEVICEBENCH_EXPERIMENT", experiment_name)
    monkeypatch.setenv("DEVICEBENCH_DOTENV", "none")
    monkeypatch.setenv("DEVICEBENCH_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    return tmp_path


def compare_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    report_cli.add_arguments(parser)
    return report_cli.run(parser.parse_args(list(argv)))


def compare_here(experiment: str, *argv: str) -> int:
    return compare_cli("--experiment", experiment, *argv)


def timed(t: float, start: int, device: str = "cuda:0", **kw: object) -> Spec:
    spec = specs_for("cifar", [device], batch=128, start=start)[0]
    spec.metrics["time/train_s"] = t
    spec.metrics["time/data_wait_s"] = 0.0
    spec.suite = ""  # one run a night, no plan siblings
    for k, v in kw.items():
        setattr(spec, k, v)
    return spec


# --------------------------------------------------------------------------------------------- reading


def test_pages_past_the_first_page_and_reads_matmul_points(store, experiment_name: str) -> None:
    client, exp_id = store
    specs = specs_for("cifar", ["cpu", "cuda:0"] * 3) + specs_for("matmul", ["cpu", "cuda:0"])
    custom, report = specs_for("unet", ["cpu", "cpu"])
    custom.workload, report.workload = "custom", "report"  # a future workload is read; reports are not
    log_runs(client, exp_id, [*specs, custom, report])
    query = Query(experiments=(experiment_name,), page_size=3)
    pages = list(search_pages(client, [exp_id], query))
    assert len(pages) == 4 and sum(map(len, pages)) == 9  # 10 runs in 3-run pages; the report run dropped
    sel = read_runs(client, query)  # one stream per workload, concurrently
    assert len(sel.runs) == 9 and len({r.run_id for r in sel.runs}) == 9
    assert [r.start_time for r in sel.runs] == sorted((r.start_time for r in sel.runs), reverse=True)
    assert {r.workload for r in sel.runs} == {"cifar", "matmul", "custom"}
    mm = next(r for r in sel.runs if r.workload == "matmul" and r.device == "cuda:0")
    assert sorted(mm.history["matmul/torch/float32/time_s"]) == [1024, 2048, 4096]
    comp = compare(sel.runs)
    pair = next(p for p in comp.pairs if p.workload == "matmul")
    assert set(pair.product_speedups) >= {("torch", "float32", 4096), ("numpy", "float64", 1024)}
    assert any("unsynchronised timing under-reports" in v for v in explain(pair))


def test_a_server_search_is_cut_by_start_time_and_reads_every_run_once(store, experiment_name: str) -> None:
    """Against a server the search runs as workload x start-time streams: runs on the cuts, at the
    ends, and one logged after the cuts were made (a clock ahead) are each read exactly once."""
    client, exp_id = store
    now = int(time.time() * 1000)
    oldest, newest = now - 8 * DAY_MS, now
    cuts = [int(c.split()[-1]) for c in slice_clauses(oldest, newest, 8)[:-1] if c]
    starts = [oldest, newest, *cuts, *(c - 1 for c in cuts)]
    log_runs(client, exp_id, [timed(1.0, t, device=d) for t in starts for d in ("cpu", "cuda:0")])
    query = Query(experiments=(experiment_name,), page_size=3)
    slices = time_slices(client, [exp_id], query)
    assert slices == slice_clauses(oldest, newest, 8) and len(slices) == 8
    log_runs(client, exp_id, [timed(1.0, newest + DAY_MS)])  # after the cuts: the last slice has no end
    per_slice = [sum(map(len, search_pages(client, [exp_id], query, None, c))) for c in slices]
    assert sum(per_slice) == 2 * len(starts) + 1 and min(per_slice) >= 2
    sel = read_runs(client, query)
    assert len(sel.runs) == len({r.run_id for r in sel.runs}) == 2 * len(starts) + 1
    assert [r.start_time for r in sel.runs] == sorted((r.start_time for r in sel.runs), reverse=True)


def test_server_pages_read_as_json_give_the_clients_records(store, experiment_name: str) -> None:
    """The report reads a server's search answer as JSON (report/read/rest.py), not through the client's
    protobuf parsing: the records are the ones the client gives, NaN, infinity, zero and empty values
    included, and a filter the server rejects is still a usage error."""
    from mlflow.entities import ViewType

    client, exp_id = store
    specs = specs_for("matmul", ["cuda:0"]) + specs_for("unet", ["cpu"])
    specs[1].metrics.update({"odd/nan": float("nan"), "odd/inf": float("inf"), "odd/zero": 0.0})
    specs[1].params["empty"] = ""
    log_runs(client, exp_id, specs)
    rest = rest_store(client)
    assert rest is not None
    fields, token = search_page(rest, [exp_id], "", 1, ["attributes.start_time DESC"], None)
    assert len(fields) == 1 and token  # paged like the client
    fields += search_page(rest, [exp_id], "", 1, ["attributes.start_time DESC"], token)[0]
    via_client = client.search_runs(
        [exp_id], "", ViewType.ACTIVE_ONLY, order_by=["attributes.start_time DESC"]
    )
    expected = [record(r) for r in via_client]
    got = [RunRecord(**f) for f in fields]
    for a, b in zip(got, expected, strict=True):
        nan_a = {k for k, v in a.metrics.items() if v != v}
        assert nan_a == {k for k, v in b.metrics.items() if v != v}
        finite = {k: v for k, v in a.metrics.items() if k not in nan_a}
        assert replace(a, metrics=finite) == replace(
            b, metrics={k: v for k, v in b.metrics.items() if k not in nan_a}
        )
    unet = next(r for r in got if r.workload == "unet")
    assert unet.metrics["odd/inf"] > 1e308 and unet.params["empty"] == ""  # the store keeps inf as max
    bad = Query(experiments=(experiment_name,), filter="metrics.x >>> 1")
    with pytest.raises(UsageError, match="MLflow rejected the filter"):
        read_runs(client, bad)


def test_embedded_sqlite_store_reads_with_the_same_code(tmp_path: Path) -> None:
    client = MlflowClient(migrated_sqlite(tmp_path / "mlflow.db"))
    exp_id = client.create_experiment("embedded", artifact_location=str(tmp_path / "artifacts"))
    specs = specs_for("matmul", ["cpu"]) + specs_for("cifar", ["cpu", "cuda:0"])
    log_runs(client, exp_id, specs, workers=1)
    assert rest_store(client) is None  # no server: the client's own path
    sel = read_runs(client, Query(experiments=("embedded",), page_size=2))
    assert len(sel.runs) == 3
    assert len(compare(sel.runs).pairs) == 1


def test_since_host_and_filter_select_runs(store, experiment_name: str) -> None:
    client, exp_id = store
    now = int(time.time() * 1000)
    other_host = {"host.hostname": "far", "host.gpu_name": "NVIDIA H100 80GB", "host.cpu_model": "Xeon"}
    log_runs(
        client,
        exp_id,
        [timed(1.0, now - 10 * DAY_MS), timed(1.0, now - DAY_MS), timed(1.0, now - DAY_MS, host=other_host)],
    )
    base = Query(experiments=(experiment_name,))
    assert len(read_runs(client, base).runs) == 3
    assert len(read_runs(client, Query(experiments=(experiment_name,), since="7d")).runs) == 2
    assert len(read_runs(client, Query(experiments=(experiment_name,), host="h100")).runs) == 1
    assert len(read_runs(client, Query(experiments=(experiment_name,), host="far")).runs) == 1
    flt = Query(experiments=(experiment_name,), filter="tags.`devicebench.host.hostname` = 'far'")
    assert len(read_runs(client, flt).runs) == 1


def test_a_run_logged_in_an_older_form_is_named_and_left_out(store, experiment_name: str) -> None:
    """The report knows one form of run (schema.SCHEMA_VERSION): an older one is named in the read line
    and left out, never read by a path kept for it; a selection of older runs alone is a usage error."""
    client, exp_id = store
    now = int(time.time() * 1000)
    new, old = log_runs(client, exp_id, [timed(1.0, now - DAY_MS), timed(2.0, now)])
    client.delete_tag(old, "devicebench.schema")
    got = read_runs(client, Query(experiments=(experiment_name,)))
    assert [r.run_id for r in got.runs] == [new]
    assert got.read_line().endswith(
        "; left out 1 run logged by an older devicebench (cifar-cuda:0): rerun them to compare them"
    )
    client.delete_tag(new, "devicebench.schema")
    with pytest.raises(
        UsageError, match=r"^--experiment: no runs to compare: left out 2 runs logged by an old"
    ):
        read_runs(client, Query(experiments=(experiment_name,)))


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("\u00b2", "whose devicebench.schema tag is no version"),  # passes str.isdigit, fails int()
        ("1e3", "whose devicebench.schema tag is no version"),
        ("-1", "whose devicebench.schema tag is no version"),
        ("999", "logged by a newer devicebench (this one reads schema 1)"),
        ("0", "logged by an older devicebench"),
    ],
)
def test_a_schema_tag_of_any_text_is_read_safely_and_left_out(
    store, experiment_name: str, version: str, said: str
) -> None:
    """A schema tag is read as an ASCII integer: anything else, and a form newer than this report
    knows, is a run left out with its reason in the read line, never a crash and never paired."""
    client, exp_id = store
    now = int(time.time() * 1000)
    new, odd = log_runs(client, exp_id, [timed(1.0, now - DAY_MS), timed(2.0, now)])
    client.set_tag(odd, "devicebench.schema", version)
    got = read_runs(client, Query(experiments=(experiment_name,)))
    assert [r.run_id for r in got.runs] == [new]
    assert f"; left out 1 run {said} (cifar-cuda:0): " in got.read_line()


def test_empty_unknown_and_bad_selections_are_usage_errors(store, experiment_name: str) -> None:
    client, _ = store
    with pytest.raises(UsageError, match=r"^--experiment: no runs match \(experiment t-"):
        read_runs(client, Query(experiments=(experiment_name,)))
    with pytest.raises(UsageError, match=r"^--experiment: unknown experiment 'no-such-experiment'"):
        read_runs(client, Query(experiments=("no-such-experiment",)))
    with pytest.raises(UsageError, match=r"^--filter: MLflow rejected the filter"):
        read_runs(client, Query(experiments=(experiment_name,), filter="params.batch_size ~~ 4"))


# --------------------------------------------------------------------------------------------- the command


def test_compare_writes_files_and_logs_the_report_run(store, env: Path, experiment_name: str, capsys) -> None:
    client, exp_id = store
    ids = log_runs(client, exp_id, specs_for("cifar", ["cpu", "cuda:0", "cpu", "cuda:0"], batch=4))
    out = env / "report"
    empty = ("--workload", "", "--since", "", "--filter", "", "--host", "")
    assert compare_cli("--experiment", experiment_name, "--out", str(out), *empty) == 0
    stdout = capsys.readouterr().out
    assert "batch 4: GPU launch-bound" in stdout and "report run:" in stdout
    for name in ("report.md", "report.html", "runs.csv", "speedup_by_workload.png"):
        assert (out / name).stat().st_size > 0, name
    reports = client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'")
    assert len(reports) == 1
    run = reports[0]
    assert run.info.status == "FINISHED"
    assert sorted(r["run_id"] for r in compared_runs(client.tracking_uri, run.info.run_id)) == sorted(ids)
    assert "devicebench.report.runs" not in run.data.tags  # no wall of bare ids in the UI
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.md", "report.html", "runs.csv", "speedup_by_workload.png"} <= artifacts
    # the report run itself is never compared by the next report
    assert compare_cli("--experiment", experiment_name, "--out", str(env / "again"), "--no-log") == 0
    assert "4 runs" in capsys.readouterr().out


def test_regression_mode_exit_codes(store, env: Path, experiment_name: str, capsys) -> None:
    client, exp_id = store

    def compare_cli(*argv: str) -> int:  # this test's experiment only: the server is shared
        return compare_here(experiment_name, *argv)

    now = int(time.time() * 1000)
    nights = [timed(t, now - (10 - i) * DAY_MS) for i, t in enumerate([10.0, 10.2, 9.9, 10.1])]
    log_runs(client, exp_id, nights)
    log_runs(client, exp_id, [timed(10.3, now - DAY_MS)])  # +3 %: noise
    assert compare_cli("--baseline", "previous", "--no-log", "--out", str(env / "a")) == 0
    assert "no regression beyond 10%" in capsys.readouterr().out
    log_runs(client, exp_id, [timed(13.2, now)])  # +30 %: a regression
    assert (
        compare_cli("--baseline", "previous", "--threshold", "10%", "--no-log", "--out", str(env / "b")) == 1
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("regression:")]
    assert len(lines) == 1 and "time/train_s 13.2 s" in lines[0] and "+31%" in lines[0]
    assert compare_cli("--baseline", "none", "--no-log", "--out", str(env / "c")) == 0
    # as a suite launches it: --filter narrows to the newest launch; the baseline still comes from before
    suite = [timed(13.4, now + 1000, suite="nightly run-9")]
    log_runs(client, exp_id, suite)
    narrowed = [
        "--filter",
        "tags.`devicebench.suite` = 'nightly run-9'",
        "--baseline",
        "previous",
        "--no-log",
    ]
    assert compare_cli(*narrowed, "--out", str(env / "d")) == 1
    assert "regression: cifar" in capsys.readouterr().out


def test_usage_errors_from_the_command(store, env: Path, experiment_name: str) -> None:
    with pytest.raises(UsageError, match=r"^--experiment: no runs match"):
        compare_cli("--experiment", experiment_name, "--no-log", "--out", str(env / "x"))
    with pytest.raises(UsageError, match=r"^--since: 'last tuesday' is not a time window"):
        compare_cli("--since", "last tuesday", "--no-log")
    with pytest.raises(UsageError, match=r"^--threshold: "):
        compare_cli("--threshold", "ten", "--no-log")
    with pytest.raises(UsageError, match=r"^--experiment: unknown experiment 'a'"):
        compare_cli("--experiment", "a,b", "--no-log")


# --------------------------------------------------------------------------------------------- every experiment


def test_no_experiment_reads_devicebench_runs_in_every_experiment(
    mlflow_server, env: Path, experiment_name: str, capsys
) -> None:
    """The demo's experiment, the configured one and `Default` (where `mlflow run` puts runs) are all
    read; reports, suite parents, runs without the workload tag and deleted experiments are not."""
    client = MlflowClient(mlflow_server.url)
    token = f"every-{experiment_name}"  # this test's runs, apart from the rest of the shared server
    flt = f"tags.`devicebench.suite` = '{token}'"

    def mine(specs: list[Spec], **kw: str) -> list[Spec]:
        for spec in specs:
            spec.suite = token
            for k, v in kw.items():
                setattr(spec, k, v)
        return specs

    a, b, gone = (client.create_experiment(f"{experiment_name}-{x}") for x in ("a", "b", "gone"))
    ids = log_runs(client, a, mine(specs_for("cifar", ["cpu", "cuda:0", "cpu"])))
    ids += log_runs(client, b, mine(specs_for("cifar", ["cuda:0", "cpu"])))
    ids += log_runs(client, "0", mine(specs_for("cifar", ["cuda:0"])))  # Default
    log_runs(client, a, mine(specs_for("cifar", ["cpu"]), workload="report"))
    log_runs(client, b, mine(specs_for("cifar", ["cpu"]), workload="suite"))
    foreign = client.create_run("0", tags={"devicebench.suite": token})  # not devicebench's: no workload
    client.set_terminated(foreign.info.run_id)
    log_runs(client, gone, mine(specs_for("cifar", ["cpu"])))
    client.delete_experiment(gone)
    sel = read_runs(client, Query(experiments=("all",), filter=flt, page_size=2))  # pages of experiments too
    assert sorted(r.run_id for r in sel.runs) == sorted(ids)
    line = f"read 6 runs from 3 experiments: {experiment_name}-a (3), {experiment_name}-b (2), Default (1)"
    assert sel.read_line() == line
    assert compare_cli("--filter", flt, "--out", str(env / "all")) == 0  # no --experiment
    stdout = capsys.readouterr().out
    assert stdout.count(f"compare: {line}") == 1
    assert line.removeprefix("read ") in (env / "all" / "report.md").read_text()
    # the configured experiment does not exist: the report goes to the one that held the most runs,
    # and no experiment is created behind the user's back
    assert client.get_experiment_by_name(experiment_name) is None
    home = client.get_experiment_by_name(f"{experiment_name}-a")
    reports = client.search_runs([home.experiment_id], "tags.`devicebench.workload` = 'report'")
    (report,) = [r for r in reports if "devicebench.report.run_count" in r.data.tags]  # not the planted one
    assert sorted(r["run_id"] for r in compared_runs(client.tracking_uri, report.info.run_id)) == sorted(ids)
    assert report.data.params["experiment"] == "all"


def test_compare_logs_beside_the_one_experiment_it_read_and_prints_links(
    mlflow_server, env: Path, experiment_name: str, capsys, monkeypatch
) -> None:
    """After `make demo`, a bare `compare` read only the demo's experiment but made `devicebench` for
    its report. Its report now goes where the runs are, and its last lines link into the UI."""
    client = MlflowClient(mlflow_server.url)
    demo = client.create_experiment(f"{experiment_name}-demo")
    token = f"one-{experiment_name}"
    specs = specs_for("cifar", ["cpu", "cuda:0"])
    for spec in specs:
        spec.suite = token
    log_runs(client, demo, specs)
    flt = f"tags.`devicebench.suite` = '{token}'"
    out = env / "one"
    assert compare_cli("--filter", flt, "--out", str(out)) == 0
    assert client.get_experiment_by_name(experiment_name) is None  # the configured one was not made
    (report,) = client.search_runs([demo], "tags.`devicebench.workload` = 'report'")
    assert report.info.run_name.startswith(f"report · {token} · 1 CPU/GPU pair · best ")
    lines = capsys.readouterr().out.strip().splitlines()
    base = mlflow_server.url.rstrip("/")
    view = "workflowType=machine_learning"
    assert lines[-2:] == [
        f"the report run: {base}/#/experiments/{demo}/runs/{report.info.run_id}?{view}",
        f"the runs list: {base}/#/experiments/{demo}/runs?{view}",
    ]
    assert read_report_run(out) == (report.info.run_id, demo)  # what a suite prints
    monkeypatch.setenv("MLFLOW_UI_URL", "https://mlflow.example.com/")
    assert compare_cli("--filter", flt, "--out", str(env / "two"), "--no-log") == 0
    assert read_report_run(env / "two") is None
    assert compare_cli("--filter", flt, "--out", str(env / "three")) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"the runs list: https://mlflow.example.com/#/experiments/{demo}/runs?{view}"


def test_report_run_shows_its_answer_as_metrics_and_description(
    store, env: Path, experiment_name: str
) -> None:
    """What the MLflow UI shows on the report run's page: speedups as metrics, a Markdown summary."""
    client, exp_id = store
    times = {(4, "cpu"): 6.0, (4, "cuda:0"): 3.0, (128, "cpu"): 10.0, (128, "cuda:0"): 0.5}
    specs = []
    for (batch, device), t in times.items():
        spec = specs_for("cifar", [device], batch=batch)[0]
        spec.metrics["time/train_s"] = t
        specs.append(spec)
    log_runs(client, exp_id, specs)
    argv = ("--experiment", experiment_name, "--baseline", "previous", "--out", str(env / "ui"))
    assert compare_cli(*argv) == 0
    (report,) = client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'")
    m = report.data.metrics
    assert m["speedup/cifar batch_size_4 cpu vs cuda_0"] == pytest.approx(2.0)
    assert m["speedup/cifar batch_size_128 cpu vs cuda_0"] == pytest.approx(20.0)
    assert (m["speedup/best"], m["speedup/worst"], m["regressions"]) == pytest.approx((20.0, 2.0, 0))
    note = report.data.tags["mlflow.note.content"]
    assert "**cifar · bs 4: cuda:0 (" in note and ") is 2.00× faster than cpu (" in note  # the answer first
    assert note.index("is 2.00× faster") < note.index("is 20.0× faster") < note.index("`speedup/best`")
    assert "| cifar · bs 128 |" in note and "| 20.0× (" in note and "| 2.00× (" in note
    assert "No regression beyond 10%" in note and "report.html" in note
    assert (
        report.info.run_name == "report · nightly-0 · 2 CPU/GPU pairs · best 20.0×"
    )  # its runs came from one plan
    assert "`speedup/best` = 20" in note


def test_budget_prints_the_cheapest_side_per_config_from_logged_prices(
    store, env: Path, experiment_name: str, capsys
) -> None:
    """Runs planted with issue 17's price tags and cost metrics, read back through the server by
    `compare --budget`: the cheapest side per config, its epochs per dollar, the cost ratio as a metric."""
    client, exp_id = store
    specs = []
    for device, t, price in (("cpu", 12.0, 1.0), ("cuda:0", 1.0, 8.0)):
        spec = timed(t, 0, device)  # 2 epochs: $/epoch = price × t / 2 / 3600
        spec.metrics |= {"cost/usd_per_epoch": price * t / 2 / 3600, "cost/usd_per_hour": price}
        spec.extra_tags = {
            "devicebench.price.usd_per_hour": str(price),
            "devicebench.price.currency": "USD",
            "devicebench.price.source": "override",
        }
        specs.append(spec)
    log_runs(client, exp_id, specs)
    argv = ("--experiment", experiment_name, "--out", str(env / "budget"), "--budget")
    assert compare_cli(*argv) == 0
    out = capsys.readouterr().out
    md = (env / "budget" / "report.md").read_text()
    assert "costs 1.50× less per epoch: worth its price (break-even at 8.00× faster)" in md
    (line,) = [ln for ln in out.splitlines() if ln.startswith("budget: ")]
    assert line.startswith("budget: cifar ") and ": cheapest cuda:0 (" in line
    assert "): 900 epochs per USD ($0.00111 per epoch at $8.00 (override); 1 other priced side(s))" in line
    # a --budget question logs no report run (issue 55: 15 of them after one sitting); a plain compare does
    assert "report run: not logged for a --budget or --deadline question" in out
    assert client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'") == []
    assert compare_cli("--experiment", experiment_name, "--out", str(env / "plain")) == 0
    assert "budget: " not in capsys.readouterr().out  # without the flag: no budget lines
    (report,) = client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'")
    (name,) = [k for k in report.data.metrics if k.startswith("cost_ratio/")]
    assert report.data.metrics[name] == pytest.approx(8.0 / 12.0)
    # its metrics panel lists answers only: no run count, no fixed cost of its own process
    assert not {"pairs", "time/start_s", "time/store_s", "time/end_s"} & set(report.data.metrics)


# --------------------------------------------------------------------------------------------- end to end


def test_cpu_matmul_read_into_a_report(mlflow_server, experiment_name: str, tmp_path: Path) -> None:
    """The real workload through the real CLI, then `devicebench compare` (exit codes as users see them)."""
    env = devicebench_env(
        mlflow_server.url,
        DEVICEBENCH_EXPERIMENT=experiment_name,
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
        MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true",
    )
    for _ in range(2):
        r = run_cli(
            ["matmul", "--device", "cpu", "--sizes", "64,128", "--repeats", "2", *QUICK_MATMUL],
            env,
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr
    out = tmp_path / "rep"
    # the flags exactly as MLproject's compare entry point passes them: its words for "not set"
    # (the experiment is named: the server is shared, and without one compare reads every experiment)
    mlproject = [
        "--workload",
        "all",
        "--since",
        "all",
        "--filter",
        "none",
        "--host",
        "any",
        "--baseline",
        "none",
    ]
    args = ["compare", "--experiment", experiment_name, *mlproject, "--threshold", "0.1", "--out", str(out)]
    r = run_cli(args, env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "configs without a partner device" in r.stdout and "no partner: matmul" in r.stdout
    md = (out / "report.md").read_text()
    assert "Matrix multiply" in md and "| numpy | float64 | 128 |" in md
    assert (out / "matmul_gflops.png").stat().st_size > 0
    r = run_cli(["compare", "--experiment", "nope", "--no-log"], env, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("devicebench: error: --experiment: unknown experiment 'nope'")


# --------------------------------------------------------------------------------------------- what a report logs


def test_a_filter_that_empties_the_selection_is_named_with_the_hosts_there(
    store, experiment_name: str
) -> None:
    """`compare --workload cifar,infer --host A10` on runs of another host said `--experiment: no runs
    match`, though --experiment was never given: the option that emptied the selection is named."""
    client, exp_id = store
    log_runs(client, exp_id, specs_for("cifar", ["cpu", "cuda:0"]))
    asked = Query(experiments=(experiment_name,), workloads=("cifar", "infer"), host="H100")
    with pytest.raises(UsageError) as got:
        read_runs(client, asked)
    assert (
        str(got.value)
        == "--host: no runs match --host 'H100' (2 runs without it); hosts there: bench-a10 (NVIDIA A10)"
    )
    with pytest.raises(
        UsageError, match=r"^--workload: no runs match --workload infer,matmul \(2 runs without it\)$"
    ):
        read_runs(client, Query(experiments=(experiment_name,), workloads=("infer", "matmul")))
    flt = "params.batch_size = '999'"
    with pytest.raises(UsageError, match=r"^--filter: no runs match --filter \"params.batch_size = '999'\""):
        read_runs(client, Query(experiments=(experiment_name,), filter=flt))


def _reports(client: MlflowClient, exp_id: str) -> list:
    return client.search_runs([exp_id], "tags.`devicebench.workload` = 'report'")


def test_no_report_run_for_no_finished_run_or_the_same_selection_as_the_last(
    store, env: Path, experiment_name: str, capsys
) -> None:
    """Every plain compare logged another identical report run, and one with 0 finished runs logged
    `report · devicebench · 0 runs`: neither says anything the last report run did not."""
    client, exp_id = store
    failed = specs_for("cifar", ["cpu"])
    failed[0].status = "FAILED"
    log_runs(client, exp_id, failed)
    assert compare_here(experiment_name, "--out", str(env / "none")) == 0
    assert "report run: not logged: none of the 1 runs read has finished" in capsys.readouterr().out
    assert _reports(client, exp_id) == []
    log_runs(client, exp_id, specs_for("cifar", ["cpu", "cuda:0"]))
    assert compare_here(experiment_name, "--out", str(env / "a")) == 0
    (first,) = _reports(client, exp_id)
    assert compare_here(experiment_name, "--out", str(env / "b")) == 0
    said = capsys.readouterr().out
    assert f"report run: not logged: the same selection as the last report run {first.info.run_id}" in said
    assert len(_reports(client, exp_id)) == 1 and read_report_run(env / "b") == (first.info.run_id, exp_id)
    assert compare_here(experiment_name, "--out", str(env / "c"), "--threshold", "20%") == 0
    assert len(_reports(client, exp_id)) == 2, "another question of the same runs is another report"
    log_runs(client, exp_id, specs_for("cifar", ["cpu"]))
    assert compare_here(experiment_name, "--out", str(env / "d"), "--threshold", "20%") == 0
    assert len(_reports(client, exp_id)) == 3, "a new run is a new selection"


def test_the_report_lands_in_the_experiment_that_held_most_of_its_runs(
    mlflow_server, env: Path, experiment_name: str
) -> None:
    """`compare --baseline previous` read the demo's runs and a tuned run in the configured experiment,
    and logged its report (and printed its link) in the configured one: it goes where most runs are."""
    client = MlflowClient(mlflow_server.url)
    token = f"most-{experiment_name}"
    demo = client.create_experiment(f"{experiment_name}-demo")
    configured = client.create_experiment(experiment_name)
    specs = specs_for("cifar", ["cpu", "cuda:0", "cpu"])
    for spec in specs:
        spec.suite = token
    log_runs(client, demo, specs[:2])
    log_runs(client, configured, specs[2:])
    flt = f"tags.`devicebench.suite` = '{token}'"
    assert compare_cli("--filter", flt, "--out", str(env / "most"), "--baseline", "previous") == 0
    assert len(_reports(client, demo)) == 1 and _reports(client, configured) == []
    assert read_report_run(env / "most")[1] == demo
