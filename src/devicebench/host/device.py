"""Resolve the requested device once, and fingerprint the host a timing was measured on.

No silent fallback: `cuda` on a host without CUDA is an error that says what torch sees; only `auto`
means "the GPU if there is one". A timing without the host it came from cannot be compared, so every
run carries the CPU, GPU, driver, library versions and (on OCI) the instance shape as tags.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import json
import os
import platform
import re
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pynvml
import torch

from devicebench.errors import DeviceUnavailable, UsageError
from devicebench.host.cpu import cpu_model, thread_facts, usable_cores
from devicebench.host.gpu_info import gpu_identity
from devicebench.schema import check_device_spelling


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed NVIDIA driver supports (from NVML), or None without one."""
    with contextlib.suppress(Exception):
        pynvml.nvmlInit()
        try:
            v = int(pynvml.nvmlSystemGetCudaDriverVersion())  # e.g. 12040 for 12.4
            return v // 1000, (v % 1000) // 10
        finally:
            pynvml.nvmlShutdown()
    return None


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def no_cuda_reason(
    *,
    torch_cuda: str | None,
    visible: str | None,
    driver_files: bool,
    driver_cuda: tuple[int, int] | None,
) -> str:
    """Why torch sees no GPU, in the words that point at the fix (the arguments are what the host says)."""
    if torch_cuda is None:
        return "a CPU-only torch build"
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process"
    if not driver_files:
        return "no NVIDIA driver"
    if driver_cuda is not None and driver_cuda < _version_tuple(torch_cuda):
        have = f"{driver_cuda[0]}.{driver_cuda[1]}"
        return (
            f"the NVIDIA driver supports CUDA up to {have}, older than this torch build's CUDA {torch_cuda}: "
            f"update the driver or install a torch built for CUDA <= {have}"
        )
    if visible is not None:
        return f"CUDA_VISIBLE_DEVICES={visible!r} names no GPU the driver has"
    return "the driver reports no usable GPU"


def _no_cuda_reason() -> str:
    return no_cuda_reason(
        torch_cuda=torch.version.cuda,
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        driver_files=Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists(),
        driver_cuda=driver_cuda_version(),
    )


@dataclass(frozen=True)
class ResolvedDevice:
    """A run's device, resolved once where the run starts and handed on: the device, or the error that
    the run raises once it exists (a run asked for a device that is not here still leaves a FAILED run)."""

    requested: str
    device: torch.device | None = None
    error: UsageError | None = None

    @classmethod
    def of(cls, requested: str) -> ResolvedDevice:
        try:
            return cls(requested, resolve_device(requested))
        except UsageError as e:  # DeviceUnavailable: raised again inside the run, which reports it
            return cls(requested, error=e)

    @property
    def name(self) -> str:
        """The device the run resolved to (`auto` -> `cuda:0`), for its name; the request as typed where
        it cannot resolve."""
        return str(self.device) if self.device is not None else self.requested

    def get(self) -> torch.device:
        """The device, or its error raised."""
        if self.device is None:
            raise self.error or UsageError(f"device {self.requested!r} was not resolved", param="device")
        return self.device


def resolve_device(requested: str) -> torch.device:
    """Turn `cpu|cuda|cuda:N|mps|auto` into a torch.device that exists here, or raise DeviceUnavailable."""
    value = check_device_spelling(requested)
    tv = torch.__version__
    if value == "cpu":
        return torch.device("cpu")
    if value == "auto":
        if torch.cuda.is_available():
            return indexed(torch.device("cuda"))
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if value == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceUnavailable(f"device 'mps' requested but torch {tv} finds no Apple MPS device")
        return torch.device("mps")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise DeviceUnavailable(
            f"device {value!r} requested but torch {tv} finds no CUDA device ({_no_cuda_reason()}); "
            "use device=cpu, or device=auto to take a GPU only when there is one"
        )
    index = int(value.split(":")[1]) if ":" in value else torch.cuda.current_device()
    if index >= count:
        raise DeviceUnavailable(
            f"device {value!r} requested but torch {tv} finds {count} CUDA device(s): "
            + ", ".join(f"cuda:{i}" for i in range(count))
        )
    return torch.device("cuda", index)


def indexed(device: torch.device) -> torch.device:
    """`device` with its index: a bare `cuda` becomes the current CUDA device, `cuda:N` and others stay.

    Much of torch takes a bare `cuda` (tensors, `.to`), but not all of it: `torch.cuda.set_device` in an
    isolated matmul child, CUDA events and NCCL's `device_id` want an index, and the figures must say which
    GPU ran. So the index is fixed once, where the device is resolved, and never left to each caller.
    """
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def max_processes(device: torch.device) -> int:
    """How many data-parallel processes `device` can take on this node: one per visible GPU (NCCL gives
    each its own), one per usable core on the CPU (gloo; more would only time the scheduler)."""
    if device.type == "cuda":
        return torch.cuda.device_count()
    if device.type == "cpu":
        return usable_cores()
    return 1  # MPS: one device, and torch.distributed has no backend for it


def check_processes(device: torch.device, nproc: int) -> None:
    """`nproc` more than `device` can take is one line and exit 2, never a job quietly run on fewer."""
    most = max_processes(device)
    if nproc <= most:
        return
    if device.type == "cuda":
        have = f"this host has {most} visible CUDA device(s) (CUDA_VISIBLE_DEVICES narrows them)"
    elif device.type == "cpu":
        have = f"this host gives this process {most} usable core(s)"
    else:
        have = f"{device.type} is one device and torch.distributed has no backend for it"
    raise DeviceUnavailable(f"nproc={nproc} on {device.type}: {have}; use nproc <= {most}", param="nproc")


def activate(device: torch.device) -> None:
    """Make `device` the current CUDA device, once, right after resolving it.

    Much of torch asks the *current* device rather than a tensor's: default-stream CUDA events,
    `is_bf16_supported()`, cuBLAS handles. Left at GPU 0, a run on `cuda:1` would time an idle GPU 0.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)


def require_native_bf16(device: torch.device, param: str) -> None:
    """bfloat16 on a GPU older than Ampere (compute capability < 8.0: OCI's V100 and P100 shapes) is
    emulated, and `torch.cuda.is_bf16_supported()` counts emulation as support; a figure measured
    that way is not bf16 hardware speed, so it is refused in one line."""
    if device.type != "cuda":
        return
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        raise UsageError(
            f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no native "
            "bfloat16 (it needs 8.0 or newer); use fp16 or fp32",
            param=param,
        )


def gpu_sms(device: torch.device) -> int:
    """The streaming multiprocessors torch sees on a CUDA device: a MIG slice reports its own share."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def device_name(device: torch.device) -> str:
    """The human name of the device a timing ran on (GPU model, or CPU model)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return cpu_model()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _nvidia_driver() -> str:
    with contextlib.suppress(Exception):
        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    return "none"


def oci_metadata(url: str, timeout_s: float) -> dict[str, str]:
    """Shape, region, availability domain and (shapeConfig) OCPUs and memory from the OCI instance
    metadata service (v2), or {}. A flex shape's price is per OCPU and GB, so its size is a host fact.

    Off OCI the address does not answer at all, so the timeout bounds what every run pays for asking:
    the whole request, name lookup, connection and every byte of the answer (an answer that dripped a
    byte at a time, each within a per-read timeout, stretched a 9 s run to 36 s).
    """
    if timeout_s <= 0:
        return {}
    answer: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    worker = threading.Thread(target=_fetch_metadata, args=(url, deadline, answer), daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not answer:  # none in time, or none at all
        return {}
    try:
        doc = json.loads(answer[0])
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    config = doc.get("shapeConfig") if isinstance(doc.get("shapeConfig"), dict) else {}
    out = {
        "oci.shape": _name(doc.get("shape")),
        "oci.region": _name(doc.get("canonicalRegionName") or doc.get("region")),
        "oci.availability_domain": _name(doc.get("availabilityDomain")),
        "oci.ocpus": _positive(config.get("ocpus"), MAX_OCPUS),
        "oci.memory_gb": _positive(config.get("memoryInGBs"), MAX_MEMORY_GB),
    }
    return {k: str(v) for k, v in out.items() if v}


def _fetch_metadata(url: str, deadline: float, answer: list[bytes]) -> None:
    """The metadata document's bytes (at most 1 MB) into `answer`, unless `deadline` passes first: read
    in pieces, so this thread ends within one read's timeout of its caller giving up on it."""
    req = urllib.request.Request(url, headers={"Authorization": "Bearer Oracle"})
    chunks: list[bytes] = []
    try:
        with urllib.request.urlopen(req, timeout=max(deadline - time.monotonic(), 0.01)) as resp:
            size = 0
            while size < 1_000_000:
                if time.monotonic() > deadline:
                    return
                chunk = resp.read1(65_536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except (OSError, ValueError, http.client.HTTPException):
        return
    if time.monotonic() <= deadline:
        answer.append(b"".join(chunks))


# No instance is bigger than this (OCI's largest bare-metal shapes have a few hundred OCPUs and a few
# TB): an answer beyond is not a size, and priced as one it made a $2.65e306/h run.
MAX_OCPUS = 4096.0
MAX_MEMORY_GB = 65536.0


_OCI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")  # VM.GPU.A10.1, us-phoenix-1, Uocm:PHX-AD-1


def _name(value: object) -> str | None:
    """A shape, region or availability domain from the metadata answer as OCI spells them, or None:
    escape codes, `$...$` (matplotlib's mathtext) or `=cmd` in an answer never reach a run's tags."""
    return value if isinstance(value, str) and _OCI_NAME.fullmatch(value) else None


def _positive(value: object, most: float) -> float | None:
    """A count from the metadata answer, or None for anything that is not a positive, sane number
    (at most `most`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= most else None


def cuda_facts(gpu_count: int) -> dict[str, str]:
    """What CUDA this host has, kept apart from what torch was built for.

    `torch_cuda_build` (torch.version.cuda) says only which CUDA the torch wheel was compiled against:
    a CUDA wheel reports 13.0 on a laptop without a GPU. The driver's version, the newest CUDA it runs
    (`cuda_driver`) and cuDNN describe a GPU that computes, so they appear only when one is present.
    """
    facts = {"torch_cuda_build": str(torch.version.cuda or "none")}
    if gpu_count:
        supported = driver_cuda_version()
        facts["driver"] = _nvidia_driver()
        facts["cuda_driver"] = f"{supported[0]}.{supported[1]}" if supported else "unknown"
        facts["cudnn"] = str(torch.backends.cudnn.version() or "none")
    return facts


def host_fingerprint(device: torch.device, oci_url: str, oci_timeout_s: float) -> dict[str, str]:
    """Everything that makes a timing comparable across hosts, as flat string tags (no prefix)."""
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    fp: dict[str, str] = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": str(os.cpu_count() or 0),
        **thread_facts(),
        "gpu_count": str(gpu_count),
        "gpu_name": "none",
        "gpu_memory_gb": "0",
        **cuda_facts(gpu_count),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "numpy": _version("numpy"),
        "mlflow": _version("mlflow"),
        "python": platform.python_version(),
    }
    gpu = device if device.type == "cuda" else (torch.device("cuda", 0) if gpu_count else None)
    if gpu is not None:
        props = torch.cuda.get_device_properties(gpu)
        fp["gpu_name"] = props.name
        fp["gpu_memory_gb"] = f"{props.total_memory / 2**30:.1f}"
        fp["gpu_capability"] = f"{props.major}.{props.minor}"  # 8.0+ has TF32 (the report says so)
        fp.update(gpu_identity(gpu))
    fp.update(oci_metadata(oci_url, oci_timeout_s))
    return fp
