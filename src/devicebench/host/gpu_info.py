"""Which physical GPU, or which MIG slice of one, a run used: tags the fingerprint needs and torch lacks.

Two runs on "NVIDIA A100-SXM4-40GB" are not comparable when one had the whole GPU and the other a
1g.5gb MIG slice, and two identical GPUs in one host are told apart only by their UUID. torch gives the
device's UUID; NVML (the `nvidia-ml-py` package the fingerprint already uses for the driver version)
says whether it is a MIG slice and of which profile. Everything here is best effort: no NVML, an old
driver or an unexpected answer gives fewer tags, never a failed run.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

import pynvml
import torch


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def torch_uuid(device: torch.device) -> str:
    """The device's UUID as torch reports it (no `GPU-`/`MIG-` prefix), or "" where it can't."""
    with contextlib.suppress(Exception):
        return str(torch.cuda.get_device_properties(device).uuid)
    return ""


def _mig_profile(name: str) -> str:
    """`NVIDIA A100-SXM4-40GB MIG 1g.5gb` → `1g.5gb`: NVML names a MIG device after its profile."""
    _, sep, tail = name.rpartition("MIG ")
    return tail.strip() if sep else ""


def gpu_identity(
    device: torch.device, *, nvml: ModuleType | None = None, uuid: str | None = None
) -> dict[str, str]:
    """`gpu_uuid`, `gpu_mig_mode` (enabled|disabled|unsupported) and, for a MIG slice, `gpu_mig_profile`
    and `gpu_parent_uuid`, as flat string tags; {} off CUDA or without NVML.

    The device is found in NVML by the UUID torch gives for it, not by index: with
    `CUDA_VISIBLE_DEVICES` or MIG, torch's `cuda:1` need not be NVML's device 1. `nvml` and `uuid` are
    injectable so tests can run without a GPU.
    """
    opened = open_nvml(device, nvml=nvml, uuid=uuid)
    if opened is None:
        return {}
    nvml, handle, found = opened
    try:
        return _identity(nvml, handle, found)
    except Exception:
        return {}
    finally:
        close_nvml(nvml)


def open_nvml(
    device: torch.device, *, nvml: ModuleType | Any = None, uuid: str | None = None
) -> tuple[Any, Any, str] | None:
    """(NVML initialised, the device's handle, the UUID NVML knows it by), the device found by the UUID
    torch gives for it; None off CUDA, without NVML, or for a device NVML does not know (NVML closed
    again). The caller closes it (`close_nvml`). `nvml` and `uuid` are injectable for tests."""
    if device.type != "cuda":
        return None
    nvml = pynvml if nvml is None else nvml
    raw = torch_uuid(device) if uuid is None else uuid
    if not raw:
        return None
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    candidates = [raw] if raw.startswith(("GPU-", "MIG-")) else [f"GPU-{raw}", f"MIG-{raw}", raw]
    for candidate in candidates:  # torch's UUID may lack the `GPU-` or `MIG-` prefix NVML spells
        with contextlib.suppress(Exception):
            return nvml, nvml.nvmlDeviceGetHandleByUUID(candidate), candidate
    close_nvml(nvml)
    return None


def close_nvml(nvml: Any) -> None:
    """NVML shut down, whatever state it is in: what it says then cannot change a run."""
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _identity(nvml: Any, handle: Any, found: str) -> dict[str, str]:
    out = {"gpu_uuid": _text(nvml.nvmlDeviceGetUUID(handle)) or found}
    is_mig = False
    with contextlib.suppress(Exception):
        is_mig = bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
    if is_mig:
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        out["gpu_mig_mode"] = "enabled"
        out["gpu_parent_uuid"] = _text(nvml.nvmlDeviceGetUUID(parent))
        profile = _mig_profile(_text(nvml.nvmlDeviceGetName(handle)))
        if profile:
            out["gpu_mig_profile"] = profile
        return out
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        out["gpu_mig_mode"] = "enabled" if current == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"
    except Exception:  # NVMLError_NotSupported on GPUs without MIG
        out["gpu_mig_mode"] = "unsupported"
    return out
