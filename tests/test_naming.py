"""One naming scheme for every launch path: workload, device, then what differs from the defaults."""

from __future__ import annotations

import pytest

from devicebench.config.fields import build_config
from devicebench.config.naming import is_generated, run_name
from devicebench.config.workloads import CONFIGS
from devicebench.plan.suite import next_commands


def cfg(workload: str, **values: str):
    return build_config(CONFIGS[workload], values)


def test_the_device_comes_right_after_the_workload_and_defaults_are_not_repeated() -> None:
    assert run_name("cifar", "cuda:0", cfg("cifar")) == "cifar · cuda:0"
    name = run_name("cifar", "cuda:0", cfg("cifar", batch_size="64", width="4", precision="bf16"))
    assert name == "cifar · cuda:0 · bs 64 · w 4 · bf16"


def test_where_and_how_verbosely_a_run_works_is_not_in_its_name() -> None:
    """seed, data_dir and log_every are not the work (config.is_keyed): two runs of the same work on
    two devices differ in their names by the device alone."""
    a = run_name("cifar", "cpu", cfg("cifar", seed="3", log_every="10", data="synthetic"))
    b = run_name("cifar", "cuda:0", cfg("cifar", data="synthetic"))
    assert a == "cifar · cpu · synthetic" and b == "cifar · cuda:0 · synthetic"


def test_matmul_booleans_and_a_suite_repeat() -> None:
    assert run_name("matmul", "cpu", cfg("matmul", sizes="256,512")) == "matmul · cpu · n 256,512"
    assert run_name("unet", "cpu", cfg("unet", channels_last="true"), "repeat 2/3") == (
        "unet · cpu · nhwc · repeat 2/3"
    )


def test_a_name_stays_short_with_the_most_telling_differences_first() -> None:
    """The runs list cuts names at about 30 characters: `cifar · cpu · ep 1…` hid the batch size."""
    demo = cfg("cifar", epochs="1", batch_size="32", lr="0.02", data="synthetic", train_limit="2000")
    assert run_name("cifar", "cpu", demo) == "cifar · cpu · bs 32 · synthetic · ep 1 · +2 more"


def test_a_long_name_is_cut_to_mlflows_limit() -> None:
    assert (
        len(run_name("matmul", "cpu", cfg("matmul", sizes=",".join(str(1000 + i) for i in range(100)))))
        == 250
    )


@pytest.mark.parametrize(
    ("name", "generated"),
    [
        ("capable-squid-859", True),
        ("abundant-hippopotam", True),  # MLflow cuts its names at 20 characters
        (None, True),
        ("cifar · cpu", False),
        ("nightly-a10", False),  # a name a person chose: `mlflow run --run-name nightly-a10`
        ("my run", False),
    ],
)
def test_only_a_name_mlflow_made_up_is_replaced(name: str | None, generated: bool) -> None:
    assert is_generated(name) is generated


def test_the_printed_next_commands_work_in_a_fresh_shell(tmp_path, monkeypatch) -> None:
    """A new shell has no venv on PATH: `mlflow` alone is `command not found` there."""
    monkeypatch.chdir(tmp_path)
    compare, ui = next_commands("sqlite:///mlflow.db")  # the UI last: the links below open in it
    assert "/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db" in ui
    assert "/bin/devicebench compare" in compare
    (tmp_path / "Makefile").write_text("ui:\n")
    assert next_commands("sqlite:///mlflow.db")[1].startswith("open the MLflow UI on these runs: make ui")
    assert next_commands("http://127.0.0.1:5000")[1] == "open the MLflow UI: http://127.0.0.1:5000"
