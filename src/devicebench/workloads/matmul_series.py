"""One backend's matmul series, measured where nothing else has run: the part of matmul that may live in
its own process (devicebench/util/isolated.py says why).

This module imports neither torch nor mlflow at load time, so the NumPy process never loads torch's
OpenMP runtime at all. The matrices are drawn from the seed in a fixed order, so every process (and
the parent, which computes the errors afterwards) sees the same numbers without shipping them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import threadpoolctl

from devicebench.config.workloads import MatmulConfig
from devicebench.host.timing import Timer, TimingStats

ERROR_ROWS = 32


@dataclass(frozen=True)
class SeriesSpec:
    """What one process measures: one backend, every dtype and size."""

    backend: str
    dtypes: tuple[str, ...]
    sizes: tuple[int, ...]
    device: str
    seed: int
    warmup: int
    repeats: int
    min_time_s: float
    threads: int = 0  # cpu_threads: torch's pool, or NumPy's BLAS, at this many threads (0: default)


def series(cfg: MatmulConfig, device: str) -> list[SeriesSpec]:
    """One spec per backend of the config, each measured as a whole (in its own process under
    isolation=process); NumPy's always on the CPU."""
    dtypes = {b: tuple(d for bb, d in cfg.points() if bb == b) for b in cfg.backends}
    return [
        SeriesSpec(
            backend=b,
            dtypes=dtypes[b],
            sizes=cfg.sizes,
            device="cpu" if b == "numpy" else device,
            seed=cfg.seed,
            warmup=cfg.warmup,
            repeats=cfg.repeats,
            min_time_s=cfg.min_time_s,
            threads=cfg.cpu_threads,
        )
        for b in cfg.backends
        if dtypes[b]
    ]


@dataclass(frozen=True)
class Sample:
    """One measured point, with the rows of the result the error is computed from (in float64)."""

    backend: str
    dtype: str
    size: int
    stats: TimingStats
    unsynced_s: float | None
    result_rows: np.ndarray
    pid: int = 0  # the process that measured it, and the thread pools loaded there: the isolation's
    pools: tuple[str, ...] = ()  # evidence, logged in timings.json


def loaded_pools() -> tuple[str, ...]:
    """The native thread pools loaded in this process (OpenBLAS, libgomp, MKL...), as threadpoolctl sees them."""
    return tuple(sorted({f"{p['internal_api']}:{p['prefix']}" for p in threadpoolctl.threadpool_info()}))


def matrices(sizes: tuple[int, ...], seed: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """(n, A, B, sampled rows) in ascending n; the same numbers in every process for the same seed."""
    rng = np.random.default_rng(seed)
    for n in sorted(set(sizes)):
        a64, b64 = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        yield n, a64, b64, rng.choice(n, size=min(n, ERROR_ROWS), replace=False)


# what measures one point of a series: (A, B, rows, dtype) -> its sample
MeasurePoint = Callable[[np.ndarray, np.ndarray, np.ndarray, str], Sample]


def _numpy_series(spec: SeriesSpec) -> MeasurePoint:
    """NumPy's BLAS on `spec.threads` threads (0: its default), and the function that measures a point."""
    if spec.threads > 0:
        threadpoolctl.threadpool_limits(limits=spec.threads, user_api="blas")

    def point(a64: np.ndarray, b64: np.ndarray, rows: np.ndarray, dtype: str) -> Sample:
        a, b = a64.astype(dtype), b64.astype(dtype)
        out = np.empty_like(a)
        stats = Timer("cpu").measure(
            lambda: np.matmul(a, b, out=out),
            warmup=spec.warmup,
            repeats=spec.repeats,
            min_time_s=spec.min_time_s,
        )
        return Sample("numpy", dtype, a.shape[0], stats, None, out[rows].astype(np.float64))

    return point


def _torch_series(spec: SeriesSpec) -> MeasurePoint:
    """torch on `spec.threads` threads (0: its default) and the measured device, and the function that
    measures a point there."""
    import torch  # lazy: the NumPy series' process never loads torch (nor its OpenMP pool beside BLAS)

    if spec.threads > 0:
        torch.set_num_threads(spec.threads)
    device = torch.device(spec.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # events and handles on the measured GPU
        torch.backends.cuda.matmul.allow_tf32 = False  # "float32" means IEEE fp32, whatever the default

    def point(a64: np.ndarray, b64: np.ndarray, rows: np.ndarray, dtype: str) -> Sample:
        tdtype = getattr(torch, dtype)
        a = torch.from_numpy(a64).to(device=device, dtype=tdtype)
        b = torch.from_numpy(b64).to(device=device, dtype=tdtype)
        out = torch.empty_like(a)
        timer = Timer(device)
        stats = timer.measure(
            lambda: torch.mm(a, b, out=out),
            warmup=spec.warmup,
            repeats=spec.repeats,
            min_time_s=spec.min_time_s,
        )
        unsynced = timer.unsynchronised(lambda: torch.mm(a, b, out=out)) if device.type != "cpu" else None
        idx = torch.from_numpy(rows).to(device)
        sample = out.index_select(0, idx).to(torch.float64).cpu().numpy()
        return Sample("torch", dtype, a.shape[0], stats, unsynced, sample)

    return point


def measure_series(spec: SeriesSpec) -> list[Sample]:
    """Every (dtype, size) point of one backend, on its threads, before anything is timed; the entry
    point of an isolated process."""
    point = _numpy_series(spec) if spec.backend == "numpy" else _torch_series(spec)
    samples = [
        point(a64, b64, rows, dtype)
        for _, a64, b64, rows in matrices(spec.sizes, spec.seed)
        for dtype in spec.dtypes
    ]
    pid, pools = os.getpid(), loaded_pools()
    return [replace(s, pid=pid, pools=pools) for s in samples]
