"""Every command's --help, and the flags a newcomer reads there: the commands are found from the parser
itself, so a new command is covered the day it is added. Parse only: nothing here trains or imports
torch."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicebench import __version__
from devicebench.config.fields import Unset, param
from devicebench.config.workloads import CONFIGS, TRAINING_WORKLOADS, WORKLOADS
from devicebench.report.cli import parse_deadline
from devicebench.report.command import budget_text
from devicebench.report.judge.judgement import judge
from devicebench.report.model.comparison import compare
from devicebench.report.read.records import RunRecord
from devicebench.run.cli import build_parser, main
from devicebench.schema import COST_PER_MILLION, SERVE_P99, SERVE_RATE


@pytest.fixture(autouse=True)
def _nowhere_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A scratch directory and a store that is refused at once (a help that ran the command would end
    in another error, not exit 0), and the environment `main` changes put back."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/a-file/mlflow.db")
    saved = os.environ.copy()
    yield
    os.environ.clear()
    os.environ.update(saved)


def _commands() -> list[str]:
    """The commands `devicebench --help` lists, read from the parser: none is named in this test."""
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(subs.choices)


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    out = capsys.readouterr()
    assert done.value.code == 0, f"{' '.join(argv)}: exit {done.value.code}: {out.err.strip()}"
    return out.out


def test_the_commands_are_found_not_listed() -> None:
    assert {"matmul", "cifar", "unet", "model", "infer", "compare", "suite", "sync", "tune"} <= set(
        _commands()
    )


@pytest.mark.parametrize(
    "argv",
    [[c, "--help"] for c in _commands()] + [["tune", w, "--help"] for w in TRAINING_WORKLOADS],
    ids=lambda argv: " ".join(argv[:-1]),
)
def test_every_command_help_exits_0_with_a_description(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 1: `infer --help` crashed on a bare % in a flag's help. Each help also says what the
    command does (`sync --help` had only its flag) in words for its user, not its source's modules."""
    out = _help(argv, capsys)
    usage, _, rest = out.partition("\n\n")
    description = rest.split("\n\n")[0]
    assert usage.startswith(f"usage: devicebench {argv[0]}") and description.strip(), out
    assert not description.lower().startswith(("positional arguments", "options")), out
    assert "spec.py" not in out and "suite.py" not in out and "import" not in description, description


def test_a_percent_sign_in_any_field_help_is_shown_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    out = " ".join(_help(["infer", "--help"], capsys).split())
    assert "(p99 rests on the slowest 1 %)" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _help(["--version"], capsys).strip() == f"devicebench {__version__}"


def test_a_field_with_an_unset_word_says_what_its_text_is(capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 7: `--cpu_shape` and `--price_shape` were typed "a path", as every field with a word for
    "not set" was; each now names its own kind, and a new such field must."""
    out = " ".join(_help(["cifar", "--help"], capsys).split())
    assert "[an OCI CPU shape name, or default (the default)]" in out
    assert "[an OCI GPU shape name, or none (the default)]" in out
    assert "[a directory, or auto (the default)]" in out
    for cls in CONFIGS.values():
        for f in dataclasses.fields(cls):
            assert bool(f.metadata["unset"]) == bool(f.metadata["kind"]), f.name
    with pytest.raises(TypeError, match="defaults to its empty value"):
        param("x", "a text", unset=Unset("auto", "a text"))


def test_tune_takes_both_spellings_of_its_budget() -> None:
    """Finding 7: every flag takes `--a_b` and `--a-b`; `--tune-budget-s` was refused."""
    for flag in ("--tune_budget_s", "--tune-budget-s"):
        args = build_parser("tune", ["tune", "cifar"]).parse_args(["tune", "cifar", flag, "30"])
        assert args.tune_budget_s == 30.0


def test_every_flag_of_every_command_takes_both_spellings() -> None:
    """The class of finding 7: a flag spelt `--a_b` has its `--a-b` twin on every command (tune's own
    `--tune_precision` was added without one)."""
    import argparse

    top = build_parser("tune", ["tune", "cifar"])
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name in sub.choices:
        parser = build_parser(name, [name, "cifar"] if name == "tune" else [name])
        (cmd,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in cmd.choices[name]._actions:
            flags = set(action.option_strings)
            for flag in (f for f in flags if "_" in f):
                assert flag.replace("_", "-") in flags, f"{name} {flag}"


def test_compare_help_names_every_workload_and_every_unit(capsys: pytest.CaptureFixture[str]) -> None:
    out = " ".join(_help(["compare", "--help"], capsys).split())
    assert f"{', '.join(WORKLOADS)}, suite, report (comma-separated)" in out
    budget = out.partition("--budget")[2]
    for unit in ("epochs", "GFLOP", "million predictions", "runs"):
        assert unit in budget, unit
    assert "p99 latency" in out.partition("--deadline TIME")[2]


def test_a_deadline_in_milliseconds() -> None:
    """Finding 7: `--deadline 2ms` was refused while `0.5s` prints as `500.00 ms`."""
    assert parse_deadline("2ms") == pytest.approx(0.002)
    assert parse_deadline("0.5 MS") == pytest.approx(0.0005)
    assert parse_deadline("0.5s") == pytest.approx(0.5)


_ids = itertools.count()


def _served(device: str, p99_s: float, usd_per_million: float) -> RunRecord:
    """A finished infer run of one model, priced, serving at batch 1 with this p99."""
    tags = {
        "devicebench.workload": "infer",
        "devicebench.device": device.split(":")[0],
        "devicebench.device.resolved": device,
        "devicebench.device.name": "EPYC" if device == "cpu" else "A10",
        "devicebench.config_key": "served",
        "devicebench.data": "synthetic",
        "devicebench.host.cpu_model": "EPYC",
        "devicebench.price.usd_per_hour": "2.0",
        "devicebench.price.currency": "USD",
        "devicebench.price.source": "override",
    }
    metrics = {
        SERVE_P99: p99_s,
        SERVE_RATE: 1000.0,  # a million predictions: 1,000 s on both sides
        COST_PER_MILLION: usd_per_million,
        "cost/usd_per_hour": 2.0,
        "time/total_s": 10.0,
    }
    params = {"model": "resnet18", "batch_sizes": "1,8,32"}
    return RunRecord(f"r{next(_ids)}", "FINISHED", next(_ids), tags=tags, params=params, metrics=metrics)


def test_a_serving_deadline_is_held_against_the_p99_latency() -> None:
    """Finding 7: a deadline for serving was held against the time of a million predictions; a server
    wants a request's p99. The CPU is cheaper with a p99 of 30 ms, the GPU dearer with 4 ms."""
    judged = judge(compare([_served("cpu", 0.030, 1.0), _served("cuda:0", 0.004, 3.0)]))
    within = budget_text(judged, deadline=0.010).splitlines()[-1]
    assert within.startswith("  within 10.00 ms per request at p99: cheapest cuda:0"), within
    loose = budget_text(judged, deadline=0.050).splitlines()[-1]
    assert loose.startswith("  within 50.00 ms per request at p99: cheapest cpu"), loose
