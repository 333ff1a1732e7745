"""Matrix multiply: NumPy on the CPU against torch on any device, GFLOP/s per size and dtype.

The tutorial this comes from timed one 8000×8000 `torch.mm` on the GPU without synchronising, which
measures the kernel *launch*. Here every figure is the median of synchronised repeats after warm-up,
the naive unsynchronised figure is logged beside it (so a report can show the gap), and each result
carries its relative error against a float64 reference, because a fast wrong answer is not a speedup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from devicebench.config import param
from devicebench.errors import UsageError
from devicebench.timing import Timer, TimingStats
from devicebench.tracking import Tracker
from devicebench.workloads import Context

DATA = "random"
MEMORY_PARAMS = ("sizes",)  # what to lower when a run does not fit in memory (the CLI names them)
NUMPY_DTYPES = ("float64", "float32")
ERROR_ROWS = 32


@dataclass(frozen=True)
class Config:
    device: str = param(
        "cpu", "where torch runs: cpu, cuda, cuda:N, mps or auto (NumPy always runs on the CPU)"
    )
    sizes: tuple[int, ...] = param((8000,), "square matrix sizes n (n×n @ n×n)", min=1, max=65536)
    dtypes: tuple[str, ...] = param(
        ("float64", "float32"),
        "element types; NumPy does float64/float32, torch also bfloat16/float16",
        choices=("float64", "float32", "bfloat16", "float16"),
    )
    backends: tuple[str, ...] = param(
        ("numpy", "torch"), "implementations to time", choices=("numpy", "torch")
    )
    repeats: int = param(5, "timed repetitions per point (median and spread are logged)", min=1, max=1000)
    warmup: int = param(
        1, "untimed runs before timing (allocator, BLAS heuristics, lazy init)", min=0, max=100
    )
    seed: int = param(0, "seed for the random matrices", min=0)

    def validate(self) -> None:
        if not self.points():
            raise UsageError(
                f"no backend supports dtypes {','.join(self.dtypes)} (NumPy: {', '.join(NUMPY_DTYPES)})",
                param="dtypes",
            )

    def points(self) -> list[tuple[str, str]]:
        """The (backend, dtype) pairs to measure: NumPy has no bfloat16 and no fast float16."""
        return [(b, d) for b in self.backends for d in self.dtypes if b == "torch" or d in NUMPY_DTYPES]


@dataclass(frozen=True)
class Point:
    backend: str
    dtype: str
    size: int
    stats: TimingStats
    rel_error: float
    unsynced_s: float | None

    @property
    def gflops(self) -> float:
        return gflops(self.size, self.stats.median_s)


def gflops(n: int, seconds: float) -> float:
    """2n³ floating-point operations (n³ multiply-adds) per n×n product."""
    return 2.0 * n**3 / seconds / 1e9


def rel_error(result_rows: np.ndarray, a64: np.ndarray, b64: np.ndarray, rows: np.ndarray) -> float:
    """‖C[rows] − (A·B)[rows]‖ / ‖(A·B)[rows]‖ against float64, on a sample of rows (a full reference costs
    as much as the product being timed)."""
    ref = a64[rows] @ b64
    return float(np.linalg.norm(result_rows.astype(np.float64) - ref) / np.linalg.norm(ref))


def _numpy_point(a64: np.ndarray, b64: np.ndarray, dtype: str, cfg: Config, rows: np.ndarray) -> Point:
    a, b = a64.astype(dtype), b64.astype(dtype)
    out = np.empty_like(a)
    stats = Timer("cpu").measure(lambda: np.matmul(a, b, out=out), warmup=cfg.warmup, repeats=cfg.repeats)
    return Point("numpy", dtype, a.shape[0], stats, rel_error(out[rows], a64, b64, rows), None)


def _torch_point(
    a64: np.ndarray, b64: np.ndarray, dtype: str, cfg: Config, rows: np.ndarray, device: torch.device
) -> Point:
    tdtype = getattr(torch, dtype)
    a = torch.from_numpy(a64).to(device=device, dtype=tdtype)
    b = torch.from_numpy(b64).to(device=device, dtype=tdtype)
    out = torch.empty_like(a)
    timer = Timer(device)
    stats = timer.measure(lambda: torch.mm(a, b, out=out), warmup=cfg.warmup, repeats=cfg.repeats)
    unsynced = timer.unsynchronised(lambda: torch.mm(a, b, out=out)) if device.type != "cpu" else None
    idx = torch.from_numpy(rows).to(device)
    sample = out.index_select(0, idx).to(torch.float64).cpu().numpy()
    return Point("torch", dtype, a.shape[0], stats, rel_error(sample, a64, b64, rows), unsynced)


def measure(cfg: Config, device: torch.device) -> list[Point]:
    """Every (backend, dtype, size) point, sizes ascending so the chart reads left to right."""
    rng = np.random.default_rng(cfg.seed)
    points = []
    for n in sorted(set(cfg.sizes)):
        a64, b64 = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        rows = rng.choice(n, size=min(n, ERROR_ROWS), replace=False)
        for backend, dtype in cfg.points():
            if backend == "numpy":
                points.append(_numpy_point(a64, b64, dtype, cfg, rows))
            else:
                points.append(_torch_point(a64, b64, dtype, cfg, rows, device))
    return points


def _chart(points: list[Point], device: torch.device) -> object:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for backend, dtype in dict.fromkeys((p.backend, p.dtype) for p in points):
        series = [p for p in points if (p.backend, p.dtype) == (backend, dtype)]
        where = "cpu" if backend == "numpy" else str(device)
        ax.plot(
            [p.size for p in series],
            [p.gflops for p in series],
            marker="o",
            label=f"{backend} {dtype} ({where})",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("matrix size n")
    ax.set_ylabel("GFLOP/s (median of synchronised repeats)")
    ax.set_title("Matrix multiply throughput")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def run(cfg: Config, ctx: Context, tracker: Tracker) -> list[Point]:
    """Measure, then log each point with step = matrix size (the MLflow UI draws GFLOP/s against n)."""
    points = measure(cfg, ctx.device)
    rows = []
    for p in points:
        base = f"matmul/{p.backend}/{p.dtype}"
        values = {
            f"{base}/gflops": p.gflops,
            f"{base}/time_s": p.stats.median_s,
            f"{base}/time_p10_s": p.stats.p10_s,
            f"{base}/time_p90_s": p.stats.p90_s,
            f"{base}/rel_error": p.rel_error,
        }
        if p.unsynced_s is not None:
            values[f"{base}/unsynced_time_s"] = p.unsynced_s
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
            }
        )
    tracker.log_dict(rows, "timings.json")
    header = "backend,device,dtype,size,gflops,median_s,p10_s,p90_s,rel_error,unsynced_time_s"
    lines = [header] + [
        f"{r['backend']},{r['device']},{r['dtype']},{r['size']},{r['gflops']},{r['median_s']:.6g},"
        f"{r['p10_s']:.6g},{r['p90_s']:.6g},{r['rel_error']:.3g},{r['unsynced_time_s'] or ''}"
        for r in rows
    ]
    tracker.log_text("\n".join(lines) + "\n", "matmul.csv")
    fig = _chart(points, ctx.device)
    tracker.log_figure(fig, "gflops.png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return points
