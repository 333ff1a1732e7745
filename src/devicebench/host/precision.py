"""Numerics a training run chooses per device: the autocast dtype (and its context, `autocast`), how
fp32 convolutions and matmuls run on CUDA, and the optimizer kernels; each checked where it is chosen,
so an impossible choice is one line naming the parameter before any work starts.
"""

from __future__ import annotations

import contextlib

import torch

from devicebench.config.shared_fields import PRECISIONS
from devicebench.errors import UsageError
from devicebench.host.device import require_native_bf16
from devicebench.schema import tag

# PyTorch's own fp32 math, read when this module is first imported, before any run sets it: cuDNN
# convolutions TF32, cuBLAS matmuls IEEE (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes matmuls TF32 too).
# `precision=default` puts these back, so a run after another in one process still gets PyTorch's math.
TORCH_DEFAULT_TF32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)


def check_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device`, or a UsageError where the device can't do it."""
    if precision in ("default", "fp32", "tf32"):  # no autocast; `fp32_math` sets how fp32 ops run
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
    """Set how fp32 convolutions and matmuls run on CUDA, and return what that resolved to as a tag.

    torch's defaults differ by op (cuDNN convolutions TF32, cuBLAS matmuls IEEE), so every run sets both
    flags and names the result (`fp32_math_name`): `default` is PyTorch's own math, what the tutorial's
    unchanged code runs (`tf32-conv` on an Ampere or newer GPU: ResNet-18 bs 128 on an H100 trained at
    ~11,300 img/s so and ~7,000 in strict IEEE); `fp32` is IEEE everywhere, `tf32` TF32 everywhere, and
    bf16/fp16 run IEEE outside their autocast regions. The legacy `allow_tf32` flags are the ones set:
    inductor reads `torch.backends.cudnn.allow_tf32`, which raises once the per-op `fp32_precision` API
    has been used.
    """
    if precision == "tf32":
        _require_tf32(device)
    conv, matmul = TORCH_DEFAULT_TF32 if precision == "default" else (precision == "tf32",) * 2
    torch.backends.cudnn.allow_tf32 = conv
    torch.backends.cuda.matmul.allow_tf32 = matmul
    return {tag("fp32_math"): fp32_math_name(conv, matmul, _has_tf32(device))}


def fp32_math_name(conv_tf32: bool, matmul_tf32: bool, device_has_tf32: bool) -> str:
    """`ieee`, `tf32`, `tf32-conv` or `tf32-matmul`: what fp32 convolutions and matmuls really run as.
    A flag set on a device without TF32 (a CPU, a V100) changes nothing, and the name says so."""
    conv, matmul = conv_tf32 and device_has_tf32, matmul_tf32 and device_has_tf32
    if conv and matmul:
        return "tf32"
    return "tf32-conv" if conv else "tf32-matmul" if matmul else "ieee"


def _has_tf32(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def _require_tf32(device: torch.device) -> None:
    if device.type != "cuda":
        raise UsageError(
            f"tf32 needs a CUDA device (Ampere or newer), not {device}; use fp32 or default",
            param="precision",
        )
    if not _has_tf32(device):
        major, minor = torch.cuda.get_device_capability(device)
        raise UsageError(
            f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no TF32; "
            "use fp32 or default (TF32 needs 8.0 or newer)",
            param="precision",
        )


def optimizer_options(device: torch.device) -> dict[str, bool]:
    """Keyword arguments for SGD/Adam on `device`: the fused kernels on CUDA.

    A fused optimizer takes the GradScaler's scale and inf flag on the device, so fp16 training keeps
    one sync per epoch; with the default (foreach) kernels `GradScaler.step` calls `.item()` every step.
    The CPU keeps torch's default, so CPU timings stay comparable with earlier nights.
    """
    return {"fused": True} if device.type == "cuda" else {}


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
