"""infer under MLPerf's LoadGen: its three scenarios in-process, each figure read from LoadGen's own
logs (the tests parse LoadGen's summary text apart from the detail log the code reads, so a figure timed
beside LoadGen fails them), the server scenario's search for the highest QPS within the p99 promise,
its cost per million, and the bad inputs: a promise of 0 or below, a search no QPS passes."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from devicebench.config.fields import build_config
from devicebench.config.workloads import InferConfig
from devicebench.errors import UsageError
from devicebench.host.context import Context, LoadedModel
from devicebench.pricing.costs import serving_costs
from devicebench.run.run_line import glance_metrics, summary_line
from devicebench.schema import (
    COST_PER_MILLION,
    HOST_TAIL_RATIO,
    SERVE_MAX_QPS,
    SERVE_P90,
    SERVE_RATE,
    loadgen_key,
    loadgen_tag,
)
from devicebench.tracking.protocol import MemoryTracker
from devicebench.util.busy_host import tail_caveat
from devicebench.util.fmt import fmt_count, fmt_money, fmt_s
from devicebench.workloads import infer, loadgen


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def summary_ns(text: str, label: str) -> float:
    """A figure of LoadGen's summary log, by its label: read apart from the detail log the code reads."""
    match = re.search(rf"^{re.escape(label)}\s*:\s*([0-9.]+)", text, re.M)
    assert match, f"{label!r} not in the summary"
    return float(match.group(1))


def _cfg(**over: object) -> InferConfig:
    base = dict(model="tiny", scenarios=("single_stream", "server", "offline"), min_duration_s=0.3,
                min_queries=512, serve_budget_s=6.0, p99_ms=250.0, input="3x8x8")  # fmt: skip
    base.update(over)
    return InferConfig(**base)  # type: ignore[arg-type]


def test_the_three_scenarios_log_what_loadgens_logs_say(tmp_path: Path) -> None:
    """Each scenario's figure equals LoadGen's summary text; the run's p90 is single_stream's, its rate
    and cost the server's highest VALID QPS; LoadGen's logs are artifacts."""
    torch.manual_seed(0)
    cfg = _cfg()
    tracker = MemoryTracker()
    model = Tiny().eval()
    served = infer.under_load(cfg, Context(torch.device("cpu"), tmp_path, False), tracker, model, (3, 8, 8))
    metrics = {k: v for k, v, step in tracker.metrics if step is None}
    way = served["in_process"]
    texts = {
        name: text
        for name, text in tracker.artifacts.items()
        if name.startswith("loadgen/in_process/") and name.endswith(".txt")
    }
    single = texts["loadgen/in_process/single_stream_summary.txt"]
    assert metrics[loadgen_key("in_process", "single_stream", "p90_s")] == pytest.approx(
        summary_ns(single, "90.00 percentile latency (ns)") * 1e-9, rel=1e-9
    )
    offline = texts["loadgen/in_process/offline_summary.txt"]
    assert metrics[loadgen_key("in_process", "offline", "rate")] == pytest.approx(
        summary_ns(offline, "Samples per second"), rel=1e-4
    )
    server = texts["loadgen/in_process/server_summary.txt"]  # the last test the search ran
    last = way.tried[-1]
    assert last.p99_s == pytest.approx(summary_ns(server, "99.00 percentile latency (ns)") * 1e-9, rel=1e-9)
    assert all(o.valid for o in way.outcomes.values()), {s: o.reason for s, o in way.outcomes.items()}
    assert tracker.tags[loadgen_tag("in_process", "server")] == "VALID"
    best = way.outcomes["server"]
    assert best.target_qps == max(o.target_qps for o in way.tried if o.valid)
    assert best.p99_s <= cfg.p99_ms / 1e3
    assert metrics[loadgen_key("in_process", "server", "max_qps")] == best.target_qps
    assert "loadgen/in_process/server_search.json" in tracker.tables
    chart = tracker.artifacts["loadgen/all/p99_vs_qps.png"]
    (ax,) = chart.axes
    assert ax.lines[0].get_ydata()[0] == 250.0  # the promise, in ms


def test_the_runs_answer_is_the_highest_qps_held_and_its_cost(tmp_path: Path) -> None:
    """Through `infer.run`: SERVE_RATE and SERVE_MAX_QPS are the server's VALID QPS, SERVE_P90 is
    single_stream's p90 (no timed requests asked), and a million predictions cost the hour over it."""
    cfg = _cfg(scenarios=("single_stream", "server"))
    tracker = MemoryTracker()
    ctx = Context(torch.device("cpu"), tmp_path, False, served=LoadedModel(Tiny().eval(), (3, 8, 8), "x"))
    result = infer.run(cfg, ctx, tracker)
    metrics = {k: v for k, v, step in tracker.metrics if step is None}
    server = result.served["in_process"].outcomes["server"]
    assert metrics[SERVE_RATE] == metrics[SERVE_MAX_QPS] == server.target_qps
    assert metrics[SERVE_P90] == result.served["in_process"].outcomes["single_stream"].p90_s
    costs = serving_costs(3.6, result.serve_samples_per_s)
    assert costs[COST_PER_MILLION] == pytest.approx(3.6 * 1e6 / server.target_qps / 3600)
    line = summary_line("infer", "cpu", glance_metrics("infer", result, costs), "no price table")
    assert f"{fmt_count(server.target_qps)} predictions/s held within p99 {fmt_s(0.25)} at batch 1" in line
    assert "over HTTP" not in line  # in-process: the model's own figures
    assert metrics[HOST_TAIL_RATIO] == result.host[HOST_TAIL_RATIO] >= 1  # the CPU's steadiness, first
    assert f"{fmt_money(costs[COST_PER_MILLION])}/M predictions" in line
    way = result.served.pop("in_process")  # the same figures as if they came over HTTP, with Parquet
    way.via, way.body = "http", "parquet"
    result.served["http"] = way
    line = summary_line("infer", "cpu", glance_metrics("infer", result, costs), "no price table")
    assert f"held within p99 {fmt_s(0.25)} over HTTP with Parquet bodies at batch 1" in line


def test_a_promise_of_zero_or_below_is_refused_in_one_line() -> None:
    for bad in ("0", "-5"):
        with pytest.raises(UsageError, match=r"out of range; expected a number > 0"):
            build_config(InferConfig, {"p99_ms": bad})


def test_a_search_no_qps_passes_says_the_lowest_tried_and_its_p99(tmp_path: Path) -> None:
    """A model slower than the promise: every test INVALID, one line with the lowest QPS and its p99."""
    load = loadgen.Load(min_duration_s=0.2, min_queries=8, p99_s=0.005)

    def predict(indices: object) -> None:
        time.sleep(0.012)

    tried = loadgen.peak_search(
        lambda q, test: loadgen.run_test("server", predict, 8, test, q, 0.012, tmp_path), 40.0, load, 1.5
    )
    assert tried and not any(o.valid for o in tried)
    low = min(tried, key=lambda o: o.target_qps)
    with pytest.raises(UsageError) as err:
        loadgen.highest_held(tried, load)
    text = str(err.value)
    assert "no QPS held p99 <= 5.00 ms" in text and "\n" not in text
    assert (
        f"the lowest tried, {fmt_count(low.target_qps)} QPS" in text
        and "had p99" in text
        and not math.isnan(low.p99_s)
    )
    lower = low.target_qps / 2  # what the search would have tried next, had the budget allowed
    hint = f"the next lower, {fmt_count(lower)} QPS, takes about {fmt_s(loadgen.test_seconds(load, lower))}"
    assert (hint in text) == (lower >= loadgen.MIN_QPS)


def test_single_stream_slowed_in_its_estimate_is_run_again_at_loadgens_own_latency(tmp_path: Path) -> None:
    """The calls that set LoadGen's expected latency ran slow (a busy host), the test fast: LoadGen ran
    out of the queries it pre-generated before the least duration and said so; the scenario is run once
    more at LoadGen's own mean latency and holds."""
    from devicebench.workloads.serving import ESTIMATE_CALLS, drive

    calls = []

    def predict(indices: object) -> None:
        calls.append(indices)
        time.sleep(0.02 if len(calls) <= ESTIMATE_CALLS else 0.0005)

    cfg = _cfg(scenarios=("single_stream",), min_duration_s=0.3, min_queries=64)
    first = loadgen.run_test(
        "single_stream", predict, 8, loadgen.Load(0.3, 64, 0.25), 0.0, 0.02, tmp_path / "a"
    )
    assert not first.valid and not first.min_duration_met and "pre-generates more" in first.reason
    calls.clear()
    single = drive(cfg, predict, "in_process", 1, tmp_path / "b").outcomes["single_stream"]
    assert single.valid and single.min_duration_met, single.reason
    detail = loadgen.read_detail(single.detail)
    assert detail["requested_single_stream_expected_latency_ns"] < 0.02e9  # LoadGen's own, not the estimate
    assert single.queries > 64


def test_offline_that_ran_faster_than_its_rerun_asked_is_run_again(tmp_path: Path) -> None:
    """The host sped up between offline's tests (the flake seen under `make test` on an unsteady VM):
    the first test's query ran out before the least duration, and so did the one at the rate it
    measured; offline is run again at twice the rate the last measured, and holds."""
    from devicebench.workloads.serving import ESTIMATE_CALLS, drive

    calls = []

    def predict(indices: object) -> None:
        calls.append(indices)  # slow estimate, then a test of 1 ms calls, then faster ever after
        time.sleep(0.02 if len(calls) <= ESTIMATE_CALLS else 0.001 if len(calls) <= 140 else 0.0001)

    cfg = _cfg(scenarios=("offline",), min_duration_s=0.3, min_queries=64)
    offline = drive(cfg, predict, "in_process", 1, tmp_path).outcomes["offline"]
    assert offline.valid, offline.reason
    assert offline.target_qps > 1.2 * 900  # beyond the first rerun's ask: the fast calls outran it


def test_early_stopping_asks_for_more_queries_only_where_the_promise_held(tmp_path: Path) -> None:
    """Read from LoadGen's own verdict: one slow query in 200 keeps p99 within the promise but leaves
    early stopping unsure (more queries asked); slow queries past 1 % break the promise (none asked)."""
    load = loadgen.Load(min_duration_s=0.5, min_queries=200, p99_s=0.05, workers=2)

    def run(slow: set[int], out: str) -> loadgen.LoadGenResult:
        calls = []

        def predict(indices: object) -> None:
            calls.append(indices)
            time.sleep(0.08 if len(calls) in slow else 0.001)  # a busy host's stalls stay under 50 ms

        return loadgen.run_test("server", predict, 8, load, 200.0, 0.001, tmp_path / out)

    held = run({50}, "held")
    assert not held.valid and held.p99_s <= load.p99_s and held.more_queries > 0, held.reason
    assert f"at least {held.more_queries} more queries" in held.reason
    broken = run(set(range(40, 50)), "broken")
    assert not broken.valid and broken.p99_s > load.p99_s and broken.more_queries == 0


def test_a_test_too_short_for_early_stopping_is_run_again_with_the_queries_it_asked_for(
    tmp_path: Path,
) -> None:
    """The search runs a QPS whose promise held but whose early stopping asked for more queries once
    more, with them, where the longer test fits the budget; the longer test's verdict counts."""
    load = loadgen.Load(min_duration_s=0.1, min_queries=100, p99_s=0.05)
    asked: list[tuple[float, int]] = []

    def run_at(qps: float, test: loadgen.Load) -> loadgen.LoadGenResult:
        asked.append((qps, test.min_queries))
        short = test.min_queries < 150 and qps <= 20
        more, valid = (60, False) if short else (0, qps <= 20)
        return loadgen.LoadGenResult(
            "server", valid, "", qps, 0.01, 0.02, 0.04, test.min_queries, qps, tmp_path, tmp_path, True, more
        )

    tried = loadgen.peak_search(run_at, 10.0, load, 600.0)
    assert asked[:3] == [(10.0, 100), (10.0, 160), (20.0, 100)]
    assert max(o.target_qps for o in tried if o.valid) == pytest.approx(20.0, rel=0.05)
    assert [(o.target_qps, o.valid) for o in tried[:2]] == [(10.0, False), (10.0, True)]
    assert len(loadgen.peak_search(run_at, 10.0, load, 20.0)) == 1  # 160 queries at 10 QPS: no room


def test_a_search_that_holds_nothing_says_the_longer_tests_verdict_at_its_lowest_qps(tmp_path: Path) -> None:
    """Where the lowest QPS was run again for early stopping and failed its promise then, the one line
    says that p99, not the short test's."""

    def test(qps: float, p99: float, queries: int, more: int) -> loadgen.LoadGenResult:
        return loadgen.LoadGenResult(
            "server", False, "r", qps, p99, p99, p99, queries, qps, tmp_path, tmp_path, True, more
        )

    tried = [test(2.0, 0.5, 100, 0), test(1.0, 0.04, 100, 60), test(1.0, 0.07, 160, 0)]
    with pytest.raises(UsageError, match=f"had p99 {fmt_s(0.07)}"):
        loadgen.highest_held(tried, loadgen.Load(1.0, 100, 0.05))


def test_a_search_at_its_floor_gives_no_budget_hint(tmp_path: Path) -> None:
    """Where the next lower QPS is under the search's floor, more budget would not help: no hint."""
    low = loadgen.LoadGenResult("server", False, "", 0.6, 0.1, 0.2, 0.3, 100, 0.6, tmp_path, tmp_path)
    with pytest.raises(UsageError) as err:
        loadgen.highest_held([low], loadgen.Load(1.0, 1024, 0.05))
    assert "lowest tried, 0.6" in str(err.value) and "serve_budget_s that much" not in str(err.value)


def test_tune_searches_each_batching_setting_and_keeps_the_highest(tmp_path: Path) -> None:
    """With `tune`, the server search runs at a few (max_batch, max_wait) settings; the one kept held
    the highest QPS of them, and the table says each."""
    from devicebench.workloads.serving import settings_to_try

    cfg = _cfg(scenarios=("server",), tune=True, serve_budget_s=3.0)
    assert settings_to_try(cfg) == [(1, 0.0), (4, 25.0), (16, 25.0)]
    assert settings_to_try(_cfg(max_batch=2, max_wait_ms=1.0)) == [(2, 1.0)]
    tracker = MemoryTracker()
    ctx = Context(torch.device("cpu"), tmp_path, False)
    way = infer.under_load(cfg, ctx, tracker, Tiny().eval(), (3, 8, 8))["in_process"]
    table = tracker.artifacts["loadgen/in_process/tune.json"]
    assert table["max_batch"] == [1, 4, 16]
    best = max(range(3), key=lambda i: table["max_qps"][i])
    assert way.max_batch == table["max_batch"][best]
    assert way.outcomes["server"].target_qps == table["max_qps"][best]


def test_the_reports_serving_cell_says_the_promise_the_rate_was_held_within() -> None:
    """A LoadGen run's side: `<QPS>/s within p99 50.00 ms at batch 4`; a timed run's side keeps its
    `<rate>/s at batch 32` (fails before: the cell never said the promise)."""
    from test_report_logic import rec, side

    from devicebench.report.render.tables import SERVING_COLUMNS
    from devicebench.schema import SERVE_BATCH, SERVE_P99_BOUND

    cell = next(c for c in SERVING_COLUMNS if c.name == "throughput")
    held = {SERVE_RATE: 120.0, SERVE_BATCH: 4.0, SERVE_P99_BOUND: 0.05, "time/total_s": 9.0}
    timed = {SERVE_RATE: 900.0, SERVE_BATCH: 32.0, "time/total_s": 9.0}

    class Item:
        def __init__(self, metrics: dict[str, float]) -> None:
            self.side, self.config = side([rec("cpu", workload="infer", metrics=metrics)]), "c"

    assert cell.cell(Item(held)) == f"{fmt_count(120.0)}/s within p99 {fmt_s(0.05)} at batch 4"
    assert cell.cell(Item(timed)) == f"{fmt_count(900.0)}/s at batch 32"


def test_a_search_that_holds_nothing_fails_the_run_after_logging_what_it_measured(tmp_path: Path) -> None:
    """single_stream's figures and the failed search's tests are logged; then the one-line UsageError
    (fails before: the error left nothing of the other scenarios)."""
    cfg = _cfg(scenarios=("single_stream", "server"), p99_ms=0.001, min_queries=50, serve_budget_s=1.0)
    tracker = MemoryTracker()
    ctx, unsteady = Context(torch.device("cpu"), tmp_path, False), {HOST_TAIL_RATIO: 2.9}
    with pytest.raises(UsageError, match="no QPS held p99") as err:
        infer.under_load(cfg, ctx, tracker, Tiny().eval(), (3, 8, 8), unsteady)
    # and says what an unsteady CPU did to it, still one line about --p99_ms
    assert str(err.value).startswith("--p99_ms: no QPS held") and err.value.param == "p99_ms"
    assert str(err.value).endswith(f"; {tail_caveat(unsteady)}") and "\n" not in str(err.value)
    logged = {k for k, _, _ in tracker.metrics}
    assert loadgen_key("in_process", "single_stream", "p90_s") in logged
    assert loadgen_key("in_process", "server", "tried_p99_s") in logged


def test_each_server_test_is_logged_flat_for_the_reports_chart(tmp_path: Path) -> None:
    """log_served writes each server test's QPS, p99 and validity as flat keys, which the report's
    search returns with the run and read/points.server_tests reads back in order (fails before: only
    the stepped series, of which a search returns the last value)."""
    from devicebench.report.read.points import server_tests
    from devicebench.report.read.records import RunRecord
    from devicebench.workloads.serving import Served, log_served

    def test(qps: float, p99: float, valid: bool) -> loadgen.LoadGenResult:
        return loadgen.LoadGenResult("server", valid, "", qps, p99, p99, p99, 100, qps, tmp_path, tmp_path)

    way = Served("http", tried=[test(100.0, 0.01, True), test(200.0, 0.09, False), test(150.0, 0.04, True)])
    tracker = MemoryTracker()
    log_served(tracker, way, tmp_path)
    flat = {k: v for k, v, step in tracker.metrics if step is None}
    run = RunRecord("r", "FINISHED", 1, {"devicebench.workload": "infer"}, {}, flat)
    assert server_tests(run) == {"http": [(100.0, 0.01, True), (200.0, 0.09, False), (150.0, 0.04, True)]}
