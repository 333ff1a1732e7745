"""The work of a run without its MLflow run: the process joined to its job, its device made current,
the workload run with a permission problem or an out-of-memory said as one line.

A run's own process (run/workload.py) does this inside its MLflow run. A torchrun rank other than 0
does only this (`work_as_rank`): it never imports MLflow nor talks to the store, so an 8-GPU job's
seven other ranks do not each pay a second of CPU importing a client they would not use; their
figures reach rank 0 through the process group.
"""

from __future__ import annotations

import os
import sys

import torch

from devicebench.config.settings import Settings
from devicebench.config.workloads import WorkloadConfig
from devicebench.errors import DataUnavailable, OutOfMemory
from devicebench.host.context import Context
from devicebench.host.cpu import set_cpu_threads
from devicebench.host.device import activate, resolve_device
from devicebench.host.distributed import World
from devicebench.host.job import worker_rank
from devicebench.tracking.protocol import Tracker, null_tracker, one_line
from devicebench.workloads import Workload, load


def join_world(resolved: torch.device, rank: int | None, cpu_threads: int = 0) -> tuple[World, torch.device]:
    """(this process's World, its device: a rank's own of the `resolved` kind), made current, and the
    process group joined; torch's CPU threads set first where `cpu_threads` asks, so the fingerprint
    logs what the run used."""

    set_cpu_threads(cpu_threads)
    world = World.from_env() if rank is not None else World()
    device = world.device(resolved)
    activate(device)
    world.join(device)
    return world, device


def run_module(module: Workload, cfg: WorkloadConfig, ctx: Context, tracker: Tracker) -> object:
    """The workload itself, returning its result; a permission problem or an out-of-memory becomes one
    line naming the fix."""

    try:
        return module.run(cfg, ctx, tracker)
    except PermissionError as e:  # a data dir, list or file the user pointed at that we may not read
        raise DataUnavailable(
            f"permission denied: {e.filename or one_line(e)}; give this user access or choose another path"
        ) from None
    except Exception as e:  # out of memory: one line naming the parameters to lower, exit 2, run FAILED
        oom = OutOfMemory.from_exception(e, getattr(module, "MEMORY_PARAMS", ()))
        if oom is None:
            raise
        raise oom from None


def work_as_rank(name: str, cfg: WorkloadConfig, settings: Settings) -> int:
    """A rank other than 0: the same work, its stdout silenced (rank 0 prints the run's lines) and
    nothing logged."""

    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of this process
    world, device = join_world(resolve_device(cfg.device), worker_rank(), cfg.cpu_threads)
    ctx = Context(device=device, data_root=settings.data_dir, progress=False, world=world)
    try:
        run_module(load(name), cfg, ctx, null_tracker())
    finally:
        world.leave()
    return 0
