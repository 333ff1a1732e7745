"""Workloads: each module has a frozen `Config`, `DATA` (what data it reads) and `run(config, ctx, tracker)`.

A workload never imports mlflow: it gets a resolved device and a tracker, and the CLI owns the run.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from devicebench.schema import WORKLOADS as WORKLOADS  # the CLI's subcommands

if TYPE_CHECKING:
    import torch

    from devicebench.host.distributed import World


@dataclass(frozen=True)
class Context:
    """What a workload needs from its surroundings, resolved once by the CLI."""

    device: torch.device
    data_root: Path
    progress: bool
    world: World | None = None  # this rank's place in a torchrun job; None: a single process

    def __post_init__(self) -> None:
        """A bare `cuda` from a caller of the Python API gets its index here, as the CLI's does in
        `resolve_device`: a workload never passes an unindexed CUDA device on (device.indexed says why)."""
        if self.device.type == "cuda" and self.device.index is None:
            from devicebench.host.device import indexed

            object.__setattr__(self, "device", indexed(self.device))


def load(name: str) -> ModuleType:
    """The workload module for `name` (imported lazily: `devicebench matmul` need not import torchvision)."""
    return importlib.import_module(f"devicebench.workloads.{name}")


def progress_enabled() -> bool:
    """tqdm bars on an interactive terminal only: CI logs and scheduled runs stay readable."""
    return sys.stderr.isatty() and not os.environ.get("CI")
