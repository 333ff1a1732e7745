"""The UNet of milesial/Pytorch-UNet, with its widths scaled by `base_channels`.

Kept layer for layer as there (DoubleConv = conv-BN-ReLU twice, four max-pool downs, four ups by transposed
convolution or bilinear upsampling, skip connections concatenated, a 1×1 output convolution), so that at
`base_channels=64` the parameter count is the classic ≈31.0 M (≈17.3 M bilinear, whose bottom is halved)
and a timing here is comparable with the figures people quote for that network. Inputs whose side is not
a multiple of 16 still work: each up-sampled map is padded to its skip connection's size, as there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DoubleConv(nn.Module):
    """(3×3 conv → BatchNorm → ReLU) × 2; the convolutions have no bias because BatchNorm follows."""

    def __init__(self, in_channels: int, out_channels: int, mid_channels: int | None = None) -> None:
        super().__init__()
        mid = mid_channels or out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.double_conv(x)


class Down(nn.Module):
    """Halve the resolution (2×2 max pool, floor for odd sides), then a DoubleConv."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool_conv(x)


class Up(nn.Module):
    """Double the resolution, pad to the skip connection's size, concatenate, DoubleConv."""

    def __init__(self, in_channels: int, out_channels: int, bilinear: bool) -> None:
        super().__init__()
        self.up: nn.Module
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x1 = self.up(x1)
        dy = x2.size(2) - x1.size(2)
        dx = x2.size(3) - x1.size(3)
        if dy or dx:  # a side that was odd before pooling: pad the up-sampled map back to the skip's size
            x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    """UNet(n_channels, n_classes): N×C×H×W images → N×classes×H×W logits, for any H, W ≥ 16."""

    def __init__(
        self, n_channels: int = 3, n_classes: int = 21, base_channels: int = 64, bilinear: bool = False
    ) -> None:
        super().__init__()
        if base_channels < 1:
            raise ValueError(f"base_channels must be >= 1, not {base_channels}")
        self.n_channels, self.n_classes, self.bilinear = n_channels, n_classes, bilinear
        b = base_channels
        factor = 2 if bilinear else 1
        self.inc = DoubleConv(n_channels, b)
        self.down1 = Down(b, 2 * b)
        self.down2 = Down(2 * b, 4 * b)
        self.down3 = Down(4 * b, 8 * b)
        self.down4 = Down(8 * b, 16 * b // factor)
        self.up1 = Up(16 * b, 8 * b // factor, bilinear)
        self.up2 = Up(8 * b, 4 * b // factor, bilinear)
        self.up3 = Up(4 * b, 2 * b // factor, bilinear)
        self.up4 = Up(2 * b, b, bilinear)
        self.outc = nn.Conv2d(b, n_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)
