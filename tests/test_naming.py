"""One naming scheme for every launch path: workload, device, then what differs from the defaults."""

from __future__ import annotations

import pytest

from devicebench.config.fields import build_config, to_params
from devicebench.config.naming import is_generated, model_label, run_name, spelled
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


def test_a_model_run_names_its_model_and_data_even_at_their_defaults() -> None:
    """Issue 55 finding 6: `model · cpu · input 3x64x64` was resnet18 on synthetic images."""
    assert run_name("model", "cpu", cfg("model", input="3x64x64")) == (
        "model · cpu · resnet18 · synthetic · input 3x64x64"
    )
    assert run_name("infer", "cuda:0", cfg("infer")) == "infer · cuda:0 · resnet18"


def test_a_factory_is_named_by_its_file_or_module_never_its_whole_path() -> None:
    mine = cfg("model", model="/home/me/src/models/my_models.py:build")
    assert run_name("model", "cpu", mine) == "model · cpu · my_models:build · synthetic"
    assert model_label("mypkg.nets:small_cnn") == "nets:small_cnn"
    assert model_label("vit_b_16") == "vit_b_16"


def test_an_infer_run_is_named_by_what_it_served_never_by_its_uri() -> None:
    """The run is named after the URI's model is loaded, with `model` set to its logged name
    (run/workload.py): the opaque URI is in the params, not the name."""
    served = cfg("infer", model_uri="models:/m-0123456789abcdef", model="tiny-build")
    assert run_name("infer", "cpu", served) == "infer · cpu · tiny-build"


def test_a_limit_of_zero_reads_as_all() -> None:
    """`train 0 · test 0` meant every image and read as none, in run names and in report labels."""
    assert spelled("train_limit", "0") == "train all" and spelled("test_limit", "256") == "test 256"
    from devicebench.report.render.labels import default_label

    assert "train all" not in default_label("cifar", to_params(cfg("cifar")))  # a default is not named
    assert spelled("width", "0") == "w 0"  # only a limit's 0 means all


def test_the_run_line_says_an_accuracy_beside_its_chance() -> None:
    """Finding 8: a default model on synthetic data printed `acc 0.000`, which read as a bug: its
    1,000-class head scores what guessing does, and the line now says so."""
    from types import SimpleNamespace

    from devicebench.run.run_line import glance_metrics, summary_line

    result = SimpleNamespace(train_s=2.0, train_samples_per_s=256.0, accuracy=0.0, chance_accuracy=0.001)
    line = summary_line("model", "cpu", glance_metrics("model", result, {}), "no price")
    assert line.startswith("train 2.00 s · 256 img/s · acc 0.000 (chance 0.001) · cpu"), line
    cifar = SimpleNamespace(train_s=2.0, train_samples_per_s=256.0, accuracy=0.5)
    assert "acc 0.500 · cpu" in summary_line("cifar", "cpu", glance_metrics("cifar", cifar, {}), "no price")


def test_the_report_names_a_model_config_by_its_model_too() -> None:
    """A report label is a run name's words: the model and data of a `model` config are said even
    where they are the defaults, beside what tells its configs apart."""
    from devicebench.report.model.comparison import compare
    from devicebench.report.read.records import RunRecord
    from devicebench.report.render.labels import default_label, describe, varying_params

    assert default_label("model", to_params(cfg("model", input="3x64x64"))) == (
        "resnet18 · synthetic · input 3x64x64"
    )

    def run(i: int, bs: str) -> RunRecord:
        tags = {"devicebench.workload": "model", "devicebench.device": "cpu", "devicebench.config_key": bs}
        params = to_params(cfg("model", batch_size=bs))
        return RunRecord(f"r{i}", "FINISHED", i, tags=tags, params=params, metrics={"time/train_s": 1.0})

    sides = compare([run(1, "8"), run(2, "64")]).all_sides
    varying = varying_params(sides)
    assert sorted(describe(s, varying) for s in sides) == [
        "model · resnet18 · bs 64 · synthetic",
        "model · resnet18 · bs 8 · synthetic",
    ]
