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

from collections.abc import Iterable, Sequence

from devicebench.report.fmt import NONE, fmt_x
from devicebench.report.money import pair_cost
from devicebench.report.pairs import Pair
from devicebench.report.sides import THROUGHPUT_METRICS, Side, work_key
from devicebench.schema import TRAINING_WORKLOADS as TRAINING

WHICH = "any threads or data feeding, e.g. a devicebench tune run"


def throughput(side: Side) -> float | None:
    stat = side.metrics.get(THROUGHPUT_METRICS[0])
    return stat.median if stat and stat.median > 0 else None


def fastest_cpu(pair: Pair, sides: Iterable[Side]) -> Side | None:
    """The fastest CPU side that did the pair's work on the pair's CPU model at its world size."""
    base = pair.base
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


def attach(pairs: Sequence[Pair], sides: Iterable[Side]) -> None:
    """Give each CPU/GPU training pair its best CPU, `speedups["best_cpu"]` (GPU throughput / the best
    CPU's) and, where the best is not the pair's own CPU side, its cost against that best CPU: the
    price-performance question is asked of the CPU at its best."""
    every = list(sides)
    for pair in pairs:
        if not pair.is_cpu_gpu or pair.workload not in TRAINING:
            continue
        best, gpu = fastest_cpu(pair, every), throughput(pair.other)
        if best is None or gpu is None:
            continue
        pair.best_cpu = best
        pair.speedups["best_cpu"] = gpu / (throughput(best) or 1.0)
        if best is not pair.base:
            pair.cost = pair_cost(best, pair.other)


def against_best(pairs: Iterable[Pair]) -> list[Pair]:
    """The pairs with a speedup over this CPU at its best, once a CPU side faster than some pair's own was
    measured (a tuned side); then a pair whose own CPU is that best side counts too: the GPU with its data
    in memory against the tuned CPU is the best-against-best answer. Without a tuned side: none, since
    each pair's own speedup is already that answer (the report's name, verdict lines and heatmap agree)."""
    known = [p for p in pairs if p.best_cpu is not None and "best_cpu" in p.speedups]
    return known if any(p.best_cpu is not p.base for p in known) else []


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


def speedup_cell(p: Pair) -> str:
    """`1.15× (4 threads, data in memory)`, or the pair's own CPU side when it is the fastest measured."""
    if p.best_cpu is None or "best_cpu" not in p.speedups:
        return NONE
    if p.best_cpu is p.base:
        return f"{fmt_x(p.speedups['best_cpu'])} (the base is the best CPU measured)"
    return f"{fmt_x(p.speedups['best_cpu'])} ({cpu_setting(p.best_cpu)})"
