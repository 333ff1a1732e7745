"""The one way a workload builds a `DataLoader`, and the hook that a distributed run uses to shard it.

A run's shuffle order comes from a generator seeded with the config's `seed`, made on the CPU, so every
device sees the same batches. `sampler_for` is where torchrun/DDP plugs in a `DistributedSampler`: it
gets each dataset and whether it is shuffled, and returns a sampler, or None for today's single-process
order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from devicebench.errors import DataUnavailable
from devicebench.util.children import die_with_parent

SamplerFor = Callable[[Dataset, bool], "Sampler[Any] | None"]


def no_sampler(dataset: Dataset, shuffle: bool) -> Sampler[Any] | None:
    """One process reads the whole dataset: the DataLoader shuffles it itself, with the seeded generator."""
    return None


@dataclass(frozen=True)
class LoaderSettings:
    """What the train and the eval loader of a run share: images per batch, the device the batches go
    to (memory pinned for CUDA), the worker processes, and the hook that shards the order."""

    batch_size: int
    device: torch.device
    num_workers: int = 0
    sampler_for: SamplerFor = no_sampler


def data_loader(
    dataset: Dataset,
    settings: LoaderSettings,
    *,
    shuffle: bool,
    seed: int = 0,
    drop_last: bool = False,
    persistent: bool = True,
) -> DataLoader:
    """Batches of `dataset`, shuffled by a generator seeded with `seed` (same order on every device),
    pinned for CUDA; `persistent` keeps worker processes between epochs where there are workers."""
    sampler = settings.sampler_for(dataset, shuffle)
    generator = None
    if shuffle and sampler is None:
        generator = torch.Generator()
        generator.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=settings.batch_size,
        shuffle=shuffle and sampler is None,
        sampler=sampler,
        num_workers=settings.num_workers,
        generator=generator,
        pin_memory=settings.device.type == "cuda",
        drop_last=drop_last,
        persistent_workers=persistent and settings.num_workers > 0,
        # a worker never outlives its run: orphans of an OOM-killed run once held its journal for minutes
        worker_init_fn=die_with_parent if settings.num_workers > 0 else None,
    )


@contextmanager
def one_line_data_errors() -> Iterator[None]:
    """A DataUnavailable raised in a DataLoader worker comes back with the worker's traceback in its
    message; keep its own last line, so the user still reads one line naming the file."""
    try:
        yield
    except DataUnavailable as e:
        text = str(e)
        if "\n" not in text:
            raise
        lines = [ln for ln in text.splitlines() if "DataUnavailable:" in ln]
        message = lines[-1].split("DataUnavailable:", 1)[1].strip() if lines else " ".join(text.split())
        raise DataUnavailable(message) from None
