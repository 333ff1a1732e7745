"""Matrix multiply: NumPy on the CPU against torch on any device, GFLOP/s per size and dtype.

The tutorial this comes from timed one 8000×8000 `torch.mm` on the GPU without synchronising, which
measures the kernel *launch*. Here every figure is the median of synchronised samples after warm-up
(as many as fit in `min_time_s`, at least `repeats`), the naive unsynchronised figure is logged beside
it (so a report can show the gap), and each result carries its relative error against a float64
reference, because a fast wrong answer is not a speedup.

Each backend is measured in a fresh process of its own (`isolation=process`, the default): NumPy's and
torch's CPU thread pools spin after each call and, in one process on a small host, halve each other's
figures (see devicebench/util/isolated.py). `isolation=none` measures in this process, to show the effect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from devicebench.config.workloads import ISOLATION
from devicebench.config.workloads import MatmulConfig as Config
from devicebench.host.context import Context
from devicebench.host.device import device_name, gpu_sms, require_native_bf16
from devicebench.host.peaks import gpu_peak, matmul_dtype, peak_source
from devicebench.host.timing import TimingStats
from devicebench.schema import MATMUL_POINT_FIGURES, gflops, matmul_key, matmul_point_key, tag
from devicebench.tracking.protocol import Tracker
from devicebench.util import isolated
from devicebench.workloads.matmul_series import matrices, measure_series, series

DATA = "random"
MEMORY_PARAMS = ("sizes",)  # what to lower when a run does not fit in memory (the CLI names them)


@dataclass(frozen=True)
class MatmulPoint:
    """One product measured: a backend and dtype at one size, its timing, its error against float64."""

    backend: str
    dtype: str
    size: int
    stats: TimingStats
    rel_error: float
    unsynced_s: float | None
    pid: int = 0
    pools: tuple[str, ...] = ()

    @property
    def gflops(self) -> float:
        return gflops(self.size, self.stats.median_s)


def rel_error(result_rows: np.ndarray, a64: np.ndarray, b64: np.ndarray, rows: np.ndarray) -> float:
    """‖C[rows] − (A·B)[rows]‖ / ‖(A·B)[rows]‖ against float64, on a sample of rows (a full reference costs
    as much as the product being timed)."""
    ref = a64[rows] @ b64
    return float(np.linalg.norm(result_rows.astype(np.float64) - ref) / np.linalg.norm(ref))


def measure(cfg: Config, device: object) -> list[MatmulPoint]:
    """Every (backend, dtype, size) point, sizes ascending so the chart reads left to right.

    The float64 references are computed here, after every series has been measured: they are BLAS
    calls too, and must not run beside a measurement.
    """
    samples = []
    for spec in series(cfg, str(device)):
        if cfg.isolation == "process":
            samples += isolated.call("devicebench.workloads.matmul_series:measure_series", spec)
        else:
            samples += measure_series(spec)
    errors = {
        (s.backend, s.dtype, n): rel_error(s.result_rows, a64, b64, rows)
        for n, a64, b64, rows in matrices(cfg.sizes, cfg.seed)
        for s in samples
        if s.size == n
    }
    order = {bd: i for i, bd in enumerate(cfg.points())}
    samples.sort(key=lambda s: (s.size, order[(s.backend, s.dtype)]))
    return [
        MatmulPoint(
            s.backend,
            s.dtype,
            s.size,
            s.stats,
            errors[(s.backend, s.dtype, s.size)],
            s.unsynced_s,
            s.pid,
            s.pools,
        )
        for s in samples
    ]


def point_peaks(
    points: list[MatmulPoint], device_name: str, sms: int | None = None
) -> dict[tuple[str, str], float]:
    """(backend, dtype) → the dense datasheet peak in GFLOP/s of the GPU torch ran on (of its `sms` SMs,
    for a MIG slice), where the table (peaks.py) knows it. NumPy's points ran on the CPU, whose peak no
    table knows: none for them."""
    peak = gpu_peak(device_name, sms)
    if peak is None:
        return {}
    return {
        (p.backend, p.dtype): peak.tflops[matmul_dtype(p.dtype)] * 1e3
        for p in points
        if p.backend == "torch" and matmul_dtype(p.dtype) in peak.tflops
    }


def points_peak_source(gpu_name: str | None, sms: int | None = None) -> str:
    """The run's `util.peak_source` tag: where its points' `peak_fraction` comes from, or why there is
    none (`gpu_name` None: the points ran on the CPU), so a missing fraction is explained, not absent."""
    if gpu_name is None:
        return "unknown: no datasheet peak for a CPU; this run's GFLOP/s are the CPU's measured rate"
    return peak_source(gpu_name, sms)


def _chart(points: list[MatmulPoint], device: object, peaks: dict[tuple[str, str], float]) -> Figure:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for backend, dtype in dict.fromkeys((p.backend, p.dtype) for p in points):
        series = [p for p in points if (p.backend, p.dtype) == (backend, dtype)]
        where = "cpu" if backend == "numpy" else str(device)
        ax.plot(
            [p.size for p in series],
            [p.gflops for p in series],
            marker="o",
            label=f"{backend} {dtype} ({where})",
        )
    for (_, dtype), peak in peaks.items():
        ax.axhline(peak, linestyle="--", linewidth=1, color="grey")
        ax.annotate(f"{dtype} peak (datasheet)", (0.01, peak), xycoords=("axes fraction", "data"), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("matrix size n")
    ax.set_ylabel("GFLOP/s (median of synchronised repeats)")
    ax.set_title("Matrix multiply throughput")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def point_metrics(p: MatmulPoint, peaks: dict[tuple[str, str], float]) -> dict[str, float]:
    """One point's metrics, logged at step = its size: `matmul/<backend>/<dtype>/<figure>`, and the flat
    per-size keys the report reads with one search (schema.matmul_point_key)."""
    figures = {
        "gflops": p.gflops,
        "time_s": p.stats.median_s,
        "time_p10_s": p.stats.p10_s,
        "time_p90_s": p.stats.p90_s,
        "rel_error": p.rel_error,
        "samples": p.stats.samples,
        "calls_per_sample": p.stats.calls_per_sample,
    }
    if p.unsynced_s is not None:
        figures["unsynced_time_s"] = p.unsynced_s
    if (p.backend, p.dtype) in peaks:  # this point's share of the GPU's datasheet peak
        figures["peak_fraction"] = p.gflops / peaks[(p.backend, p.dtype)]
    values = {matmul_key(p.backend, p.dtype, k): v for k, v in figures.items()}
    values.update(
        {
            matmul_point_key(p.backend, p.dtype, p.size, k): v
            for k, v in figures.items()
            if k in MATMUL_POINT_FIGURES
        }
    )
    return values


def run(cfg: Config, ctx: Context, tracker: Tracker) -> list[MatmulPoint]:
    """Measure, then log each point with step = matrix size (the MLflow UI draws GFLOP/s against n), and
    its GFLOP/s and times once more as flat per-size keys, which the report reads without a history
    request per run (schema.matmul_point_key)."""
    if "bfloat16" in cfg.dtypes and "torch" in cfg.backends:
        require_native_bf16(ctx.device, "dtypes")
    # fp32 products are IEEE fp32 on every device (matmul_series sets cuBLAS so): said, not assumed
    tracker.set_tags({tag("isolation"): ISOLATION[cfg.isolation], tag("fp32_math"): "ieee"})
    points = measure(cfg, ctx.device)
    gpu = device_name(ctx.device) if ctx.device.type == "cuda" else None
    sms = gpu_sms(ctx.device) if gpu else None
    peaks = point_peaks(points, gpu, sms) if gpu else {}
    tracker.set_tags({tag("util.peak_source"): points_peak_source(gpu, sms)})
    rows = []
    for p in points:
        values = point_metrics(p, peaks)
        tracker.log_metrics(values, step=p.size)
        rows.append(
            {
                "backend": p.backend,
                "device": "cpu" if p.backend == "numpy" else str(ctx.device),
                "dtype": p.dtype,
                "size": p.size,
                "gflops": round(p.gflops, 3),
                **{k: v for k, v in p.stats.as_dict().items()},
                "rel_error": p.rel_error,
                "unsynced_time_s": p.unsynced_s,
                "isolation": cfg.isolation,
                "measured_in_pid": p.pid,
                "thread_pools_loaded": list(p.pools),
            }
        )
    tracker.log_dict(rows, "timings.json")
    header = "backend,device,dtype,size,gflops,median_s,p10_s,p90_s,samples,rel_error,unsynced_time_s"
    lines = [header] + [
        f"{r['backend']},{r['device']},{r['dtype']},{r['size']},{r['gflops']},{r['median_s']:.6g},"
        f"{r['p10_s']:.6g},{r['p90_s']:.6g},{r['repeats']},{r['rel_error']:.3g},{r['unsynced_time_s'] or ''}"
        for r in rows
    ]
    tracker.log_text("\n".join(lines) + "\n", "matmul.csv")
    fig = _chart(points, ctx.device, peaks)
    tracker.log_figure(fig, "gflops.png")
    return points
