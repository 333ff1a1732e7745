"""What the training loops record: the loss log, and the result of one epoch and of one evaluation.

Losses stay on the device and reach the host in one transfer per flush (every 1,024 steps and at the
end of an epoch), so logging never stalls the GPU queue (`.item()` per step would); the window means,
the epoch mean and the divergence check are computed on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from devicebench.errors import Diverged
from devicebench.schema import (
    TRAIN_LOSS,
)
from devicebench.tracking.protocol import Tracker


class LossLog:
    """Every step's loss, left on the device as it is and brought to the host in batches: the mean of each
    `every` steps is logged as `key`, and the epoch's mean is kept for `train/epoch_loss`.

    A step costs a list append, no kernel and no sync, so the timed loop does what a bare loop does (a
    running sum on the device cost two launches a step, a visible share of a launch-bound GPU step).
    Every `flush_steps` steps and at each epoch's end, one `stack` and one transfer turn the pending losses
    into numbers; the window means and the divergence check are computed there, on the host. `reduce`
    turns a stack of this process's losses into the job's (the mean over ranks, in a data-parallel job):
    every rank flushes at the same steps, so the collective lines up."""

    def __init__(
        self,
        tracker: Tracker,
        every: int,
        key: str = TRAIN_LOSS,
        flush_steps: int = 1024,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.tracker, self.every, self.key = tracker, max(every, 1), key
        self.flush_steps, self.reduce = max(flush_steps, 1), reduce
        self._pending: list[torch.Tensor] = []
        self._steps: list[int] = []
        self._window = (0.0, 0)  # sum and count of the window being filled (it may span epochs)
        self._epoch = (0.0, 0)  # sum and count of this epoch's losses

    def begin_epoch(self) -> None:
        self._epoch = (0.0, 0)

    def epoch_mean(self) -> float:
        """The mean loss of the steps since `begin_epoch` that have been flushed (NaN for none)."""
        total, count = self._epoch
        return total / count if count else math.nan

    def add(self, loss: torch.Tensor, step: int) -> None:
        self._pending.append(loss.detach())
        self._steps.append(step)
        if len(self._pending) >= self.flush_steps:
            self.flush()

    def flush(self, collective: bool = True) -> None:
        """One host transfer for all pending losses; a NaN/inf window raises Diverged after the finite
        ones before it are logged (checked here, where the values are on the host anyway).
        `collective=False` logs this process's own values: on the way out of a failure, where the
        other ranks may never reach the same flush."""
        if not self._pending:
            return
        stacked = torch.stack(self._pending).float()
        if collective and self.reduce is not None:
            stacked = self.reduce(stacked)
        values, steps = stacked.tolist(), self._steps
        self._pending, self._steps = [], []
        for step, value in zip(steps, values, strict=True):
            self._epoch = (self._epoch[0] + value, self._epoch[1] + 1)
            total, count = self._window[0] + value, self._window[1] + 1
            self._window = (total, count)
            if count == self.every:
                self._window = (0.0, 0)
                if not math.isfinite(total / count):
                    raise Diverged(step)
                self.tracker.log_metrics({self.key: total / count}, step=step)


@dataclass
class EpochResult:
    seconds: float
    data_wait_s: float
    samples: int
    steps: int
    mean_loss: float


@dataclass
class EvalResult:
    confusion: torch.Tensor
    mean_loss: float
    seconds: float
    data_wait_s: float
    samples: int
