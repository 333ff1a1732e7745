"""A newcomer's CLI: no silent abbreviations, the closest match named, booleans as plain flags, and a
word (not an empty string) for every "not set". Parse only: nothing here trains or imports torch."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicebench.config.fields import build_config, config_from_args, config_key, to_params
from devicebench.config.workloads import CONFIGS, CifarConfig, UNetConfig
from devicebench.errors import UsageError
from devicebench.run.cli import COMMANDS, build_parser, main
from servers import one_error_line


@pytest.fixture(autouse=True)
def _nowhere_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that is refused at once, in a scratch directory: a command the CLI wrongly accepted (as
    it accepted `--repeat 2` for `--repeats`) ends in a second with another error, instead of running."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/a-file/mlflow.db")


@pytest.fixture(autouse=True)
def _environment_kept() -> Iterator[None]:
    """`main` sets process-wide defaults (MLFLOW_LOGGING_LEVEL=WARNING, ...) as a command should; in this
    test process they leaked into the servers later tests start (a schema upgrade's INFO lines vanished
    from a server's log), so the environment is put back as it was."""
    saved = os.environ.copy()
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["cifar", "--epoch", "1"], "unrecognized arguments: --epoch 1; did you mean --epochs?"),
        (["cifar", "--epoch=1"], "did you mean --epochs?"),
        (["cifar", "--batchsize", "8"], "did you mean --batch_size?"),
        (["unet", "--image-sise", "64"], "did you mean --image_size?"),
        (["matmul", "--repeat", "2"], "did you mean --repeats?"),
        (["cifr"], "invalid choice: 'cifr'; did you mean cifar?"),
        (["compare", "--thresh", "0.2"], "did you mean --threshold?"),
        (["suite", "experiments/demo.yaml", "--dry-r"], "did you mean --dry-run?"),
        (["cifar", "--no-compil"], "did you mean --no-compile?"),
    ],
)
def test_an_abbreviated_or_mistyped_name_is_refused_naming_the_closest(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--epoch 1` was silently taken as `--epochs` (and `--thresh`, `--dry-r` as theirs): now exit 2."""
    assert main(argv) == 2
    assert needle in one_error_line(capsys.readouterr().err)


def test_a_name_with_no_close_match_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matmul", "--colour", "red"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.endswith("unrecognized arguments: --colour red")


def _cifar(*argv: str) -> CifarConfig:
    return config_from_args(CifarConfig, build_parser("cifar").parse_args(["cifar", *argv]))


@pytest.mark.parametrize(
    ("argv", "compile_", "channels_last"),
    [
        (("--compile",), True, False),
        (("--compile", "--epochs", "3"), True, False),
        (("--no-compile",), False, False),
        (("--compile", "true"), True, False),
        (("--compile", "false", "--channels-last"), False, True),
        (("--channels_last", "--no-channels_last"), False, False),  # the last one wins
    ],
)
def test_a_boolean_is_a_flag_a_negated_flag_or_an_explicit_value(
    argv: tuple[str, ...], compile_: bool, channels_last: bool
) -> None:
    cfg = _cifar(*argv)
    assert (cfg.compile, cfg.channels_last) == (compile_, channels_last)


def test_every_boolean_parameter_has_both_flags() -> None:
    checked = 0
    for name, cls in CONFIGS.items():
        parser = build_parser(name)
        for f in dataclasses.fields(cls):
            if typing.get_type_hints(cls)[f.name] is bool:
                on = config_from_args(cls, parser.parse_args([name, f"--{f.name}"]))
                off = config_from_args(cls, parser.parse_args([name, f"--no-{f.name.replace('_', '-')}"]))
                assert (getattr(on, f.name), getattr(off, f.name)) == (True, False), f.name
                checked += 1
    # cifar: 6, unet: 5, model: 4, infer: 3 (tune), matmul: 1 (illustrative_price everywhere)
    assert checked == 19


def test_a_boolean_flag_refuses_a_value_that_is_not_one() -> None:
    with pytest.raises(UsageError, match=r"^--compile: 'maybe' is not true or false$"):
        _cifar("--compile", "maybe")


def test_help_shows_the_negated_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["cifar", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--compile [true|false]" in out and "--compile alone: true, --no-compile: false" in out


def test_unset_words_mean_the_empty_value_and_are_what_is_logged() -> None:
    """`mlflow run` logged the empty default as `''`; the word is logged by both paths now."""
    for given in ({}, {"data_dir": "", "train_list": "", "val_list": ""}, {"data_dir": "AUTO"}):
        cfg = build_config(UNetConfig, given)
        assert (cfg.data_dir, cfg.train_list, cfg.val_list) == ("", "", "")  # what the workload reads
        params = to_params(cfg)
        assert (params["data_dir"], params["train_list"], params["val_list"]) == (
            "auto",
            "default",
            "default",
        )
    assert to_params(build_config(CifarConfig, {}))["data_dir"] == "auto"
    assert build_config(CifarConfig, {"data_dir": "/data/x"}).data_dir == "/data/x"


def test_config_keys_do_not_change_by_accident() -> None:
    """The key hashes the params as a run logs them (an unset field as its word); a nightly's baseline
    pairs with tonight's run only while the key of the same work stays the same, so a change here is a
    decision, said in its commit (adding `compile_mode` changed every cifar key once; hashing unet's
    unset list words as logged, not as "", changed unet's). `cpu_threads` (not the work) changes
    no key, and today's default precision (PyTorch's math) is its own work beside strict fp32."""
    assert config_key("unet", UNetConfig(precision="fp32")) == "03eceb0298efb6f8"
    assert config_key("cifar", CifarConfig(precision="fp32")) == "c30f098c52eb502e"
    assert config_key("cifar", CifarConfig(precision="fp32", cpu_threads=4)) == "c30f098c52eb502e"
    assert config_key("cifar", CifarConfig()) != "c30f098c52eb502e"


def test_compare_and_suite_default_to_their_words() -> None:
    compare = build_parser("compare").parse_args(["compare"])
    assert (compare.workload, compare.since, compare.filter, compare.host, compare.out) == (
        "all",
        "all",
        "none",
        "any",
        "auto",
    )
    assert build_parser("suite").parse_args(["suite", "p.yaml"]).resume == "none"


# Words a phrase does not end on: a help line ending on one reads as cut off mid-sentence.
DANGLING = {
    "a",
    "an",
    "and",
    "as",
    "at",
    "by",
    "for",
    "in",
    "its",
    "of",
    "on",
    "or",
    "so",
    "than",
    "the",
    "then",
    "to",
    "with",
}


def test_every_command_has_its_whole_line_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41: `devicebench --help` ended `tune` on "...then run its CPU side so". Each command is
    listed with its whole line, and that line ends on a word a phrase can end on."""
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    for name, line in COMMANDS.items():
        assert f" {name} {line} " in f"{shown} ", name
        assert line.split()[-1].lower() not in DANGLING, f"{name}: {line}"
