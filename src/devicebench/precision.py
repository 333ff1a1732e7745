"""Numerics a training run chooses per device: the autocast dtype, how fp32 convolutions and matmuls
run on CUDA, and the optimizer kernels; each checked where it is chosen, so an impossible choice is one
line naming the parameter before any work starts.
"""

from __future__ import annotations

import torch

from devicebench.configs import PRECISIONS
from devicebench.device import require_native_bf16
from devicebench.errors import UsageError
from devicebench.schema import tag


def check_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device`, or a UsageError where the device can't do it."""
    if precision in ("fp32", "tf32"):  # no autocast; `fp32_math` sets how fp32 convs and matmuls run
        return None
    if precision == "fp16":
        if device.type != "cuda":
            raise UsageError(
                f"fp16 autocast needs a CUDA device, not {device}; use bf16 or fp32", param="precision"
            )
        return torch.float16
    if precision == "bf16":
        require_native_bf16(device, "precision")
        if device.type == "mps":
            raise UsageError("bf16 autocast is not supported on MPS; use fp32", param="precision")
        return torch.bfloat16
    raise UsageError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}", param="precision")


def fp32_math(precision: str, device: torch.device) -> dict[str, str]:
    """Set how fp32 convolutions and matmuls run on CUDA, and return it as a tag.

    torch's defaults differ by op (cuDNN convolutions TF32, cuBLAS matmuls IEEE), so an "fp32" GPU run
    would compare TF32 convolutions against true fp32 on the CPU without saying so. Every run sets both
    explicitly: IEEE fp32 unless `precision=tf32` asks for TF32 (outside autocast regions for bf16/fp16
    too). The legacy `allow_tf32` flags are the ones set: inductor reads `torch.backends.cudnn.allow_tf32`,
    which raises once the per-op `fp32_precision` API has been used.
    """
    tf32 = precision == "tf32"
    if tf32:
        if device.type != "cuda":
            raise UsageError(
                f"tf32 needs a CUDA device (Ampere or newer), not {device}; use fp32", param="precision"
            )
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:
            raise UsageError(
                f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no TF32; "
                "use fp32 (TF32 needs 8.0 or newer)",
                param="precision",
            )
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return {tag("fp32_math"): "tf32" if tf32 else "ieee"}


def optimizer_options(device: torch.device) -> dict[str, bool]:
    """Keyword arguments for SGD/Adam on `device`: the fused kernels on CUDA.

    A fused optimizer takes the GradScaler's scale and inf flag on the device, so fp16 training keeps
    one sync per epoch; with the default (foreach) kernels `GradScaler.step` calls `.item()` every step.
    The CPU keeps torch's default, so CPU timings stay comparable with earlier nights.
    """
    return {"fused": True} if device.type == "cuda" else {}
