"""`make gpu-check STEPS=...` splits the first look at a GPU host into commands that each fit a lent
machine's 10-minute limit (the whole took ~13 minutes on the H100 of 2026-11-24)."""

import subprocess
import sys

import pytest

from benchmarks.gpu_check import STEPS, chosen


def test_steps_are_chosen_by_key_in_their_own_order() -> None:
    assert [n for n, _ in chosen([])] == [name for _, name, _ in STEPS]
    assert [n for n, _ in chosen(["overhead", "tests"])] == ["gpu tests", "harness overhead"]
    assert [n for n, _ in chosen(["demo"])] == ["demo plan"]
    assert [n for n, _ in chosen(["overhead", "fixed"])] == ["fixed cost", "harness overhead"]
    # the suspects' step costs minutes beyond the 10 the default steps aim at: run only when named
    assert "repeat suspects" not in [n for n, _ in chosen([])]
    assert [n for n, _ in chosen(["repeat", "tests"])] == ["gpu tests", "repeat suspects"]


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
