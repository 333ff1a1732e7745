"""The tutorial Net to the parameter, its width scaling, and the 32×32 ResNet-18."""

from __future__ import annotations

import pytest
import torch

from devicebench.models import count_parameters
from devicebench.models.cifar_net import Net, build_model, resnet18_cifar

TUTORIAL_KEYS = [
    "conv1.weight",
    "conv1.bias",
    "conv2.weight",
    "conv2.bias",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
    "fc3.weight",
    "fc3.bias",
]


def test_net_is_the_tutorials_network() -> None:
    net = Net()
    assert count_parameters(net) == 62_006
    assert (
        list(net.state_dict()) == TUTORIAL_KEYS
    )  # a logged model's weights load into the tutorial's own class
    assert net.conv1.weight.shape == (6, 3, 5, 5)
    assert net.conv2.weight.shape == (16, 6, 5, 5)
    assert net.fc1.weight.shape == (120, 400)
    assert net.fc2.weight.shape == (84, 120)
    assert net.fc3.weight.shape == (10, 84)
    assert net(torch.randn(3, 3, 32, 32)).shape == (3, 10)


@pytest.mark.parametrize("width", [2, 4])
def test_width_multiplies_every_hidden_size(width: int) -> None:
    net = Net(width)
    c1, c2, f1, f2 = 6 * width, 16 * width, 120 * width, 84 * width
    expected = (3 * 25 + 1) * c1 + (c1 * 25 + 1) * c2 + (c2 * 25 + 1) * f1 + (f1 + 1) * f2 + (f2 + 1) * 10
    assert count_parameters(net) == expected
    assert net.fc1.in_features == 400 * width
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_width_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="width"):
        Net(0)


def test_resnet18_is_adapted_to_32x32_and_downloads_nothing() -> None:
    model = resnet18_cifar()
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, torch.nn.Identity)
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert 11_000_000 < count_parameters(model) < 11_300_000


def test_build_model_names() -> None:
    assert isinstance(build_model("tutorial", 1), Net)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vgg", 1)
