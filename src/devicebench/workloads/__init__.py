"""Workloads: each module has a frozen `Config`, `DATA` (what data it reads) and `run(config, ctx, tracker)`.

A workload never imports mlflow: it gets a resolved device and a tracker, and the CLI owns the run.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from devicebench.schema import WORKLOADS as WORKLOADS  # the CLI's subcommands


def load(name: str) -> ModuleType:
    """The workload module for `name` (imported lazily: `devicebench matmul` need not import torchvision)."""
    return importlib.import_module(f"devicebench.workloads.{name}")


def progress_enabled() -> bool:
    """tqdm bars on an interactive terminal only: CI logs and scheduled runs stay readable."""
    return sys.stderr.isatty() and not os.environ.get("CI")
