"""`make gpu-check`: its steps chosen by key, and a budget that ends every step inside a lent machine's
limit with the table still written (on the H100 of 2026-11-24 the whole took ~13 minutes and was killed
at its limit with its last step unstarted and no table). The steps here are small Python commands: the
runner is what is tested, on any host; the real steps need a GPU."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import STEPS, Step, chosen, parse, run_steps


def test_steps_are_chosen_by_key_in_their_own_order() -> None:
    def names(keys: list[str]) -> list[str]:
        return [step.name for step in chosen(keys)]

    assert names([]) == [step.name for step in STEPS]
    assert names(["overhead", "tests"]) == ["gpu tests", "harness overhead"]
    assert names(["demo"]) == ["demo plan"]
    assert names(["overhead", "fixed"]) == ["fixed cost", "harness overhead"]
    # the suspects' step costs minutes beyond the 10 the default steps aim at: run only when named
    assert "repeat suspects" not in names([])
    assert names(["repeat", "tests"]) == ["gpu tests", "repeat suspects"]


def test_an_unknown_step_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(
        SystemExit, match=r"unknown step 'plans'; expected some of tests, demo, plan, fixed, overhead, repeat"
    ):
        chosen(["plans"])


def test_a_bad_step_is_one_line_and_exit_2_before_anything_starts() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "plans"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "gpu-check: unknown step 'plans'; expected some of tests, demo, plan, fixed, overhead, repeat"
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--budget", "soon"], "gpu-check: argument --budget: expected a number of seconds > 0, got 'soon'"),
        (["--budget", "0"], "gpu-check: argument --budget: expected a number of seconds > 0, got '0'"),
        (["--budget", "inf"], "gpu-check: argument --budget: expected a number of seconds > 0, got 'inf'"),
        (["--budget"], "gpu-check: argument --budget: expected one argument"),
        (["--logs", "/nonexistent/out"], "gpu-check: --logs '/nonexistent/out' is not a folder"),
        (["--bugdet", "540"], "gpu-check: unrecognized arguments: --bugdet 540"),
    ],
)
def test_a_bad_budget_or_logs_folder_is_one_line_naming_it(args: list[str], line: str) -> None:
    with pytest.raises(SystemExit) as refused:
        parse(["demo", *args])
    assert (str(refused.value), refused.value.code) == (line, 2)


def test_steps_budget_and_logs_may_come_in_any_order() -> None:
    ns = parse(["demo", "--budget", "540", "tests", "--logs", "."])
    assert [s.key for s in ns.steps] == ["tests", "demo"] and ns.budget == 540.0 and ns.logs == Path(".")


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (ended, not yet reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


# A step that starts a grandchild deaf to SIGTERM (it writes its pid), then waits for ever.
SLOW = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; signal.signal(signal.SIGTERM, "
    "signal.SIG_IGN); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)", sys.argv[1]])
print("slow started", flush=True)
time.sleep(300)
"""


def test_a_budget_cuts_a_slow_step_with_all_it_started_and_the_next_step_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 1.0)
    monkeypatch.setattr(gpu_check, "TERM_GRACE_S", 2.0)
    pid_file = tmp_path / "grandchild.pid"
    steps = [
        Step("quick", "quick", _py("print('quick ran')"), 1),
        Step("slow", "slow", [*_py(SLOW), str(pid_file)], 1),
        Step("last", "last", _py("print('last ran')"), 1),
    ]
    t0 = time.monotonic()
    quick, slow, last = run_steps(steps, budget_s=15, logs=tmp_path, title="gpu-check on a test")
    took = time.monotonic() - t0

    assert (quick.code, quick.cut, last.code, last.cut) == (0, False, 0, False)
    assert slow.cut and not slow.ok
    # quick left most of its third unused: slow's share is more than a third, and slow ended within it
    # plus the grace (SIGTERM, then SIGKILL for the grandchild that ignored it)
    assert 5.0 < slow.share_s < 7.5 and slow.share_s <= slow.seconds < slow.share_s + 2.0 + 3.0
    assert took < 15 + 2.0 + 3.0
    assert _gone(int(pid_file.read_text()))
    log = (tmp_path / "gpu-check.log").read_text()
    said = ("quick ran", "slow started", "last ran")
    assert tuple(line for line in log.splitlines() if line in said) == said
    assert log.startswith("gpu-check on a test\n")
    assert "=== slow: " in log and "(its share of the budget: " in log
    table = (tmp_path / "gpu-check.md").read_text().splitlines()
    assert table[0] == "| step | exit | seconds |" and len(table) == 5
    assert table[2].startswith("| quick | 0 |") and table[4].startswith("| last | 0 |")
    assert table[3].startswith(f"| slow | cut at its {slow.share_s:.0f} s |")


def test_a_step_the_budget_leaves_no_time_for_is_not_started_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 2.0)
    monkeypatch.setattr(gpu_check, "TERM_GRACE_S", 2.0)
    steps = [  # the sleeper's share is three quarters of the budget; what it leaves is under the minimum
        Step("sleeper", "sleeper", _py("import time; time.sleep(300)"), 3),
        Step("never", "never", _py("print('never ran')"), 1),
    ]
    sleeper, never = run_steps(steps, budget_s=6, logs=tmp_path)
    assert sleeper.cut and sleeper.share_s == pytest.approx(4.5, abs=0.5)
    assert (never.code, never.ok) == (None, False)
    assert "never ran" not in (tmp_path / "gpu-check.log").read_text()
    assert (tmp_path / "gpu-check.md").read_text().splitlines()[-1] == "| never | not started | 0 |"


def test_without_a_budget_a_step_runs_to_its_end_and_its_exit_code_is_kept(tmp_path: Path) -> None:
    steps = [Step("fails", "fails", _py("import sys, time; time.sleep(1); sys.exit(3)"), 1)]
    (done,) = run_steps(steps, logs=tmp_path)
    assert (done.code, done.cut, done.share_s, done.ok) == (3, False, None, False)
    assert (tmp_path / "gpu-check.md").read_text().splitlines()[-1] == "| fails | 3 | 1 |"
    assert os.path.getsize(tmp_path / "gpu-check.log") > 0
