"""Issue 56, "Reliability V": a user's folder, model, prices and spellings that were accepted wrongly or
refused badly (a folder walk through a link loop, an image that does not decode, costs that overflow,
spellings of one config keyed apart, a model whose output the run could not use, a lone last batch
under BatchNorm, a logged model without an input shape). In-process; no run but where one must be
shown not to exist."""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from devicebench.config.fields import build_config, config_key, to_params
from devicebench.config.workloads import InferConfig, MatmulConfig, ModelConfig, UNetConfig
from devicebench.data.loader import LoaderSettings, data_loader, one_line_data_errors
from devicebench.data.shaped import image_folders
from devicebench.errors import DataUnavailable, UsageError
from devicebench.host.context import LoadedModel
from devicebench.pricing.costs import log_costs, usable_price
from devicebench.pricing.prices import Price, Usage, price_side, pricing_for
from devicebench.tracking.protocol import MemoryTracker
from servers import MlflowServer, devicebench_env, one_error_line, run_cli, runs_of

SHAPE = (3, 8, 8)

# One torch thread for the in-process training and serving (conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ------------------------------------------------------------------- 1, 15: an ImageFolder's walk and files


def _folder(root: Path, classes: tuple[str, ...] = ("a", "b"), images: int = 2) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(images):
                Image.new("RGB", (8, 8), (40 * i, 90, 200)).save(root / split / name / f"{i}.jpg")


def test_a_link_up_in_a_class_folder_is_refused_naming_the_link(tmp_path: Path) -> None:
    _folder(tmp_path)
    os.symlink("..", tmp_path / "train" / "a" / "up")
    with pytest.raises(DataUnavailable, match=r"train/a/up is a link to .*a loop") as e:
        image_folders(tmp_path, SHAPE, 0, 0)
    assert e.value.param == "data_dir" and "\n" not in str(e.value)


def test_a_link_into_another_class_is_refused(tmp_path: Path) -> None:
    _folder(tmp_path)
    os.symlink(tmp_path / "train" / "b", tmp_path / "train" / "a" / "more")
    with pytest.raises(DataUnavailable, match=r"train/a/more is a link to .*outside the class folder"):
        image_folders(tmp_path, SHAPE, 0, 0)


def test_links_that_stay_inside_are_followed_once(tmp_path: Path) -> None:
    """A folder link inside its class folder (read once), a link to a file anywhere and a class folder
    that is itself a link are what a folder built of links holds: all followed."""
    _folder(tmp_path)
    sub = tmp_path / "train" / "a" / "sub"
    sub.mkdir()
    (tmp_path / "train" / "a" / "0.jpg").rename(sub / "0.jpg")
    os.symlink(sub, tmp_path / "train" / "a" / "alias")
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "train" / "b" / "1.jpg").rename(shared / "1.jpg")
    os.symlink(shared / "1.jpg", tmp_path / "train" / "b" / "1.jpg")
    (tmp_path / "val" / "b").rename(tmp_path / "val-b")
    os.symlink(tmp_path / "val-b", tmp_path / "val" / "b")
    train, val = image_folders(tmp_path, SHAPE, 0, 0)
    assert [(Path(p).name, c) for p, c in train.samples] == [
        ("1.jpg", 0),
        ("0.jpg", 0),
        ("0.jpg", 1),
        ("1.jpg", 1),
    ]
    assert len(val.samples) == 4


def test_without_links_the_walk_reads_what_torchvision_reads_in_its_order(tmp_path: Path) -> None:
    """`train_limit` takes the first images in ImageFolder's sorted order: the walk keeps that order."""
    from torchvision.datasets.folder import make_dataset

    from devicebench.data.image_folder import class_samples

    for name in (
        "c/a/1.jpg",
        "c/a-b/2.jpg",
        "c/a/x/3.jpg",
        "c/b.jpg",
        "c/a/0.jpg",
        "c/Z/9.jpg",
        "d/a.b/5.jpg",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    classes = {"c": 0, "d": 1}
    ours = class_samples(tmp_path, classes, lambda p: p.endswith(".jpg"))
    assert ours == make_dataset(str(tmp_path), classes, extensions=(".jpg",)) and len(ours) == 7


def test_a_truncated_jpeg_is_one_line_naming_the_file(tmp_path: Path) -> None:
    import torch

    _folder(tmp_path)
    bad = tmp_path / "train" / "b" / "1.jpg"
    bad.write_bytes(bad.read_bytes()[:200])
    train, _ = image_folders(tmp_path, SHAPE, 0, 0)
    loader = data_loader(train, LoaderSettings(4, torch.device("cpu"), 1), shuffle=False, persistent=False)
    with pytest.raises(DataUnavailable) as e, one_line_data_errors():
        list(loader)
    said = str(e.value)
    assert "\n" not in said and len(said) < 400, said
    assert said.startswith("--data_dir: ") and f"{bad} does not decode as an image" in said


@pytest.mark.parametrize(("link", "target"), [("c", "."), ("c", "a"), ("c", "a/inner")])
def test_a_class_folder_that_is_a_link_into_another_class_or_up_is_refused(
    tmp_path: Path, link: str, target: str
) -> None:
    _folder(tmp_path)
    (tmp_path / "train" / "a" / "inner").mkdir()
    (tmp_path / "val" / "c").mkdir()
    os.symlink(tmp_path / "train" / target, tmp_path / "train" / link)
    with pytest.raises(DataUnavailable, match=r"train/c is a link to "):
        image_folders(tmp_path, SHAPE, 0, 0)


# ------------------------------------------------------------------------------- 4: every cost is finite

POINTS = [
    SimpleNamespace(backend="torch", dtype="float32", size=n, gflops=g) for n, g in ((64, 5.0), (128, 20.0))
]


def _logged(price: Price | str, workload: str, result: object) -> dict[str, float]:
    tracker = MemoryTracker()
    log_costs(tracker, price, workload, 10.0, result, SimpleNamespace(epochs=1))
    return {name: value for name, value, _ in tracker.metrics}


def test_a_price_so_small_that_costs_overflow_logs_no_infinite_or_zero_cost() -> None:
    """5e-324 USD an hour: GFLOP per USD overflows to infinity (the store kept 1.797e308) and the run's
    cost underflows to 0. Neither is a cost; what is finite is still logged."""
    matmul = _logged(Price(usd_per_hour=5e-324), "matmul", POINTS)
    training = _logged(
        Price(usd_per_hour=5e-324), "model", SimpleNamespace(train_s=2.0, train_samples_per_s=1e-300)
    )
    for got in (matmul, training):
        assert all(math.isfinite(v) and v > 0 for v in got.values()), got
        assert got["cost/usd_per_hour"] == 5e-324 and "cost/usd" not in got
    assert not any("gflop_per_usd" in name for name in matmul)


def test_a_table_price_that_overflows_is_no_price(tmp_path: Path) -> None:
    """1e308 per OCPU-hour passes the table's checks; two OCPUs of it are infinity: the run is not
    priced (the reason is its `price.none`), and nothing infinite is logged."""
    table = tmp_path / "prices.yaml"
    table.write_text(
        "version: 1\nshapes:\n  VM.Flex: {usd_per_ocpu_hour: 1.0e+308, usd_per_gb_hour: 0.1, currency: USD, "
        "date: 2026-11-23, source: t}\n"
    )
    priced = price_side(pricing_for(0.0, 0.0, str(table), cpu_shape="VM.Flex"), {}, Usage("cpu", vcpus=4))
    assert isinstance(priced, Price) and priced.usd_per_hour == math.inf
    assert _logged(priced, "matmul", POINTS) == {}
    reason = usable_price(priced)
    assert reason == "as if on VM.Flex: 2 OCPUs + 2 GB comes to inf USD an hour, not a finite price"
    assert usable_price(Price(usd_per_hour=2.0)) == Price(usd_per_hour=2.0)


# -------------------------------------------------------- 5: one work, one config key, however it is spelt


@pytest.mark.parametrize(
    ("cls", "spellings"),
    [
        (
            ModelConfig,
            [{"input": "3x16x16"}, {"input": "3X16X16"}, {"input": "3×16×16"}, {"input": " 3 x 16 x16"}],
        ),
        (InferConfig, [{"input": "3x16x16"}, {"input": "3X16X16"}, {"input": "3×16×16"}]),
        (InferConfig, [{"batch_sizes": "1,8"}, {"batch_sizes": "8,1"}, {"batch_sizes": "8,1,8"}]),
        (MatmulConfig, [{"sizes": "64,128"}, {"sizes": "128,64"}, {"sizes": "128,64,128"}]),
        (MatmulConfig, [{"dtypes": "float32,float64"}, {"dtypes": "FLOAT64,float32"}, {}]),
        (MatmulConfig, [{"backends": "torch,numpy"}, {"backends": "numpy,torch"}, {}]),
        (ModelConfig, [{"model": "mine/tiny.py:build"}, {"model": "./mine//tiny.py:build"}]),
        (ModelConfig, [{"lr": "0.010"}, {"lr": "1e-2"}, {}]),
    ],
)
def test_spellings_read_as_one_work_are_logged_and_keyed_as_one(
    cls: type, spellings: list[dict[str, str]]
) -> None:
    configs = [build_config(cls, given) for given in spellings]
    assert len({config_key("w", c) for c in configs}) == 1
    assert len({tuple(to_params(c).items()) for c in configs}) == 1


def test_a_list_file_is_keyed_as_its_path_reads(tmp_path: Path) -> None:
    (tmp_path / "ids.txt").write_text("2007_000032\n")
    plain, dotted = (
        build_config(UNetConfig, {"data": "voc2012", "train_list": path})
        for path in (f"{tmp_path}/ids.txt", f"{tmp_path}/./ids.txt")
    )
    assert config_key("unet", plain) == config_key("unet", dotted)
    assert plain.train_list == f"{tmp_path}/ids.txt"


def test_the_defaults_keep_their_keys() -> None:
    """A nightly's baseline pairs with tonight's run only while a default's key is what it was."""
    assert to_params(MatmulConfig())["dtypes"] == "float64,float32"
    assert to_params(InferConfig())["batch_sizes"] == "1,8,32"
    assert to_params(ModelConfig())["input"] == "3x224x224"
    assert to_params(InferConfig())["input"] == "auto"


# ------------------------------------- 13, 14, smaller: a user's model whose output or batch the run could not use

FACTORIES = """
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, num_classes=3, norm=False, form="tensor"):
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, num_classes)
        self.norm = nn.BatchNorm1d(num_classes) if norm else nn.Identity()
        self.form = form

    def forward(self, x):
        y = self.norm(self.fc(x.flatten(1)))
        return {
            "tensor": y,
            "tuple": (y, x),
            "list": [y],
            "dict": {"logits": y},
            "mean": y.mean(0, keepdim=True),
            "loss": y.mean(),
        }[self.form]


def normed(num_classes=3):
    return Head(num_classes, norm=True)


def tupled(num_classes=3):
    return Head(num_classes, form="tuple")


def listed(num_classes=3):
    return Head(num_classes, form="list")


def named(num_classes=3):
    return Head(num_classes, form="dict")


def mean(num_classes=3):
    return Head(num_classes, form="mean")


def loss(num_classes=3):
    return Head(num_classes, form="loss")
"""


@pytest.fixture
def factories(tmp_path: Path) -> str:
    path = tmp_path / "heads.py"
    path.write_text(FACTORIES)
    return str(path)


def _model_run(factory: str, tmp_path: Path, **given: str) -> object:
    import torch

    from devicebench.host.context import Context
    from devicebench.workloads import model

    values = {"model": factory, "input": "3x8x8", "num_classes": "3", "epochs": "1", "test_limit": "4"}
    cfg = build_config(ModelConfig, {**values, **given})
    model.check(cfg)
    return model.run(cfg, Context(torch.device("cpu"), tmp_path, False), MemoryTracker())


@pytest.mark.parametrize("factory", ["tupled", "listed"])
def test_a_model_returning_a_tuple_or_a_list_trains_on_its_first_output(
    factories: str, tmp_path: Path, factory: str
) -> None:
    result = _model_run(f"{factories}:{factory}", tmp_path, batch_size="4", train_limit="8")
    assert result.task == "classification" and result.train_samples_per_s > 0


@pytest.mark.parametrize(
    ("factory", "needle"),
    [
        ("named", r"--model: .*heads.py:named returned a dict of 'logits' without 'out'"),
        (
            "mean",
            r"--model: .*heads.py:mean returned \(1, 3\) for a batch of 2; expected one output per sample",
        ),
        ("loss", r"--model: .*heads.py:loss returned \(\) for a batch of 2; expected one output per sample"),
    ],
)
def test_an_output_the_run_cannot_use_is_refused_naming_the_model(
    factories: str, factory: str, needle: str
) -> None:
    from devicebench.models import zoo

    with pytest.raises(UsageError, match=needle):
        zoo.checked(f"{factories}:{factory}", (3, 8, 8), 0)


def test_a_batchnorm_model_leaves_out_a_last_batch_of_one(factories: str, tmp_path: Path) -> None:
    """5 samples at batch 4: the last batch holds one, which BatchNorm1d cannot train on; the run
    trained a whole epoch and then failed on it."""
    result = _model_run(f"{factories}:normed", tmp_path, batch_size="4", train_limit="5")
    assert result.train_samples_per_s > 0
    with pytest.raises(UsageError, match=r"--batch_size: .* cannot train on a batch of one sample"):
        _model_run(f"{factories}:normed", tmp_path, batch_size="1", train_limit="5")


def test_a_model_serving_one_figure_per_batch_is_refused(factories: str) -> None:
    """A mean over the batch is one figure whatever the batch: it was timed as 8 predictions a call."""
    import torch

    from devicebench.models import zoo
    from devicebench.workloads import infer

    given = {"requests": "100", "warmup": "1", "min_time_s": "0", "batch_sizes": "1,8"}
    cfg = build_config(InferConfig, {**given, "model": f"{factories}:mean"})
    served = zoo.resolve(cfg.model).make(3)
    with pytest.raises(UsageError, match=r"--model: .*heads.py:mean returned \(1, 3\) for a batch of 8"):
        infer.measure(cfg, served.eval(), (3, 8, 8), torch.device("cpu"))
    logged = LoadedModel(served, (3, 8, 8), "models:/m-mean")  # refused before its run, on the meta device
    with pytest.raises(UsageError, match=r"--model_uri: models:/m-mean returned \(1, 3\) for a batch of 2"):
        infer.check(build_config(InferConfig, {"model_uri": "models:/m-mean"}), logged)


# ------------------------------------------------------ 16: infer refuses a model without a shape, before its run


def test_infer_of_a_model_without_an_input_shape_leaves_no_run(
    factories: str, tmp_path: Path, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    """A model logged without a signature: refused in one line, exit 2, and no run was created (a
    FAILED one was left)."""
    import mlflow
    import mlflow.pytorch
    from mlflow.tracking import MlflowClient

    from devicebench.models import zoo

    uri = mlflow_server.url
    was = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        client = MlflowClient(uri)
        known = client.get_experiment_by_name(experiment_name)
        exp_id = known.experiment_id if known else client.create_experiment(experiment_name)
        with mlflow.start_run(experiment_id=exp_id):  # no active experiment left behind in this process
            module = zoo.resolve(f"{factories}:tupled").make(3)
            logged = mlflow.pytorch.log_model(
                module, name="model", serialization_format="pickle", pip_requirements=["torch"]
            )
    finally:
        mlflow.set_tracking_uri(was)
    env = devicebench_env(uri, DEVICEBENCH_EXPERIMENT=experiment_name)
    proc = run_cli(["infer", "--model_uri", logged.model_uri, "--cpu_threads", "1"], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "has no input shape in its signature; give input CxHxW" in one_error_line(proc.stderr)
    assert [r.data.tags.get("devicebench.workload") for r in runs_of(uri, experiment_name)] == [None]
