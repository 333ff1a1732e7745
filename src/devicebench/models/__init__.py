"""The networks: the PyTorch tutorial's CIFAR-10 Net (width-scalable) and ResNet-18 (cifar_net), and the
UNet of Pytorch-UNet (unet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters: the figure a model is known by (the tutorial Net's 62,006, the UNet's
    "31 M"). Every training run logs it as `devicebench.model.params` (train/loop.py)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
