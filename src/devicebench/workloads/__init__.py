"""Workloads: each module has a frozen `Config`, `DATA` (what data it reads), `MEMORY_PARAMS` (what to
lower when it does not fit) and `run(config, ctx, tracker)`: the `Workload` protocol below.

A workload never imports mlflow: it gets a resolved device and a tracker, and the CLI owns the run.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, Protocol, cast

from devicebench.config.workloads import WORKLOADS as WORKLOADS  # the CLI's subcommands

if TYPE_CHECKING:
    from devicebench.host.context import Context
    from devicebench.tracking.protocol import Tracker


class Workload(Protocol):
    """What the run (run/workload.py) asks of a workload module: matmul.py, cifar.py, unet.py, model.py
    and infer.py."""

    DATA: str  # the data it reads, tagged devicebench.data unless the config names its own
    MEMORY_PARAMS: tuple[str, ...]  # the parameters an out-of-memory error tells the user to lower

    def run(self, cfg: Any, ctx: Context, tracker: Tracker) -> Any:
        """Measure `cfg` on `ctx.device`, log to `tracker`, return the result the run line and costs read.
        (`cfg` is the module's own Config, and the result its own: each module types them.)"""
        ...


def load(name: str) -> Workload:
    """The workload module for `name` (imported lazily: `devicebench matmul` need not import torchvision)."""
    return cast("Workload", importlib.import_module(f"devicebench.workloads.{name}"))


def progress_enabled() -> bool:
    """tqdm bars on an interactive terminal only: CI logs and scheduled runs stay readable."""
    return sys.stderr.isatty() and not os.environ.get("CI")
