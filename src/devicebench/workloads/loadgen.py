"""MLPerf Inference's own load generator (LoadGen) driving a model as a deployed server is driven.

LoadGen issues the queries (one at a time in single_stream, Poisson arrivals at a target QPS in
server, all at once in offline), times each from issue to completion, judges the run VALID or
INVALID by MLPerf's rules and writes its summary and detail logs. Every figure here is read from
the detail log's `:::MLLOG` lines, never timed beside LoadGen. The system under test is a pool of
workers that each gather queries arriving within `max_wait_s` into one batch of at most `max_batch`
and hand it to `predict` (a forward in this process, or an `/invocations` request over HTTP).
Torch-free and MLflow-free: `predict` is all it knows of the model.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlperf_loadgen as lg

from devicebench.errors import UsageError
from devicebench.util.fmt import fmt_count, fmt_s

MLLOG = ":::MLLOG "
NS = 1e-9
SCENARIO_OF = {
    "single_stream": lg.TestScenario.SingleStream,
    "server": lg.TestScenario.Server,
    "offline": lg.TestScenario.Offline,
}
# the detail log's key for each scenario's rate: queries a second one after another, completed
# samples a second at the target QPS, samples a second all at once
RATE_KEY = {
    "single_stream": "result_qps_without_loadgen_overhead",
    "server": "result_completed_samples_per_sec",
    "offline": "result_samples_per_second",
}
MIN_QPS = 0.5  # the server search's floor: below it a test of min_queries lasts most of an hour
# early stopping's own words for the queries it would need: "Would need to run at least 638 more queries"
MORE_QUERIES = re.compile(r"at least (\d+) more queries")
Predict = Callable[[Sequence[int]], None]


@dataclass(frozen=True)
class Load:
    """How LoadGen loads the system under test: its shortest test, its fewest queries, the p99
    promise, and the server's batching and workers."""

    min_duration_s: float
    min_queries: int
    p99_s: float
    max_batch: int = 1
    max_wait_s: float = 0.0
    workers: int = 1


@dataclass(frozen=True)
class LoadGenResult:
    """One LoadGen test as its detail log says it: VALID or not (and why), its rate and latencies."""

    scenario: str
    valid: bool
    reason: str
    rate: float  # RATE_KEY's figure
    p50_s: float
    p90_s: float
    p99_s: float
    queries: int
    target_qps: float  # what was asked (server), else 0
    summary: Path
    detail: Path
    # False where LoadGen ran out of the queries it pre-generated from an expected latency or rate
    # before the test's least duration (its own recommendation: expect faster)
    min_duration_met: bool = True
    # the queries LoadGen's early stopping asked for beyond those run, where the latency promise held
    # but too few queries ran for LoadGen to be sure of it (0: none asked, or the promise failed)
    more_queries: int = 0


def read_detail(path: Path) -> dict[str, Any]:
    """Every `:::MLLOG` record of a detail log, key -> value (the last of a repeated key)."""
    out: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(MLLOG):
            record = json.loads(line[len(MLLOG) :])
            out[record["key"]] = record.get("value")
    return out


def outcome_of(scenario: str, target_qps: float, summary: Path, detail: Path) -> LoadGenResult:
    """A test's `LoadGenResult`, read from LoadGen's detail log (a log without a result is an error)."""
    d = read_detail(detail)
    if "result_validity" not in d:
        raise RuntimeError(f"LoadGen wrote no result to {detail} (its errors: {d.get('error', 'none')})")
    reason = str(d.get("result_invalid_reason") or "")
    more = 0
    if d.get("early_stopping_met") is False:
        said = " ".join(str(d.get("early_stopping_result")).split())
        asked = MORE_QUERIES.search(said)
        more = int(asked.group(1)) if asked and d.get("result_perf_constraints_met") is not False else 0
        reason = (reason + " early stopping not met: " + said).strip()
    return LoadGenResult(
        scenario=scenario,
        valid=d["result_validity"] == "VALID",
        reason=reason,
        rate=float(d[RATE_KEY[scenario]]),
        p50_s=float(d["result_50.00_percentile_latency_ns"]) * NS,
        p90_s=float(d["result_90.00_percentile_latency_ns"]) * NS,
        p99_s=float(d["result_99.00_percentile_latency_ns"]) * NS,
        queries=int(d.get("result_query_count", 0)),
        target_qps=target_qps,
        summary=summary,
        detail=detail,
        min_duration_met=d.get("result_min_duration_met") is not False,
        more_queries=more,
    )


class BatchingSut:
    """The system under test: `workers` threads, each taking the next query, gathering those that
    arrive within `max_wait_s` up to `max_batch`, predicting them together and completing them. A
    prediction's error completes its queries anyway (LoadGen would otherwise wait for them for good)
    and is raised once the test has ended."""

    def __init__(self, predict: Predict, load: Load, inline: bool = False) -> None:
        self.predict, self.load, self.inline = predict, load, inline
        self.queue: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        workers = 0 if inline else load.workers
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
        for t in self.threads:
            t.start()

    def issue(self, samples: Sequence[Any]) -> None:
        if self.inline:  # on LoadGen's own thread, as its demos do: no hand-off to wake a worker
            pairs = [(s.id, s.index) for s in samples]
            for i in range(0, len(pairs), self.load.max_batch):
                self._complete(pairs[i : i + self.load.max_batch])
            return
        for s in samples:
            self.queue.put((s.id, s.index))

    def flush(self) -> None:
        """LoadGen's call at the end of a test: nothing is held back, so nothing to do."""

    def _batch(self, first: tuple[int, int]) -> list[tuple[int, int]]:
        batch = [first]
        deadline = time.perf_counter() + self.load.max_wait_s
        while len(batch) < self.load.max_batch:
            try:
                batch.append(self.queue.get(timeout=max(0.0, deadline - time.perf_counter())))
            except queue.Empty:
                break
            if batch[-1] is None:  # the stop sentinel, put back for the next worker
                self.queue.put(batch.pop())
                break
        return batch

    def _work(self) -> None:
        while (first := self.queue.get()) is not None:
            self._complete(self._batch(first))

    def _complete(self, batch: list[tuple[int, int]]) -> None:
        if self.error is None:
            try:
                self.predict([index for _, index in batch])
            except BaseException as exc:  # raised again by `raise_error`, after the test
                self.error = exc
        lg.QuerySamplesComplete([lg.QuerySampleResponse(qid, 0, 0) for qid, _ in batch])

    def stop(self) -> None:
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def _settings(scenario: str, load: Load, target_qps: float, expected_s: float) -> Any:
    s = lg.TestSettings()
    s.scenario = SCENARIO_OF[scenario]
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(1000 * load.min_duration_s)
    s.min_query_count = load.min_queries
    s.single_stream_expected_latency_ns = max(1, int(expected_s / NS))
    s.server_target_qps = target_qps
    s.server_target_latency_ns = max(1, int(load.p99_s / NS))
    s.server_target_latency_percentile = 0.99
    s.offline_expected_qps = target_qps
    return s


def run_test(
    scenario: str, predict: Predict, samples: int, load: Load, target_qps: float, expected_s: float, out: Path
) -> LoadGenResult:
    """One LoadGen test of `scenario` over `samples` samples (their indices are what `predict` gets),
    its logs in `out` as `<scenario>_summary.txt` and `<scenario>_detail.txt`."""
    out.mkdir(parents=True, exist_ok=True)
    # one query at a time (single_stream), or all at once (offline), with one worker: predicted on
    # LoadGen's thread; the server scenario's arrivals must never wait for a prediction to be issued
    sut_impl = BatchingSut(predict, load, inline=scenario != "server" and load.workers == 1)
    sut = lg.ConstructSUT(sut_impl.issue, sut_impl.flush)
    qsl = lg.ConstructQSL(samples, samples, lambda _: None, lambda _: None)
    log = lg.LogOutputSettings()
    log.outdir, log.prefix, log.copy_summary_to_stdout = str(out), f"{scenario}_", False
    settings = lg.LogSettings()
    settings.log_output, settings.enable_trace = log, False
    try:
        lg.StartTestWithLogSettings(sut, qsl, _settings(scenario, load, target_qps, expected_s), settings)
    finally:
        sut_impl.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    sut_impl.raise_error()
    return outcome_of(scenario, target_qps, out / f"{scenario}_summary.txt", out / f"{scenario}_detail.txt")


def test_seconds(load: Load, qps: float) -> float:
    """About how long a server test at `qps` takes: its least duration or its least queries' worth."""
    return max(load.min_duration_s, load.min_queries / qps)


def _longer(load: Load, first: LoadGenResult, left_s: float) -> Load | None:
    """The load of a test run again with the queries LoadGen's early stopping asked for, where the
    first held its promise but ran too few to be sure of it and the longer test fits in `left_s`."""
    if first.valid or not first.more_queries:
        return None
    longer = replace(load, min_queries=first.queries + first.more_queries)
    return longer if test_seconds(longer, first.target_qps) * 1.5 <= left_s else None


def peak_search(
    run_at: Callable[[float, Load], LoadGenResult], start_qps: float, load: Load, budget_s: float
) -> list[LoadGenResult]:
    """The server scenario's search for the highest QPS LoadGen calls VALID: doubling (or halving)
    from `start_qps` until one side fails, then bisecting, while the next test fits in `budget_s`
    and the bracket is wider than 5 %. A test whose p99 held but was too short for LoadGen's early
    stopping is run once more with the queries it asked for, where that fits (MLPerf's own runs are
    long enough; a search's short tests would otherwise call a QPS failed for want of queries).
    Every test tried, in order."""
    t0, tried, qps = time.perf_counter(), [], start_qps
    held, failed = 0.0, float("inf")
    while True:
        tried.append(run_at(qps, load))
        if longer := _longer(load, tried[-1], budget_s - (time.perf_counter() - t0)):
            tried.append(run_at(qps, longer))
        if tried[-1].valid:
            held = max(held, qps)
        else:
            failed = min(failed, qps)
        if failed < float("inf") and held and failed / held < 1.05:
            break
        bracketed = held and failed < float("inf")
        qps = (held + failed) / 2 if bracketed else (qps * 2 if held else qps / 2)
        left = budget_s - (time.perf_counter() - t0)
        if qps < MIN_QPS or test_seconds(load, qps) * 1.5 > left:
            break
    return tried


def highest_held(tried: Sequence[LoadGenResult], load: Load) -> LoadGenResult:
    """The VALID test at the highest QPS; none held: a UsageError saying the lowest tried, its p99, and
    what the next lower QPS would take (each test is at least `min_queries`, so a slow way in, such as
    HTTP, reaches its QPS only with minutes of budget)."""
    held = [o for o in tried if o.valid]
    if held:
        return max(held, key=lambda o: o.target_qps)
    low = min(reversed(tried), key=lambda o: o.target_qps)  # at one QPS, the last test's verdict counts
    lower = low.target_qps / 2
    more = (
        f"; the next lower, {fmt_count(lower)} QPS, takes about {fmt_s(test_seconds(load, lower))}: "
        "give serve_budget_s that much more"
        if lower >= MIN_QPS
        else ""
    )
    raise UsageError(
        f"no QPS held p99 <= {fmt_s(load.p99_s)} within serve_budget_s: the lowest tried, "
        f"{fmt_count(low.target_qps)} QPS, had p99 {fmt_s(low.p99_s)} "
        f"(LoadGen: INVALID, {low.reason or 'p99 over the bound'}){more}",
        param="p99_ms",
    )
