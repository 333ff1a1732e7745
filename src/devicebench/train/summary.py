"""A training run's figures summed over its epochs, evaluations and, in a data-parallel job, its ranks
(`Totals`), and how much of the device it used (model FLOPs per sample against the device's peak).

A job trains as fast as its slowest rank, on all ranks' samples; every rank evaluates the whole eval set,
so the evaluation figures are any rank's (rank 0's, which logs them).

`flops/train_per_sample` is counted once, by torch's own `FlopCounterMode`, on a copy of the model built
on the meta device (no memory, no compute, any device): forward, loss and backward of a 2-sample batch of
the run's shapes, halved. The tutorial Net counts 1,303,440 forward (conv1 705,600 + conv2 480,000 + fc
117,840) and 3,204,720 with its backward. With the measured throughput that gives
`throughput/train_tflops`, and against the device's dense peak for the dtype the run computed in,
`util/peak_fraction`: 0.3 % of an H100's peak says launch-bound, where a larger batch helps and a larger
GPU does not. A GPU's peak comes from the datasheet table (host/peaks.py); a CPU's is measured here by a
short `torch.mm`; a device with neither logs no fraction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from devicebench.host.cpu import usable_cores
from devicebench.host.device import gpu_sms
from devicebench.host.peaks import gpu_peak, peak_source
from devicebench.host.timing import Timer
from devicebench.schema import (
    ALLREDUCE_S,
    COMM_SHARE,
    FLOPS_PER_SAMPLE,
    PEAK_FRACTION,
    PEAK_TFLOPS,
    SLOWEST_RANK,
    TRAIN_TFLOPS,
    WORLD_SIZE,
    rank_key,
    tag,
)
from devicebench.train.records import EpochResult, EvalResult


@dataclass(frozen=True)
class Totals:
    """Sums over a run's epochs and evaluations: what the summary metrics and the results report."""

    train_s: float
    data_wait_s: float
    train_samples: int
    eval_s: float
    train_samples_per_s: float
    eval_samples_per_s: float

    @classmethod
    def of(cls, epochs: list[EpochResult], evals: list[EvalResult]) -> Totals:
        train_s, eval_s = sum(e.seconds for e in epochs), sum(e.seconds for e in evals)
        train_samples = sum(e.samples for e in epochs)
        return cls(
            train_s=train_s,
            data_wait_s=sum(e.data_wait_s for e in epochs),
            train_samples=train_samples,
            eval_s=eval_s,
            train_samples_per_s=train_samples / train_s if train_s > 0 else math.nan,
            eval_samples_per_s=sum(e.samples for e in evals) / eval_s if eval_s > 0 else math.nan,
        )

    def timings(self) -> dict[str, float]:
        """The fields every workload's result reports, by name."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "train_samples"}

    def of_job(self, ranks: list[dict[str, float]]) -> Totals:
        """The job's training figures from every rank's (this rank's evaluation stays: every rank
        evaluates the whole set): the job trains as fast as its slowest rank, on all ranks' samples."""
        if len(ranks) < 2:
            return self
        slowest = max(ranks, key=lambda r: r["train_s"])
        samples = int(sum(r["train_samples"] for r in ranks))
        return dataclasses.replace(
            self,
            train_s=slowest["train_s"],
            data_wait_s=slowest["data_wait_s"],
            train_samples=samples,
            train_samples_per_s=samples / slowest["train_s"] if slowest["train_s"] > 0 else math.nan,
        )


def dist_metrics(
    ranks: list[dict[str, float]], allreduce_s: float | None, steps: int, train_s: float
) -> dict[str, float]:
    """What a job of several processes adds: its size, each rank's throughput, the slowest rank, and
    the measured all-reduce with the share of training it could at most have taken (`steps` of it over
    the job's `train_s`; DDP overlaps it with backward, so the share is an upper bound)."""
    if len(ranks) < 2:
        return {}
    values = {WORLD_SIZE: float(len(ranks))}
    for r, fig in enumerate(ranks):
        values[rank_key(r, "train_s")] = fig["train_s"]
        values[rank_key(r, "data_wait_s")] = fig["data_wait_s"]
        if fig["train_s"] > 0:
            values[rank_key(r, "train_samples_per_s")] = fig["train_samples"] / fig["train_s"]
    values[SLOWEST_RANK] = float(max(range(len(ranks)), key=lambda r: ranks[r]["train_s"]))
    if allreduce_s is not None:
        values[ALLREDUCE_S] = allreduce_s
        if train_s > 0:
            values[COMM_SHARE] = min(steps * allreduce_s / train_s, 1.0)
    return values


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
    n = min(2, x.shape[0])
    try:
        model = meta_model(build)
        model.train()
        xm, ym = x[:n].to("meta"), y[:n].to("meta")
        with FlopCounterMode(display=False) as counter:
            loss_fn(model(xm), ym).backward()
    except Exception:
        return None
    total = counter.get_total_flops()
    return total / n if total > 0 else None


def forward_flops_per_sample(model: torch.nn.Module, shape: tuple[int, ...]) -> float | None:
    """The forward's FLOPs for one sample of `shape` in eval mode (what serving a request costs), counted
    as `train_flops_per_sample` counts, a multiply-add as two, on the device the model is on (a model
    built on the meta device costs neither memory nor compute). ResNet-18 at 3x224x224 counts 3.63
    GFLOP, twice torchvision's documented 1.814 "GFLOPS" (multiply-adds). None where counting fails."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            model(torch.zeros(1, *shape, device=device))
    except Exception:
        return None
    finally:
        model.train(was_training)
    total = counter.get_total_flops()
    return float(total) if total > 0 else None


def meta_model(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """`build()` on the meta device, the global RNG untouched: for counting FLOPs."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        return build()


def utilization_metrics(
    flops_per_sample: float | None,
    samples_per_s: float,
    device: torch.device,
    dtype: str,
    devices: int = 1,
    keys: tuple[str, str] = (FLOPS_PER_SAMPLE, TRAIN_TFLOPS),
) -> tuple[dict[str, float], dict[str, str]]:
    """(`flops/train_per_sample`, `throughput/train_tflops`, `util/peak_tflops`, `util/peak_fraction`;
    the `util.*` tags saying which dtype's peak and where it comes from). Without a FLOP count, or on a
    device with no known peak, the figures it cannot know are left out, never guessed. A job's
    throughput is all its ranks', so its peak is that of the `devices` it ran on: its GPUs, or for a
    CPU job its nodes (the processes on a node share its one CPU, whose peak is taken on every core).
    `keys` names the FLOP count and the rate: training's, or serving's (forward FLOPs, serve TFLOP/s)."""
    if not flops_per_sample:
        return {}, {}
    tflops = flops_per_sample * samples_per_s / 1e12
    metrics = {keys[0]: flops_per_sample, keys[1]: tflops}
    tags = {tag("util.dtype"): dtype}
    peak, source = peak_tflops(device, dtype)
    if peak is not None:
        job_peak = peak * devices
        metrics.update({PEAK_TFLOPS: job_peak, PEAK_FRACTION: tflops / job_peak})
    return metrics, {**tags, tag("util.peak_source"): source}


def peak_devices(device: torch.device, world_size: int, local_size: int) -> int:
    """How many devices' peaks a job's throughput is held against: every GPU of it, but one CPU per
    node, as a node's processes share its cores."""
    return world_size if device.type == "cuda" else max(world_size // max(local_size, 1), 1)


def peak_tflops(device: torch.device, dtype: str) -> tuple[float | None, str]:
    """(dense peak TFLOP/s for `dtype` on `device`, where the figure comes from), or (None, why there
    is none): the tag then says `unknown: ...` with the reason, never a bare "unknown"."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        sms = gpu_sms(device)  # fewer on a MIG slice
        peak = gpu_peak(name, sms)
        if peak is not None and dtype not in peak.tflops:
            return None, f"unknown: the {peak.name} datasheet gives no {dtype} peak"
        return (peak.tflops[dtype] if peak else None), peak_source(name, sms)
    if device.type == "cpu" and dtype in CPU_DTYPES:
        measured = cpu_peak_tflops(dtype)
        return measured if measured else (None, f"unknown: a {dtype} torch.mm failed on this CPU")
    return None, f"unknown: no {dtype} peak for a {device.type} device"


def cpu_peak_tflops(dtype: str = "fp32", n: int = CPU_PEAK_N) -> tuple[float, str] | None:
    """The CPU's matmul rate measured now on every usable core: the best of a few `torch.mm` of n×n.
    A measured rate, not the silicon's theoretical peak: what this CPU gives torch for dense math. On
    all its cores, not the run's own threads: a tuned run that chose 2 of 16 threads would otherwise be
    held against an eighth of the CPU and read 8× busier than it was."""
    threads, before = usable_cores(), torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(CPU_DTYPES[dtype])
        out = torch.empty_like(a)
        stats = Timer("cpu").measure(lambda: torch.mm(a, a, out=out), warmup=1, repeats=3, min_time_s=0.05)
    except RuntimeError:
        return None
    finally:
        torch.set_num_threads(before)
    tflops = 2.0 * n**3 / stats.min_s / 1e12
    return tflops, f"measured: torch.mm {dtype} n={n} on this CPU's {threads} cores, best of {stats.samples}"
