"""Each device at its best: the second and third speedups of every CPU/GPU pair.

The tutorial's CPU side (16 torch threads + 2 DataLoader workers on 16 vCPUs) trained at 200-250 img/s
where the same network with its data in memory did ~2,000: a pair against the CPU as configured
measures the configuration. The GPU side has the same trap the other way: a launch-bound step loses to
its own Python until CUDA graphs remove the launches. So for each CPU/GPU pair of a training workload
the report looks, on each side, among the sides that did the same work (`devicebench.work_key`: the
config key without the setting: feeding, NHWC, compilation, precision) on the same device model and
world size, and takes the fastest (a `devicebench tune` run, or any other). The GPU is held against the
CPU at its best, and each device at its best against the other. Torch-free, like the rest of the report.
"""

from __future__ import annotations

from collections.abc import Iterable

from devicebench.config.workloads import REDUCED_PRECISIONS
from devicebench.report.model.sides import THROUGHPUT_METRICS, Side
from devicebench.util.fmt import fmt_setting


def throughput(side: Side) -> float | None:
    stat = side.metrics.get(THROUGHPUT_METRICS[0])
    return stat.median if stat and stat.median > 0 else None


def fastest_alike(base: Side, sides: Iterable[Side]) -> Side | None:
    """The fastest side that did `base`'s work on its device model (a CPU's or a GPU's) at its world
    size: `base` itself where none is faster."""
    alike = [
        s
        for s in sides
        if s.is_cpu == base.is_cpu
        and s.workload == base.workload
        and s.device_name == base.device_name
        and s.world_size == base.world_size
        and s.work_key == base.work_key
        and throughput(s) is not None
    ]
    return max(alike, key=lambda s: throughput(s) or 0.0, default=None)


def fastest_cpu(base: Side, sides: Iterable[Side]) -> Side | None:
    """The fastest CPU side that did `base`'s work on its CPU model at its world size."""
    return fastest_alike(base, sides) if base.is_cpu else None


def reduced_precision(side: Side) -> str | None:
    """`bf16` or `fp16` where the side trained under autocast in reduced precision, else None."""
    precision = side.params.get("precision", "")
    return precision if precision in REDUCED_PRECISIONS else None


def setting_of(side: Side) -> str:
    """How a side ran, as a verdict says it: `4 threads, data in memory`; a GPU side without its
    threads; NHWC, compilation and reduced precision where they were on."""
    run = side.runs[0]
    tuned = run.tag("tuned.setting")
    if tuned:
        return tuned
    params = side.params
    return fmt_setting(
        run.tag("host.torch_threads", "?") if side.is_cpu else None,
        params.get("loader") == "tensor",
        params.get("num_workers", "?"),
        params.get("channels_last") == "true",
        params.get("compile_mode", "default") if params.get("compile") == "true" else None,
        reduced_precision(side),
    )
