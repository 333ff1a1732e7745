"""Resolve the requested device once, and fingerprint the host a timing was measured on.

No silent fallback: `cuda` on a host without CUDA is an error that says what torch sees; only `auto`
means "the GPU if there is one". A timing without the host it came from cannot be compared, so every
run carries the CPU, GPU, driver, library versions and (on OCI) the instance shape as tags.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import torch

from devicebench.errors import DeviceUnavailable, UsageError
from devicebench.gpu_info import gpu_identity
from devicebench.schema import check_device_spelling


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed NVIDIA driver supports (from NVML), or None without one."""
    with contextlib.suppress(Exception):
        import pynvml

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


def set_cpu_threads(threads: int) -> None:
    """torch's intra-op pool at `threads` (0 keeps torch's default, the usable cores). The CPU side of a
    speedup depends on it: the tutorial Net at batch 4 trains fastest on a few threads, not on 16."""
    if threads > 0:
        torch.set_num_threads(threads)


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


def device_name(device: torch.device) -> str:
    """The human name of the device a timing ran on (GPU model, or CPU model)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return cpu_model()


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _nvidia_driver() -> str:
    with contextlib.suppress(Exception):
        import pynvml

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

    Off OCI the address does not answer at all, so the timeout bounds what every run pays for asking.
    """
    if timeout_s <= 0:
        return {}
    req = urllib.request.Request(url, headers={"Authorization": "Bearer Oracle"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            doc = json.loads(resp.read(1_000_000))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    config = doc.get("shapeConfig") if isinstance(doc.get("shapeConfig"), dict) else {}
    out = {
        "oci.shape": doc.get("shape"),
        "oci.region": doc.get("canonicalRegionName") or doc.get("region"),
        "oci.availability_domain": doc.get("availabilityDomain"),
        "oci.ocpus": _positive(config.get("ocpus"), MAX_OCPUS),
        "oci.memory_gb": _positive(config.get("memoryInGBs"), MAX_MEMORY_GB),
    }
    return {k: str(v) for k, v in out.items() if v}


# No instance is bigger than this (OCI's largest bare-metal shapes have a few hundred OCPUs and a few
# TB): an answer beyond is not a size, and priced as one it made a $2.65e306/h run.
MAX_OCPUS = 4096.0
MAX_MEMORY_GB = 65536.0


def _positive(value: object, most: float) -> float | None:
    """A count from the metadata answer, or None for anything that is not a positive, sane number
    (at most `most`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= most else None


THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "MKL_DYNAMIC",
)


def usable_cores() -> int:
    """The cores this process may run on (a container's cpuset or `taskset`), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_facts() -> dict[str, str]:
    """How many threads each CPU thread pool runs and on how many cores: the CPU side of every speedup
    depends on it, and two runs with different counts are not like for like.

    NumPy's BLAS is read with threadpoolctl (it knows OpenBLAS, MKL and BLIS); torch reports its own
    intra-op and inter-op pools. Only environment variables that were set appear, so their presence
    alone says someone tuned the pools. A threadpoolctl older than 3.5 does not know the OpenBLAS that
    NumPy 2 wheels ship (`libscipy_openblas64_`): the H100 host's system threadpoolctl logged
    `blas = none` on every run. NumPy's own build record and the loaded library answer then.
    """
    from threadpoolctl import threadpool_info

    facts = {
        "cpu_affinity": str(usable_cores()),
        "torch_threads": str(torch.get_num_threads()),
        "torch_interop_threads": str(torch.get_num_interop_threads()),
        "blas": "none",
        "blas_threads": "0",
    }
    for pool in threadpool_info():
        if pool.get("user_api") == "blas" and "torch" not in str(pool.get("filepath", "")):
            layer = pool.get("threading_layer")
            facts["blas"] = " ".join(
                x for x in (pool.get("internal_api"), pool.get("version"), f"({layer})" if layer else "") if x
            )
            facts["blas_threads"] = str(pool.get("num_threads"))
        elif pool.get("user_api") == "openmp" and "torch" in str(pool.get("filepath", "")):
            facts["openmp"] = f"{pool.get('prefix')} ({pool.get('num_threads')} threads)"
    if facts["blas"] == "none":
        facts.update(numpy_blas())
    facts.update({f"env.{k}": os.environ[k] for k in THREAD_ENV if os.environ.get(k)})
    return facts


# OpenBLAS's thread-count function under each symbol name a NumPy wheel's build may export.
_OPENBLAS_THREADS = (
    "scipy_openblas_get_num_threads64_",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)


def numpy_blas(
    config: dict | None = None, maps: str | None = None, threads: Callable[[str], int | None] | None = None
) -> dict[str, str]:
    """`blas` and `blas_threads` from NumPy's build record (`numpy.__config__.CONFIG`, NumPy >= 1.25) and
    the BLAS library this process has loaded (/proc/self/maps), asked for its thread count; {} when
    NumPy names no BLAS. `config`, `maps` and `threads` are injectable for tests."""
    if config is None:
        import numpy as np

        config = getattr(np.__config__, "CONFIG", {})
    blas = ((config or {}).get("Build Dependencies") or {}).get("blas") or {}
    name = str(blas.get("name") or "")
    if not name or not blas.get("found", True):
        return {}
    kind = (
        "openblas" if "openblas" in name else "mkl" if "mkl" in name else "blis" if "blis" in name else name
    )
    facts = {"blas": " ".join(x for x in (kind, str(blas.get("version") or "")) if x)}
    if maps is None:
        with contextlib.suppress(OSError):
            maps = Path("/proc/self/maps").read_text()
    library = next(
        (line.split()[-1] for line in (maps or "").splitlines() if kind in line.rsplit("/", 1)[-1]), ""
    )
    count = (threads or _blas_threads)(library) if library else None
    if count:
        facts["blas_threads"] = str(count)
    return facts


def _blas_threads(library: str) -> int | None:
    """The thread count of an already-loaded OpenBLAS, asked through its own C function."""
    import ctypes

    rtld_noload = 4  # glibc's RTLD_NOLOAD: use the copy already loaded, never load a second one
    with contextlib.suppress(OSError):
        lib = ctypes.CDLL(library, mode=rtld_noload)
        for symbol in _OPENBLAS_THREADS:
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                return int(fn())
    return None


def cpu_budget(torch_threads: int, loader_workers: int) -> dict[str, str]:
    """Threads a training run keeps busy against the cores it may use, as `cpu.*` tags.

    DataLoader workers are processes of their own, each busy while the main process computes with
    `torch_threads` threads; on a 2-core VM 2 threads + 2 workers halve the compute and the CPU
    baseline measures contention. The report names it (verdicts.oversubscribed).
    """
    cores = usable_cores()
    busy = torch_threads + loader_workers
    return {
        "cpu.usable_cores": str(cores),
        "cpu.busy_threads": str(busy),
        "cpu.oversubscribed": "true" if busy > cores else "false",
    }


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
