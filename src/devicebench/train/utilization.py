"""How much of the device a training run used: the model's FLOPs per sample and the device's peak.

`flops/train_per_sample` is counted once, by torch's own `FlopCounterMode`, on a copy of the model built
on the meta device (no memory, no compute, any device): forward, loss and backward of a 2-sample batch of
the run's shapes, halved. The tutorial Net counts 1,303,440 forward (conv1 705,600 + conv2 480,000 + fc
117,840) and 3,204,720 with its backward. With the measured throughput that gives
`throughput/train_tflops`, and against the device's dense peak for the dtype the run computed in,
`util/peak_fraction`: 0.3 % of an H100's peak says launch-bound, where a larger batch helps and a larger
GPU does not. A GPU's peak comes from the datasheet table (peaks.py); a CPU's is measured here by a short
`torch.mm`; a device with neither logs no fraction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from devicebench.host.peaks import gpu_peak
from devicebench.host.timing import Timer
from devicebench.schema import FLOPS_PER_SAMPLE, PEAK_FRACTION, PEAK_TFLOPS, TRAIN_TFLOPS, tag

CPU_PEAK_N = 1024  # a product large enough to run at the CPU's matmul speed, short enough to be cheap
CPU_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def train_flops_per_sample(
    build: Callable[[], torch.nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> float | None:
    """Forward + loss + backward FLOPs of one sample of `x`'s shape, or None where counting fails (an op
    without a meta kernel: the run goes on without the figure)."""
    from torch.utils.flop_counter import FlopCounterMode

    n = min(2, x.shape[0])
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            model = build()
        model.train()
        xm, ym = x[:n].to("meta"), y[:n].to("meta")
        with FlopCounterMode(display=False) as counter:
            loss_fn(model(xm), ym).backward()
    except Exception:
        return None
    total = counter.get_total_flops()
    return total / n if total > 0 else None


def summary(
    flops_per_sample: float | None,
    samples_per_s: float,
    device: torch.device,
    dtype: str,
    world_size: int = 1,
) -> tuple[dict[str, float], dict[str, str]]:
    """(`flops/train_per_sample`, `throughput/train_tflops`, `util/peak_tflops`, `util/peak_fraction`;
    the `util.*` tags saying which dtype's peak and where it comes from). Without a FLOP count, or on a
    device with no known peak, the figures it cannot know are left out, never guessed. A job's
    throughput is all its ranks', so its peak is `world_size` devices'."""
    if not flops_per_sample:
        return {}, {}
    tflops = flops_per_sample * samples_per_s / 1e12
    metrics = {FLOPS_PER_SAMPLE: flops_per_sample, TRAIN_TFLOPS: tflops}
    tags = {tag("util.dtype"): dtype}
    peak = peak_tflops(device, dtype)
    if peak is None:
        return metrics, {**tags, tag("util.peak_source"): "unknown"}
    job_peak = peak[0] * world_size
    metrics.update({PEAK_TFLOPS: job_peak, PEAK_FRACTION: tflops / job_peak})
    return metrics, {**tags, tag("util.peak_source"): peak[1]}


def peak_tflops(device: torch.device, dtype: str) -> tuple[float, str] | None:
    """(dense peak TFLOP/s for `dtype` on `device`, where the figure comes from), or None."""
    if device.type == "cuda":
        peak = gpu_peak(torch.cuda.get_device_name(device))
        if peak is None or dtype not in peak.tflops:
            return None
        return peak.tflops[dtype], f"datasheet: {peak.source}"
    if device.type == "cpu" and dtype in CPU_DTYPES:
        return cpu_peak_tflops(dtype)
    return None


def cpu_peak_tflops(dtype: str = "fp32", n: int = CPU_PEAK_N) -> tuple[float, str] | None:
    """The CPU's matmul rate measured now with torch's threads: the best of a few `torch.mm` of n×n.
    A measured rate, not the silicon's theoretical peak: what this CPU gives torch for dense math."""
    with contextlib.suppress(RuntimeError):
        a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(CPU_DTYPES[dtype])
        out = torch.empty_like(a)
        stats = Timer("cpu").measure(lambda: torch.mm(a, a, out=out), warmup=1, repeats=3, min_time_s=0.05)
        tflops = 2.0 * n**3 / stats.min_s / 1e12
        return tflops, f"measured: torch.mm {dtype} n={n} on this CPU, best of {stats.samples}"
    return None
