"""compare's serving answer on plain data: per served model, each device at its cheapest per million
predictions within the p99 promise (whatever batch setting held it), which device is cheaper and by
how much, the setting each held its highest QPS at, and what is missing where one device served."""

from __future__ import annotations

from test_report_logic import rec

from devicebench.report.judge.judgement import judge
from devicebench.report.model.comparison import compare
from devicebench.report.render.answer import answers
from devicebench.report.render.terminal import terminal_table
from devicebench.schema import (
    COST_PER_MILLION,
    SERVE_BATCH,
    SERVE_MAX_WAIT,
    SERVE_P99,
    SERVE_P99_BOUND,
    SERVE_RATE,
)
from devicebench.util.fmt import fmt_money, fmt_s, fmt_x

PROMISE = 0.05


def served(
    device: str, qps: float, per_million: float | None, batch: int, wait_s: float, key: str, **params: str
):
    """One infer run whose LoadGen server scenario held `qps` within the promise at a batch setting."""
    metrics = {SERVE_RATE: qps, SERVE_BATCH: float(batch), SERVE_MAX_WAIT: wait_s, SERVE_P99: 0.02}
    metrics |= {SERVE_P99_BOUND: PROMISE, "time/total_s": 30.0}
    tags = {}
    if per_million is not None:
        metrics[COST_PER_MILLION] = per_million
        tags = {"devicebench.price.usd_per_hour": "1.0", "devicebench.price.currency": "USD"}
    settings = {
        "model": "resnet18",
        "p99_ms": "50",
        "max_batch": str(batch),
        "max_wait_ms": str(1e3 * wait_s),
    }
    return rec(device, key=key, workload="infer", metrics=metrics, params=settings | params, tags=tags)


def _said(runs: list) -> tuple[str, str, list]:
    judged = judge(compare(runs))
    (line,) = judged.serving.values()
    return line, terminal_table(judged), answers(judged, lambda s: s.config_key)


def test_the_cheaper_device_within_the_promise_by_how_much_and_at_which_batch_setting() -> None:
    """Each device at its cheapest among its batch settings (config keys apart, so no pair of their
    own): the GPU at batch 16 beats its own batch 1, the CPU at batch 4 its batch 1; the answer names
    the GPU, 0.25x the CPU's cost per million, and both settings (fails before: no serving answer)."""
    runs = [
        served("cpu", 100.0, 4.0, 1, 0.0, "c1"),
        served("cpu", 150.0, 2.0, 4, 0.005, "c4"),
        served("cuda:0", 900.0, 1.0, 1, 0.0, "g1"),
        served("cuda:0", 3000.0, 0.5, 16, 0.005, "g16"),
    ]
    line, terminal, said = _said(runs)
    assert line.startswith(f"within p99 {fmt_s(PROMISE)}, serve on the A10:"), line
    assert f"at {fmt_x(0.25)} its cost per million predictions" in line
    assert f"cuda:0 (A10) held 3,000/s at batch up to 16, waiting up to {fmt_s(0.005)}" in line
    assert f"cpu (EPYC) held 150/s at batch up to 4, waiting up to {fmt_s(0.005)}" in line
    assert "missing" not in line
    assert f"serving: infer · resnet18 · max_batch 16 · max_wait_ms 5.0: {line}" in terminal
    assert said[-1] == (f"serving g16: {line}", ())


def test_one_device_says_what_it_held_and_what_is_missing() -> None:
    """A model served on the CPU alone: its QPS, setting and cost per million, and that a GPU side is
    missing; a GPU side that ran no server scenario is named as missing one."""
    timed = rec("cuda:0", key="t", workload="infer", metrics={SERVE_RATE: 5000.0, "time/total_s": 9.0},
                params={"model": "resnet18", "p99_ms": "50", "max_batch": "1", "max_wait_ms": "0.0"})  # fmt: skip
    line, _, _ = _said([served("cpu", 150.0, 2.0, 4, 0.0, "c4")])
    assert line == (
        f"within p99 {fmt_s(PROMISE)} only cpu (EPYC) held 150/s at batch up to 4, {fmt_money(2.0)} per "
        "million predictions; missing: a GPU side (the same infer flags with --device cuda)"
    )
    line, _, _ = _said([served("cpu", 150.0, None, 4, 0.0, "c4"), timed])
    assert "missing: a GPU side" not in line
    assert "a price for cpu" in line
    assert "a server scenario on cuda:0 (A10) (scenarios server): it held no QPS within the promise" in line


def test_two_models_and_two_promises_are_answered_apart() -> None:
    """Another model, or the same one at another promise, is its own answer, never a device's best."""
    runs = [served("cpu", 150.0, 2.0, 4, 0.0, "a"), served("cuda:0", 3000.0, 0.5, 16, 0.0, "b")]
    runs += [served("cuda:0", 10.0, 0.1, 1, 0.0, "c", model="resnet50")]
    runs += [served("cpu", 10.0, 0.1, 1, 0.0, "d", p99_ms="10")]
    judged = judge(compare(runs))
    assert len(judged.serving) == 3
    pairs = [c for c in judged.serving if c.pair is not None]
    assert len(pairs) == 1 and {s.config_key for s in pairs[0].bests} == {"a", "b"}


def test_the_report_draws_p99_against_qps_per_device_from_the_runs_server_tests(tmp_path) -> None:
    """Each device's server tests (flat keys, as log_served writes them) make one chart per served
    model, listed in report.md; runs that logged no tests make none (fails before: no such chart)."""
    from devicebench.report.read.points import server_tests
    from devicebench.report.render.files import write_report
    from devicebench.schema import loadgen_test_key

    def tested(run, via: str, tests: list[tuple[float, float, bool]]):
        for i, (qps, p99, valid) in enumerate(tests):
            figures = {"qps": qps, "p99_s": p99, "valid": float(valid)}
            run.metrics.update({loadgen_test_key(via, i, k): v for k, v in figures.items()})
        return run

    cpu = tested(
        served("cpu", 150.0, 2.0, 4, 0.0, "c"),
        "http",
        [(60, 0.01, True), (120, 0.03, True), (240, 0.4, False)],
    )
    gpu = tested(
        served("cuda:0", 3000.0, 0.5, 16, 0.0, "g"), "in_process", [(900, 0.004, True), (3000, 0.02, True)]
    )
    assert server_tests(cpu) == {"http": [(60, 0.01, True), (120, 0.03, True), (240, 0.4, False)]}
    judged = judge(compare([cpu, gpu]))
    (choice,) = judged.serving
    assert [(c.side.device, c.via, len(c.tests)) for c in choice.curves] == [
        ("cuda:0", "in_process", 2),
        ("cpu", "http", 3),
    ]
    files = write_report(judged, tmp_path / "r", {})
    assert (tmp_path / "r" / "p99_vs_qps_1.png").stat().st_size > 0
    assert "p99_vs_qps_1.png" in (tmp_path / "r" / "report.md").read_text()
    bare = served("cpu", 150.0, 2.0, 4, 0.0, "c")
    files = write_report(judge(compare([bare])), tmp_path / "s", {})
    assert not [f for f in files if "p99_vs_qps" in f.name]
