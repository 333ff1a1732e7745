"""The UNet: Pytorch-UNet's network (shapes, classic parameter counts) and seeded, device-free init."""

from __future__ import annotations

import pytest
import torch

from devicebench.models import count_parameters
from devicebench.models.unet import UNet
from devicebench.train import seeding
from devicebench.workloads.unet import Config, build_unet

# milesial/Pytorch-UNet at n_classes=2: 31,037,698 (transposed convolutions), 17,263,042 (bilinear).
# 21 VOC classes add 19 × (64 + 1) parameters to the 1×1 output convolution.
CLASSIC = {False: 31_037_698, True: 17_263_042}


# One torch thread for this module (conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("bilinear", [False, True])
def test_parameter_count_matches_the_classic_unet(bilinear: bool) -> None:
    assert count_parameters(UNet(3, 2, 64, bilinear)) == CLASSIC[bilinear]
    n = count_parameters(UNet(3, 21, 64, bilinear))
    assert n == CLASSIC[bilinear] + 19 * 65
    expected = 31.0e6 if not bilinear else 17.3e6  # the figures people quote
    assert abs(n - expected) / expected < 0.01


@pytest.mark.parametrize("bilinear", [False, True])
@pytest.mark.parametrize("size", [(16, 16), (17, 23), (30, 30), (33, 31), (64, 48)])
def test_output_has_the_input_size_even_or_odd(size: tuple[int, int], bilinear: bool) -> None:
    model = UNet(3, 21, 2, bilinear).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, *size))
    assert out.shape == (2, 21, *size)


def test_base_channels_scales_every_level() -> None:
    model = UNet(3, 21, 4)
    assert model.inc.double_conv[0].out_channels == 4
    assert model.down4.maxpool_conv[1].double_conv[3].out_channels == 64
    assert count_parameters(model) < count_parameters(UNet(3, 21, 8))
    with pytest.raises(ValueError):
        UNet(3, 21, 0)


def test_backward_runs_in_channels_last() -> None:
    model = UNet(3, 21, 2).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    cfg = Config(base_channels=4)
    a = seeding.weights_fingerprint(build_unet(cfg))
    torch.randn(100)  # whatever ran before must not matter: build_unet seeds first
    b = seeding.weights_fingerprint(build_unet(cfg))
    c = seeding.weights_fingerprint(build_unet(Config(base_channels=4, seed=1)))
    assert a == b
    assert a != c
    assert seeding.weights_fingerprint(build_unet(Config(base_channels=4, bilinear=True))) != a


@pytest.mark.gpu
def test_same_initial_weights_on_cuda() -> None:
    model = build_unet(Config(base_channels=4))
    before = seeding.weights_fingerprint(model)
    assert seeding.weights_fingerprint(model.to("cuda")) == before
