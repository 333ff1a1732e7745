"""A loss that becomes NaN or infinite ends the run as `diverged at step N`, found without a per-step sync.

The check rides on the transfers training already makes (a LossLog flush, the epoch mean), so these
tests drive those two paths directly; the whole run ending FAILED with the tag is in test_bad_input.py.
"""

from __future__ import annotations

import pytest
import torch

from devicebench.errors import Diverged
from devicebench.tracking.protocol import MemoryTracker
from devicebench.train.loop import train_epoch
from devicebench.train.records import LossLog
from devicebench.train.step import Learner, StepSettings


def test_a_flush_logs_the_finite_points_then_names_the_first_bad_step() -> None:
    tracker = MemoryTracker()
    log = LossLog(tracker, every=1, flush_steps=100)
    for step, value in enumerate([1.0, 0.5, float("nan"), 0.2], start=1):
        log.add(torch.tensor(value), step)
    with pytest.raises(Diverged, match=r"^diverged at step 3$"):
        log.flush()
    assert tracker.values("train/loss") == [1.0, 0.5]


@pytest.mark.usefixtures("one_torch_thread")
def test_an_epoch_shorter_than_log_every_is_checked_by_its_mean() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    loader = [(torch.ones(4, 2), torch.zeros(4, dtype=torch.long))] * 3
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def overflowing(out: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
        return out.pow(2).mean() * 1e39  # inf in float32 from the first step on

    log = LossLog(MemoryTracker(), every=1000)
    with pytest.raises(Diverged, match=r"^diverged at step 13$"):
        train_epoch(
            Learner(model, optimizer, overflowing),
            loader,
            StepSettings(torch.device("cpu")),
            loss_log=log,
            first_step=10,
        )
