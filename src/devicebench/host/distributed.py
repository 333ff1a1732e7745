"""One process of a data-parallel job (torchrun + DistributedDataParallel): who it is and what it shares.

The training loop (train/loop.py) asks a `World` for everything that differs from a single process: the
device of this rank, the sampler that gives it its shard, the DDP wrapper, the mean of a loss over all
ranks, the per-rank figures gathered on rank 0, and a measured all-reduce. A single process is the
`World` of size 1 whose every method is the identity, so the driver has one code path.

Same global batch semantics at every world size: the shuffle order is `DistributedSampler`'s (a
permutation seeded with seed + epoch), rank r takes every W-th index of it, so the k-th global batch of a
job of W processes with `batch_size` b is the k-th batch of one process with batch b×W. Losses are
averaged over ranks before they are logged, so the loss curve of a scaling series does not change with
its world size (tests/test_distributed.py checks the first steps against a single process).
"""

from __future__ import annotations

import datetime
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler, Sampler

from devicebench.host.job import worker_rank

# How long a collective may wait for a slow or dead peer before raising: the launcher's monitor ends
# the job within a second of a rank's death, so this only bounds a hang that monitor cannot see.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=10)
PROBE_REPEATS = 5


@dataclass(frozen=True)
class World:
    """This process's place in the job; `World()` is a single process."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1
    local_size: int = 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> World:
        """The rank torchrun gave this process, when our launcher started it; a single process otherwise.

        Only a worker of devicebench's own launcher joins a job: a pod of a Kubeflow PyTorchJob also has
        RANK and WORLD_SIZE in its environment (for its node), and must start the launcher, not join."""
        if worker_rank(environ) is None:  # the launcher's mark (launch.JOB_DIR) and torchrun's RANK
            return cls()
        return cls(
            rank=int(environ["RANK"]),
            local_rank=int(environ["LOCAL_RANK"]),
            size=int(environ["WORLD_SIZE"]),
            local_size=int(environ["LOCAL_WORLD_SIZE"]),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def device(self, resolved: torch.device) -> torch.device:
        """This rank's device: on CUDA the GPU of its local rank (the launcher checked there are enough)."""
        if self.distributed and resolved.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return resolved

    # -- the job's lifetime ------------------------------------------------------------------------
    def join(self, device: torch.device) -> str:
        """Join the process group: NCCL between GPUs, gloo on the CPU. Returns the backend's name."""
        if not self.distributed:
            return ""
        backend = self.backend(device)
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT, **kwargs)
        return backend

    @staticmethod
    def backend(device: torch.device) -> str:
        return "nccl" if device.type == "cuda" else "gloo"

    def leave(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()

    # -- what the training driver asks -------------------------------------------------------------
    def sampler(self, dataset: Dataset, shuffle: bool, seed: int) -> Sampler[Any] | None:
        """The training shard of this rank (every rank evaluates the whole eval set: no sampler there).

        A single process uses the same sampler with one replica, so every world size draws one order."""
        if not shuffle:
            return None
        return DistributedSampler(
            dataset, num_replicas=self.size, rank=self.rank, shuffle=True, seed=seed, drop_last=False
        )

    def wrap(self, module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """DDP around the placed module: gradients averaged over ranks during backward."""
        if not self.distributed:
            return module
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise mean over ranks (gloo has no AVG: a sum, divided)."""
        if not self.distributed:
            return values
        total = values.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total / self.size

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (small dicts of figures)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def allreduce_seconds(self, model: torch.nn.Module, device: torch.device) -> float | None:
        """Median seconds of one all-reduce of as many float32 values as the model has gradients,
        measured alone (after one untimed call that sets up the communicators), device synchronised.

        DDP overlaps its all-reduces with backward, so a step hides some of this: steps × this / train
        time is an upper bound on the share of training spent communicating, not a measurement of it.
        """
        if not self.distributed:
            return None
        numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        times = []
        for i in range(PROBE_REPEATS + 1):
            _sync(device)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf)
            _sync(device)
            if i:
                times.append(time.perf_counter() - start)
        return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
