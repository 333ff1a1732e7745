"""The named parts a workload's config is composed of, by dataclass inheritance: what a run can do is
declared by what its config is (`isinstance(cfg, Job)`), never by which fields it happens to have.

Each part declares its fields once and checks them in `validate`, which calls the next part's
(`super().validate()`), so a config's own `validate` checks only what needs more than one part. The
order a config's fields are listed in (the CLI, MLproject, the params) is `fields.config_fields`':
the config's own first, then each part's, in the order its bases are named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Self

from devicebench.config import job_fields, shared_fields
from devicebench.config.fields import Unset, param
from devicebench.schema import MAX_EPOCHS, PRODUCT, SERVING, TRAINING, Kind, check_workers


@dataclass(frozen=True)
class Part:
    """The root of every part: `validate` ends here."""

    REAL_DATA: ClassVar[dict[str, str]] = {}  # the params a plan's `--data real` sets (none: no real data)

    def validate(self) -> None:
        """Nothing: the chain of parts' checks ends here."""


@dataclass(frozen=True)
class Priced(Part):
    """What an hour of the host costs and what a run is priced as (every workload's)."""

    price_per_hour: float = shared_fields.price_per_hour()
    illustrative_price: bool = shared_fields.illustrative_price()
    cpu_shape: str = shared_fields.cpu_shape()
    price_shape: str = shared_fields.price_shape()


@dataclass(frozen=True)
class Threaded(Part):
    """torch's CPU threads (every workload's)."""

    cpu_threads: int = shared_fields.cpu_threads()


@dataclass(frozen=True)
class Numerics(Part):
    """The numerics and memory format a model runs in."""

    precision: str = shared_fields.precision()
    channels_last: bool = shared_fields.channels_last()


@dataclass(frozen=True)
class Compiled(Part):
    """Whether and how the model is wrapped in torch.compile."""

    compile: bool = shared_fields.torch_compile()
    compile_mode: str = shared_fields.compile_mode()


@dataclass(frozen=True)
class SystemMetrics(Part):
    """MLflow's sampling of CPU, memory and GPU use during the run."""

    system_metrics: bool = shared_fields.system_metrics()


@dataclass(frozen=True)
class Job(Part):
    """A data-parallel job under torchrun: its processes per node and its nodes."""

    nproc: int = job_fields.nproc()
    nnodes: int = job_fields.nnodes()
    node_rank: int = job_fields.node_rank()
    rdzv_endpoint: str = job_fields.rdzv_endpoint()

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def validate(self) -> None:
        super().validate()
        job_fields.check_job_fields(self)


@dataclass(frozen=True)
class Fed(Part):
    """A run fed by DataLoader workers where its data is not already on the device."""

    num_workers: int = param(
        2, "DataLoader worker processes (where a DataLoader feeds the run; at most 4 per usable core)", min=0
    )

    @property
    def in_memory(self) -> bool:
        """Whether the run's data is held on the device, so no worker feeds it."""
        return False

    @property
    def loader_workers(self) -> int:
        """The processes that feed the run: none with its data in memory."""
        return 0 if self.in_memory else self.num_workers

    def validate(self) -> None:
        super().validate()
        check_workers(self.num_workers)


@dataclass(frozen=True)
class LoaderChoice(Fed):
    """A run whose config chooses how it is fed: a DataLoader's workers or the dataset on the device."""

    loader: str = param(
        "dataloader",
        "dataloader: the transforms in worker processes; tensor: the dataset on the device",
        choices=("dataloader", "tensor"),
    )

    @property
    def in_memory(self) -> bool:
        return self.loader == "tensor"


@dataclass(frozen=True)
class Product(Part):
    """A product benchmark (matmul's kind)."""

    KIND: ClassVar[Kind] = PRODUCT


@dataclass(frozen=True)
class Serving(Part):
    """A model served (infer's kind): a logged model, or one built by name where none is given."""

    KIND: ClassVar[Kind] = SERVING

    model_uri: str = param(
        "",
        "a logged model: models:/<model id> or runs:/<run id>/<path> (none: build `model` untrained)",
        unset=Unset("none", "a model URI"),
    )


@dataclass(frozen=True)
class Training(Part):
    """A training run: the epoch loop, its training and evaluation limits, and what `tune` searches.

    Its evaluation limit is named as each workload's data names its held-out split (`test_limit`,
    `val_limit`): `EVAL_LIMIT` says which field it is, so a trial can shorten it without asking."""

    KIND: ClassVar[Kind] = TRAINING
    EVAL_LIMIT: ClassVar[str]

    epochs: int = param(1, "passes over the training set", min=1, max=MAX_EPOCHS)
    batch_size: int = param(32, "images per optimizer step", min=1)
    data: str = param("synthetic", "the data it trains on", choices=("synthetic",))
    train_limit: int = param(0, "train on the first N images only (0 = all)", min=0)

    def shortened(self, images: int, eval_images: int) -> Self:
        """The same work for one epoch of at most `images` training images and `eval_images` held out."""
        limit = min(images, self.train_limit) if self.train_limit else images
        changes = {"epochs": 1, "train_limit": limit, self.EVAL_LIMIT: eval_images}
        return dataclasses.replace(self, **changes)
