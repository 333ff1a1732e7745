"""The CPU half of the host: its model, the cores this process may use, and its thread pools.

The CPU side of every speedup depends on these: torch's intra-op pool, NumPy's BLAS pool and the
DataLoader workers against the usable cores (a container's cpuset, not the host's count). Two CPU runs
with different counts are not like for like, and a CPU oversubscribed by its own loader measures
contention; so each run logs them (device.host_fingerprint, `cpu.*` tags) and `cpu_threads` sets torch's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import resource
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import threadpoolctl
import torch


def set_cpu_threads(threads: int) -> None:
    """torch's intra-op pool at `threads` (0 keeps torch's default, the usable cores). The CPU side of a
    speedup depends on it: the tutorial Net at batch 4 trains fastest on a few threads, not on 16."""
    if threads > 0:
        torch.set_num_threads(threads)


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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
    facts = {
        "cpu_affinity": str(usable_cores()),
        "torch_threads": str(torch.get_num_threads()),
        "torch_interop_threads": str(torch.get_num_interop_threads()),
        "blas": "none",
        "blas_threads": "0",
    }
    for pool in threadpoolctl.threadpool_info():
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
    `torch_threads` threads; on two cores, 2 threads + 2 workers halve the compute and the CPU
    baseline measures contention. The report names it (verdicts.oversubscribed).
    """
    cores = usable_cores()
    busy = torch_threads + loader_workers
    return {
        "cpu.usable_cores": str(cores),
        "cpu.busy_threads": str(busy),
        "cpu.oversubscribed": "true" if busy > cores else "false",
    }


def peak_rss_bytes() -> float:
    """This process's peak resident memory so far: what the training summary logs and what a CPU run
    is priced for. `ru_maxrss` is KiB on Linux and bytes on macOS."""
    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024.0
