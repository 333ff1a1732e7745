"""The suite → run contract: what crosses the process boundary, written in one place and read in one."""

from __future__ import annotations

import os
import re
from pathlib import Path

from devicebench.plan.handoff import STORE_CHECK_FRESH_S, Handoff, child_env, store_mark

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"


def test_a_handoff_survives_the_trip_through_the_environment() -> None:
    sent = Handoff("parent123", "7", "nightly:parent123", "ab12cd", "003 matmul device=cuda")
    env = sent.env({"MLFLOW_RUN_ID": "parent123", "PATH": "/bin", "PYTHONPATH": "/elsewhere"})
    assert Handoff.from_env(env) == sent
    assert "MLFLOW_RUN_ID" not in env, "a child that inherits the parent's run logs into it"
    assert env["MLFLOW_EXPERIMENT_ID"] == "7" and env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SRC.parent), "/elsewhere"]
    assert sent.tags() == {
        "devicebench.suite": "nightly:parent123",
        "devicebench.suite.item": "ab12cd",
    }


def test_a_run_started_by_a_person_has_no_handoff() -> None:
    assert Handoff.from_env({"PATH": "/bin", "DEVICEBENCH_PARENT_RUN_ID": "stale"}) is None


def test_a_long_run_name_is_cut_to_mlflows_limit() -> None:
    env = Handoff("p", "1", "s:p", "i", "x" * 1000).env({})
    assert len(env["DEVICEBENCH_RUN_NAME"]) == 250


def test_the_report_child_never_gets_the_parent_run() -> None:
    assert "MLFLOW_RUN_ID" not in child_env({"MLFLOW_RUN_ID": "r"})


def test_nothing_else_reads_or_writes_the_handoff_variables() -> None:
    """The contract is one module: a stray os.environ["DEVICEBENCH_SUITE..."] elsewhere is a second one."""
    names = re.compile(r"DEVICEBENCH_(SUITE|SUITE_ITEM|PARENT_RUN_ID|RUN_NAME)\b")
    stray = [
        f"{p.relative_to(SRC)}:{i}"
        for p in SRC.rglob("*.py")
        if p.name != "handoff.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if names.search(line)
    ]
    assert not stray, stray


def test_a_run_skips_its_store_check_only_for_the_store_its_plan_just_checked() -> None:
    uri = "postgresql://bench:secret@db/mlflow"
    sent = Handoff("p", "1", "t:p", "i", "", log_model=False, store_checked=store_mark(uri, 1000.0))
    got = Handoff.from_env(sent.env({}))
    assert got == sent and not got.log_model
    assert "secret" not in got.store_checked, "the mark names the store by digest, never its password"
    assert got.store_is_checked(uri, now=1000.0 + STORE_CHECK_FRESH_S - 1)
    assert not got.store_is_checked(uri, now=1000.0 + STORE_CHECK_FRESH_S + 1), "too long ago"
    assert not got.store_is_checked("sqlite:///other.db", now=1001.0), "another store"
    assert not Handoff("p", "1", "t:p", "i", "").store_is_checked(uri), "no mark: the run checks"
