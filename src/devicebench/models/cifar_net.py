"""The PyTorch CIFAR-10 tutorial's `Net`, scalable in width, and a ResNet-18 adapted to 32×32 images.

At width 1 `Net` is the tutorial's network to the parameter (62,006) and to the `state_dict` key, so the
weights of a model a devicebench run logged load into the tutorial's own class. The tutorial tells its
readers that so small a network shows little GPU gain and to widen it: `width` multiplies every hidden
size (conv channels 6/16, fc 120/84) so that advice becomes a measurement.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from devicebench.config.workloads import CIFAR_MODELS

NUM_CLASSES = 10
MODELS = CIFAR_MODELS  # the config offers them (devicebench/config/workloads.py), this module builds them


class Net(nn.Module):
    """conv 3→6 5×5, ReLU, max-pool 2, conv 6→16 5×5, ReLU, max-pool 2, fc 400→120→84→10 (× width)."""

    def __init__(self, width: int = 1, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"width must be >= 1, not {width}")
        c1, c2, f1, f2 = 6 * width, 16 * width, 120 * width, 84 * width
        self.conv1 = nn.Conv2d(3, c1, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        self.fc1 = nn.Linear(c2 * 5 * 5, f1)
        self.fc2 = nn.Linear(f1, f2)
        self.fc3 = nn.Linear(f2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # all dimensions except the batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def resnet18_cifar(num_classes: int = NUM_CLASSES) -> nn.Module:
    """torchvision's ResNet-18 for 32×32 inputs: a 3×3 stride-1 stem and no max-pool.

    ImageNet's 7×7 stride-2 stem plus max-pool would shrink a CIFAR image to 8×8 before the first block
    (the usual CIFAR adaptation, as in the ResNet paper's CIFAR experiments). No weights are downloaded.
    """
    from torchvision.models import resnet18  # lazy: torchvision's zoo loads torch._dynamo, seconds a process

    model = resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def build_model(name: str, width: int = 1, num_classes: int = NUM_CLASSES) -> nn.Module:
    """The network for the `model` parameter (`width` applies to the tutorial Net only)."""
    if name == "tutorial":
        return Net(width, num_classes)
    if name == "resnet18":
        return resnet18_cifar(num_classes)
    raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
