"""One training step, on one screen: what it is given (`StepSettings`: the device, autocast, NHWC, the
fp16 GradScaler, CUDA graphs; `Learner`: the model, its optimizer and loss), a batch moved to the device
(`on_device`), and the optimizer step itself (`train_step`). The loops in `train.loop` time and count
around it; the warm-up runs the same step on the same settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from devicebench.host.precision import autocast

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StepSettings:
    """What every step does beside its model and batch: the device, autocast's dtype (None: no
    autocast), NHWC inputs, whether fp16 needs a GradScaler, and whether the model replays CUDA graphs
    (torch.compile's reduce-overhead), which must be told where each step begins."""

    device: torch.device
    amp_dtype: torch.dtype | None = None
    channels_last: bool = False
    fp16_scaler: bool = False
    cuda_graphs: bool = False


@dataclass(frozen=True)
class Learner:
    """What a training step updates and how: the model, its optimizer and loss, and the GradScaler of
    an fp16 run (None otherwise)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: LossFn
    scaler: torch.amp.GradScaler | None = None


def on_device(x: torch.Tensor, y: torch.Tensor, step: StepSettings) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.to(step.device, non_blocking=True)
    y = y.to(step.device, non_blocking=True)
    if step.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


def train_step(learner: Learner, x: torch.Tensor, y: torch.Tensor, step: StepSettings) -> torch.Tensor:
    """One optimizer step (through the GradScaler for fp16); the loss stays on the device."""
    optimizer, scaler = learner.optimizer, learner.scaler
    optimizer.zero_grad(set_to_none=True)
    if step.cuda_graphs:  # a new step: the graphs' outputs of the last one may be overwritten now
        torch.compiler.cudagraph_mark_step_begin()
    with autocast(step.device, step.amp_dtype):
        loss = learner.loss_fn(learner.model(x), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss
