"""The second speedup of every CPU/GPU pair: against this CPU at its best, not only as configured.

The tutorial's CPU side (16 torch threads + 2 DataLoader workers on 16 vCPUs) trained at 200-250 img/s
where the same network with its data in memory did ~2,000: a pair against the CPU as configured
measures the configuration. So for each CPU/GPU pair of a training workload the report looks among the
CPU sides that did the same work (`devicebench.work_key`: the config key without how the CPU was fed,
loader and workers) on the same CPU model and world size, takes the fastest (a `devicebench tune` run,
or any other), and holds the GPU against it too. Runs logged before work keys existed compare with
their own config only. Torch-free, like the rest of the report.
"""

from __future__ import annotations

from collections.abc import Iterable

from devicebench.report.model.sides import THROUGHPUT_METRICS, Side, work_key


def throughput(side: Side) -> float | None:
    stat = side.metrics.get(THROUGHPUT_METRICS[0])
    return stat.median if stat and stat.median > 0 else None


def fastest_cpu(base: Side, sides: Iterable[Side]) -> Side | None:
    """The fastest CPU side that did `base`'s work on its CPU model at its world size."""
    alike = [
        s
        for s in sides
        if s.is_cpu
        and s.workload == base.workload
        and s.device_name == base.device_name
        and s.world_size == base.world_size
        and work_key(s) == work_key(base)
        and throughput(s) is not None
    ]
    return max(alike, key=lambda s: throughput(s) or 0.0, default=None)


def cpu_setting(side: Side) -> str:
    """How the best CPU ran, as the verdict says it: `4 threads, data in memory`."""
    run = side.runs[0]
    tuned = run.tag("cpu.tuned.setting")
    if tuned:
        return tuned
    threads = run.tag("host.torch_threads", "?")
    params = side.params
    feed = (
        "data in memory"
        if params.get("loader") == "tensor"
        else f"DataLoader, {params.get('num_workers', '?')} workers"
    )
    return f"{threads} threads, {feed}"
