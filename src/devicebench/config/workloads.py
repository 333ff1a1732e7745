"""The workloads' configs in one torch-free place: what each workload's parameters are, and which of
them are not the work.

A frozen dataclass per workload is the single source of its parameters (devicebench/config/fields.py says
how one feeds the CLI, the MLflow params and the config key). They live here rather than beside each
workload's code so that the suite can validate a plan, and the report can tell work from setting,
without importing torch, NumPy or mlflow; each workload module re-exports its own as `Config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from devicebench.config import shared_fields
from devicebench.config.fields import NOT_KEYED, Unset, config_fields, is_keyed, param, spelt
from devicebench.config.parts import (
    Compiled,
    Fed,
    Job,
    LoaderChoice,
    Numerics,
    Priced,
    Product,
    Serving,
    SystemMetrics,
    Threaded,
    Training,
)
from devicebench.config.serving_fields import LOADGEN_SCENARIOS, ServingLoad
from devicebench.config.spelling import check_model_spec, check_model_uri, input_text, parse_input, path_text
from devicebench.errors import DataUnavailable, UsageError
from devicebench.schema import MAX_EPOCHS, TRAINING, Kind

REDUCED_PRECISIONS = ("bf16", "fp16")  # autocast: changes the numerics, not only the speed
CIFAR_MODELS = ("tutorial", "resnet18")  # devicebench/models/cifar_net.py builds them
NUMPY_DTYPES = ("float64", "float32")  # what NumPy's matmul does (no bfloat16, no fast float16)
ISOLATION = {
    "process": "one fresh process per backend: no other thread pool has run in it",
    "none": "every backend in this process: thread pools may disturb each other",
}


def _check_lr(lr: float) -> None:
    """Kept for configs built without the CLI's parsing (a plan passes values through the same path)."""
    if lr <= 0:
        raise UsageError(f"{lr!r} is out of range; expected a number > 0", param="lr")


@dataclass(frozen=True)
class MatmulConfig(Product, Priced, Threaded):
    """`devicebench matmul`'s parameters, in the order of the MLproject entry point's."""

    ABOUT: ClassVar[str] = (
        "NumPy on the CPU vs torch on any device: GFLOP/s per matrix size and dtype"  # its command's line in `devicebench --help`
    )

    device: str = param(
        "cpu", "where torch runs: cpu, cuda, cuda:N, mps or auto (NumPy always runs on the CPU)"
    )
    sizes: tuple[int, ...] = param((8000,), "square matrix sizes n (n×n @ n×n)", min=1, max=65536)
    dtypes: tuple[str, ...] = param(
        ("float64", "float32"),
        "element types; NumPy does float64/float32, torch also bfloat16/float16",
        choices=("float64", "float32", "bfloat16", "float16"),
    )
    backends: tuple[str, ...] = param(
        ("numpy", "torch"), "implementations to time", choices=("numpy", "torch")
    )
    repeats: int = param(
        5, "least number of timed samples per point (median and spread are logged)", min=1, max=1000
    )
    min_time_s: float = param(
        0.2,
        "keep sampling a point until this much time was measured (small sizes get hundreds of samples)",
        min=0,
        max=60,
        key=False,
    )
    warmup: int = param(
        1, "untimed runs before timing (allocator, BLAS heuristics, lazy init)", min=0, max=100
    )
    isolation: str = param(
        "process",
        "process: each backend measured in a fresh process of its own; none: all in this one",
        choices=tuple(ISOLATION),
        key=False,
    )
    seed: int = param(0, "seed for the random matrices", min=0)

    def validate(self) -> None:
        super().validate()
        if not self.points():
            raise UsageError(
                f"no backend supports dtypes {','.join(self.dtypes)} (NumPy: {', '.join(NUMPY_DTYPES)})",
                param="dtypes",
            )

    def points(self) -> list[tuple[str, str]]:
        """The (backend, dtype) pairs to measure: NumPy has no bfloat16 and no fast float16."""
        return [(b, d) for b in self.backends for d in self.dtypes if b == "torch" or d in NUMPY_DTYPES]


@dataclass(frozen=True)
class CifarConfig(Training, Numerics, Compiled, LoaderChoice, SystemMetrics, Priced, Job, Threaded):
    """`devicebench cifar`'s parameters, in the order of the MLproject entry point's; the defaults are
    the PyTorch tutorial's."""

    EVAL_LIMIT: ClassVar[str] = "test_limit"

    ABOUT: ClassVar[str] = (
        "the PyTorch CIFAR-10 tutorial network, trained and timed on any device"  # its command's line in `devicebench --help`
    )
    REAL_DATA: ClassVar[dict[str, str]] = {"data": "cifar10", "download": "true"}  # a plan's `--data real`

    device: str = shared_fields.train_device()
    epochs: int = param(2, "passes over the training set (the tutorial: 2)", min=1, max=MAX_EPOCHS)
    batch_size: int = param(4, "images per optimizer step, train and test (the tutorial: 4)", min=1)
    lr: float = param(0.001, "SGD learning rate", above=0)
    momentum: float = param(0.9, "SGD momentum", min=0, max=1)
    seed: int = shared_fields.train_seed()
    model: str = param(
        "tutorial",
        "tutorial: the tutorial's Net scaled by width; resnet18: torchvision's, for 32×32",
        choices=CIFAR_MODELS,
    )
    width: int = param(
        1, "multiplies the tutorial Net's channels 6/16 and fc 120/84 (1 = the tutorial)", min=1
    )
    data: str = param(
        "cifar10",
        "cifar10: the real dataset; synthetic: a learnable offline look-alike",
        choices=("cifar10", "synthetic"),
    )
    data_dir: str = param(
        "",
        "directory holding cifar-10-batches-py (auto: DEVICEBENCH_DATA_DIR)",
        key=False,
        unset=Unset("auto", "a directory"),
    )
    download: bool = param(False, "download CIFAR-10 (~163 MB) when files are missing", key=False)
    verify: bool = param(True, "check the files' md5 sums (torchvision's) before reading them", key=False)
    train_limit: int = param(0, "train on the first N images only (0 = all 50,000)", min=0)
    test_limit: int = param(0, "test on the first N images only (0 = all 10,000)", min=0)
    log_every: int = param(2000, "log and print the mean loss every N mini-batches", min=1, key=False)
    target_accuracy: float = param(
        0.0,
        "evaluate after every epoch and log time/to_target_s when test accuracy reaches this (0 = off)",
        min=0,
        max=1,
    )

    def validate(self) -> None:
        super().validate()
        _check_lr(self.lr)
        if self.loader == "tensor" and self.world_size > 1:
            raise UsageError(
                "loader=tensor holds the whole split on every device and shards nothing; "
                "use loader=dataloader with nproc > 1",
                param="loader",
            )
        if self.model != "tutorial" and self.width != 1:
            raise UsageError(
                f"width scales the tutorial Net only; use width=1 with model={self.model}", param="width"
            )


@dataclass(frozen=True)
class UNetConfig(Training, Numerics, Fed, SystemMetrics, Priced, Job, Threaded):
    """`devicebench unet`'s parameters, in the order of the MLproject entry point's."""

    EVAL_LIMIT: ClassVar[str] = "val_limit"

    ABOUT: ClassVar[str] = (
        "a UNet on a 300/100 sample of Pascal VOC 2012, trained and timed on any device"  # its command's line in `devicebench --help`
    )
    REAL_DATA: ClassVar[dict[str, str]] = {"data": "voc2012", "download": "true"}  # a plan's `--data real`

    device: str = shared_fields.train_device()
    epochs: int = param(1, "passes over the training sample (the notebook: 1)", min=1, max=MAX_EPOCHS)
    batch_size: int = param(16, "images per optimizer step, train and validation (the notebook: 16)", min=1)
    lr: float = param(0.001, "Adam learning rate", above=0)
    seed: int = shared_fields.train_seed()
    image_size: int = param(
        256, "images resized to S×S (bilinear), masks too (nearest); even, multiples of 16 best", min=16
    )
    base_channels: int = param(
        64, "width of the first UNet level, doubled per level (64: the classic 64-…-1024 UNet)", min=1
    )
    bilinear: bool = param(False, "bilinear upsampling instead of transposed convolutions (≈17 M params)")
    data: str = param(
        "voc2012",
        "voc2012: Pascal VOC 2012 in its standard layout; synthetic: learnable offline scenes",
        choices=("voc2012", "synthetic"),
    )
    data_dir: str = param(
        "",
        "directory holding VOCdevkit/VOC2012 (auto: DEVICEBENCH_DATA_DIR)",
        key=False,
        unset=Unset("auto", "a directory"),
    )
    download: bool = param(False, "download VOC 2012 (~2 GB) when it is missing", key=False)
    train_list: str = spelt(
        param(
            "",
            "file of training image ids, one a line (default: the first 300 of VOC's train.txt)",
            unset=Unset("default", "a file"),
        ),
        path_text,
    )
    val_list: str = spelt(
        param(
            "",
            "file of validation image ids, one a line (default: the first 100 of VOC's val.txt)",
            unset=Unset("default", "a file"),
        ),
        path_text,
    )
    train_limit: int = param(0, "train on the first N listed images only (0 = all)", min=0)
    val_limit: int = param(0, "validate on the first N listed images only (0 = all)", min=0)
    log_every: int = param(10, "log the mean training loss every N steps", min=1, key=False)

    def validate(self) -> None:
        """Checks that need more than one field, or the file system, before any run is created."""
        super().validate()
        _check_lr(self.lr)
        if self.image_size % 2:
            raise UsageError(
                f"{self.image_size} is odd; expected an even integer >= 16 (multiples of 16 work best)",
                param="image_size",
            )
        if self.image_size < 32 and self.batch_size == 1:
            # the UNet's bottom is 1×1 there: BatchNorm cannot take statistics over a single value
            raise UsageError(
                f"batch_size 1 at image_size {self.image_size} leaves BatchNorm one value per channel; "
                "use batch_size >= 2 or image_size >= 32",
                param="batch_size",
            )
        for name in ("train_list", "val_list"):
            self._check_list(name)

    def _check_list(self, name: str) -> None:
        given = getattr(self, name).strip()
        if not given:
            return
        if self.data != "voc2012":
            raise UsageError(f"list files apply to data=voc2012 only, not data={self.data}", param=name)
        if not Path(os.path.expanduser(given)).is_file():
            raise DataUnavailable(
                f"list file {given} not found; give a file of VOC image ids, one a line, "
                "or `default` for the default sample",
                param=name,
            )


@dataclass(frozen=True)
class ModelConfig(Training, Numerics, Compiled, Fed, SystemMetrics, Priced, Threaded):
    """`devicebench model`'s parameters: any torchvision model or the user's own, trained as cifar trains
    (the same loop, precisions, tuning, FLOPs and share of peak); names that mean what cifar's mean are
    cifar's."""

    ABOUT: ClassVar[str] = (
        "your model (a torchvision name or your module:factory), trained and timed on any device"  # its command's line in `devicebench --help`
    )
    # what its run names always say, whatever the defaults: which model ran (and on which data)
    ALWAYS_NAMED: ClassVar[tuple[str, ...]] = ("model", "data")
    EVAL_LIMIT: ClassVar[str] = "test_limit"

    device: str = shared_fields.train_device()
    model: str = shared_fields.model_spec()
    input: str = shared_fields.input_shape()
    num_classes: int = shared_fields.num_classes()
    epochs: int = param(1, "passes over the training set", min=1, max=MAX_EPOCHS)
    batch_size: int = param(32, "images per optimizer step, train and test", min=1)
    lr: float = param(0.01, "SGD learning rate", above=0)
    momentum: float = param(0.9, "SGD momentum", min=0, max=1)
    seed: int = shared_fields.train_seed()
    data: str = param(
        "synthetic",
        "synthetic: random images of the input's shape held on the device (no loader cost); "
        "imagefolder: data_dir/train and data_dir/val in ImageFolder layout through a DataLoader",
        choices=("synthetic", "imagefolder"),
    )
    data_dir: str = param(
        "",
        "directory holding train/ and val/, one subfolder of images per class (auto: DEVICEBENCH_DATA_DIR)",
        key=False,
        unset=Unset("auto", "a directory"),
    )
    train_limit: int = param(
        0, "train on the first N images only (0 = all; synthetic: 512)", min=0, max=10_000_000
    )
    test_limit: int = param(0, "test on the first N images only (0 = all; synthetic: 128)", min=0)
    log_every: int = param(50, "log the mean training loss every N mini-batches", min=1, key=False)

    def validate(self) -> None:
        super().validate()
        _check_lr(self.lr)
        check_model_spec(self.model)
        parse_input(self.input)
        if self.data == "imagefolder" and not self.data_dir and not os.environ.get("DEVICEBENCH_DATA_DIR"):
            raise DataUnavailable(
                "data=imagefolder needs data_dir: a directory holding train/ and val/ in ImageFolder "
                "layout (or DEVICEBENCH_DATA_DIR)",
                param="data_dir",
            )

    @property
    def shape(self) -> tuple[int, int, int]:
        return parse_input(self.input)

    @property
    def in_memory(self) -> bool:
        """Synthetic data sits on the device: no DataLoader feeds it."""
        return self.data != "imagefolder"


@dataclass(frozen=True)
class InferConfig(Serving, ServingLoad, Numerics, Priced, Threaded):
    """`devicebench infer`'s parameters: serving figures for a logged model (`model_uri`) or a model
    built by name (`model`), on one device; how it is loaded, `ServingLoad`'s."""

    ABOUT: ClassVar[str] = (
        "a model served: latency p50/p90/p99 per request and throughput per batch size"  # its command's line in `devicebench --help`
    )
    # what its run names always say, whatever the defaults: which model ran (and on which data)
    ALWAYS_NAMED: ClassVar[tuple[str, ...]] = ("model",)

    device: str = param("cpu", "where the model serves: cpu, cuda, cuda:N, mps or auto")
    model: str = shared_fields.model_spec()
    input: str = spelt(
        param(
            "",
            "one sample's shape CxHxW (auto: the logged model's signature, else 3x224x224)",
            unset=Unset("auto", "a shape CxHxW"),
        ),
        input_text,
    )
    num_classes: int = shared_fields.num_classes()
    batch_sizes: tuple[int, ...] = param(
        (1, 8, 32), "batch sizes whose throughput is measured", min=1, max=65536
    )
    requests: int = param(
        1000,
        "batch-1 requests timed for the latency percentiles (p99 rests on the slowest 1 %)",
        min=100,
        max=1_000_000,
    )
    warmup: int = param(20, "untimed requests (and batches per size) before timing", min=1, max=10_000)
    min_time_s: float = param(
        1.0, "time each batch size's throughput over at least this long", min=0, max=600, key=False
    )
    seed: int = shared_fields.train_seed()

    def validate(self) -> None:
        super().validate()
        if self.model_uri:
            check_model_uri(self.model_uri)
        else:
            check_model_spec(self.model)
        if self.input:
            parse_input(self.input)
        if "http" in self.via and not self.model_uri:
            raise UsageError("via http serves a logged model: give model_uri too", param="via")
        if "http" in self.via and not set(self.scenarios) & set(LOADGEN_SCENARIOS):
            raise UsageError(
                f"via http drives LoadGen's scenarios: give scenarios one of {', '.join(LOADGEN_SCENARIOS)}",
                param="scenarios",
            )


WorkloadConfig = MatmulConfig | CifarConfig | UNetConfig | ModelConfig | InferConfig
CONFIGS: dict[str, type[WorkloadConfig]] = {
    "matmul": MatmulConfig,
    "cifar": CifarConfig,
    "unet": UNetConfig,
    "model": ModelConfig,
    "infer": InferConfig,
}
# Every other view of the workloads is read from their configs: the CLI's subcommands, the report's
# choices, each workload's kind (its config's KIND), those `tune` searches (the training ones).
WORKLOADS = tuple(CONFIGS)
KIND_OF: dict[str, Kind] = {name: cls.KIND for name, cls in CONFIGS.items()}
TRAINING_WORKLOADS = tuple(name for name, kind in KIND_OF.items() if kind is TRAINING)


def not_work() -> frozenset[str]:
    """Every param that says where or how verbosely a run worked, not what it measured: exactly the
    fields `config_key` leaves out (the same rule, `config.fields.is_keyed`), over all workloads."""
    names = {f.name for cls in CONFIGS.values() for f in config_fields(cls) if not is_keyed(f)}
    return frozenset(names | set(NOT_KEYED))
