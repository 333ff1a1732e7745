"""How steady the host's CPU is (host/steadiness.py), and what a served model's run says of it
(util/busy_host.tail_caveat): a fixed piece of work timed back to back, its p99 over its median."""

from __future__ import annotations

import threading
import time

from test_report_logic import pair, rec, side

from devicebench.host.steadiness import host_tail
from devicebench.report.judge.pair_rules import explain, explain_side
from devicebench.report.judge.reliability import unsteady_side
from devicebench.run.run_line import summary_line
from devicebench.schema import (
    HOST_TAIL_P50_S,
    HOST_TAIL_P99_S,
    HOST_TAIL_RATIO,
    SERVE_P99_BOUND,
    SERVE_RATE,
    glance_key,
)
from devicebench.util.busy_host import UNSTEADY_RATIO, tail_caveat
from devicebench.util.fmt import fmt_x


def test_a_cpu_taken_in_bursts_reads_unsteady() -> None:
    """A thread that takes the interpreter for 10 ms every 50 ms slows the pieces it lands on, as a
    hypervisor that slows the vCPU now and then does: the p99 stands well above the median."""
    stop = threading.Event()

    def bursts() -> None:
        while not stop.is_set():
            time.sleep(0.04)
            end = time.perf_counter() + 0.01
            while time.perf_counter() < end:
                pass

    thread = threading.Thread(target=bursts, daemon=True)
    thread.start()
    try:
        tail = host_tail(1.0)
    finally:
        stop.set()
        thread.join()
    assert 0 < tail[HOST_TAIL_P50_S] < tail[HOST_TAIL_P99_S]
    assert tail[HOST_TAIL_RATIO] == tail[HOST_TAIL_P99_S] / tail[HOST_TAIL_P50_S] >= UNSTEADY_RATIO, tail
    assert tail_caveat(tail).startswith("unsteady host: a fixed piece of work's p99 was ")


def test_a_served_runs_line_says_an_unsteady_host_and_not_a_steady_one() -> None:
    glance = {glance_key("latency_p50_s"): 0.015, glance_key("latency_p99_s"): 0.07}
    unsteady = summary_line("infer", "cpu", glance, "no price table", host={HOST_TAIL_RATIO: 2.9})
    assert f"unsteady host: a fixed piece of work's p99 was {fmt_x(2.9)} its median" in unsteady
    assert "as much as the model" in unsteady
    steady = summary_line("infer", "cpu", glance, "no price table", host={HOST_TAIL_RATIO: 1.2})
    assert "unsteady" not in steady and "unsteady" not in summary_line("infer", "cpu", glance, "x")


def test_the_report_says_a_served_side_measured_on_an_unsteady_host() -> None:
    """A served side whose runs' probe read unsteady has a verdict before any other, alone or paired,
    naming its worst run's ratio; a steady side or one nobody probed has none."""
    served = {SERVE_RATE: 8.0, SERVE_P99_BOUND: 0.05, "time/total_s": 60.0}
    steady = [rec("cpu", workload="infer", metrics={**served, HOST_TAIL_RATIO: r}) for r in (1.1, 1.2)]
    shaky = [rec("cpu", workload="infer", metrics={**served, HOST_TAIL_RATIO: r}) for r in (1.2, 2.6)]
    gpu = [rec("cuda:0", workload="infer", metrics={**served, SERVE_RATE: 400.0})]
    said = f"cpu on an unsteady host: a fixed piece of work's p99 was {fmt_x(2.6)} its median"
    assert unsteady_side(side(shaky)).startswith(said)
    assert explain_side(side(shaky))[0] == unsteady_side(side(shaky))
    assert unsteady_side(side(steady)) is None and unsteady_side(side(gpu)) is None
    assert explain(pair(shaky, gpu))[0] == unsteady_side(side(shaky))
    assert not any("unsteady" in line for line in explain(pair(steady, gpu)))
