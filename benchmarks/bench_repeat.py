"""Why a GPU training figure moves from one fresh process to the next, one suspect at a time.

ResNet-18 at batch 128 trained at 11,852 and 14,644 img/s in two fresh processes on one H100, while the
bare loop beside it moved the other way (13,447 and 12,247; issue 39). A nightly regression check reads
such a swing as a regression, so a repeat must hold to ±5 % or the run must say why. The suspects are
what a fresh process can land on differently: the GPU's clocks (power, heat), cuDNN's choice of
convolution algorithm, the caching allocator's layout, and the order the two loops ran in. Each variant
changes one of them, and all run the same case in `PROCESSES` fresh processes each, taking turns, so a
drift of the host hits every variant alike:

* `default`: as `make gpu-check`'s overhead step runs it (the bare loop, then devicebench's);
* `ours_first`: devicebench's loop before the bare one (the order);
* `cudnn_benchmark`: `torch.backends.cudnn.benchmark = True`, so cuDNN times its algorithms and keeps
  the fastest, where by default it takes its heuristic's pick (the algorithm choice);
* `expandable`: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (the allocator's layout).

A process prints both loops' samples/s and what NVML saw over devicebench's epochs (`host/gpu_state.py`:
busy share, SM clock share, seconds capped by power or heat: the clocks). The lines give, per variant,
each loop's median and its spread (the largest deviation of a process from that median) with NVML's
range, then which variants hold to ±5 %: exit 0 where `default` does. `make gpu-check STEPS=repeat` runs
it on a GPU (outside the default steps' 10 minutes); `python -m benchmarks.bench_repeat cpu` runs a small
CPU case, which is how the plumbing is tested.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

import torch

from benchmarks import BadArgument, deviation, exit_with, last_line
from benchmarks.bench_overhead import CHILD_TIMEOUT_S, Case, bare_loop, devicebench_result
from devicebench.schema import GPU_BUSY_SHARE, GPU_POWER_CAPPED_S, GPU_SM_CLOCK_SHARE, GPU_THERMAL_CAPPED_S

HOLD = 0.05  # the nightly check's tolerance: a repeat within ±5 % of the median
PROCESSES = 3
VARIANTS = ("default", "ours_first", "cudnn_benchmark", "expandable")
EXPANDABLE = "expandable_segments:True"
CASES = {
    "cuda": Case("resnet18", 128, 25_600, 1),  # the case that moved (bench_overhead's GPU case)
    "cpu": Case("tutorial", 64, 1_280, 1),  # the plumbing, in seconds
}
NVML = (  # what a process reports from devicebench's epochs: (metric, how it is named, its unit)
    (GPU_BUSY_SHARE, "busy share", ""),
    (GPU_SM_CLOCK_SHARE, "SM clock share of max", ""),
    (GPU_POWER_CAPPED_S, "power-capped", " s"),
    (GPU_THERMAL_CAPPED_S, "thermal-capped", " s"),
)


@dataclass(frozen=True)
class Sample:
    """One fresh process: what it ran with, both loops' samples/s, NVML's figures (NaN where none)."""

    ran_with: str
    ours: float
    bare: float
    nvml: tuple[float, ...]


def measure(variant: str, device: torch.device) -> Sample:
    """The case once each way in this process, as `variant` says; the child's whole work."""
    case = CASES[device.type]
    torch.backends.cudnn.benchmark = variant == "cudnn_benchmark"
    ran_with = (
        f"cudnn.benchmark={torch.backends.cudnn.benchmark},"
        f"alloc={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'default')},"
        f"first={'ours' if variant == 'ours_first' else 'bare'}"
    )
    if variant == "ours_first":
        ours = devicebench_result(case, device)
        bare = bare_loop(case, device)
    else:
        bare = bare_loop(case, device)
        ours = devicebench_result(case, device)
    nvml = tuple(ours.gpu.get(key, math.nan) for key, _, _ in NVML)
    return Sample(ran_with, ours.train_samples_per_s, bare, nvml)


def in_fresh_process(variant: str, device_name: str) -> Sample | str:
    """`measure` in a fresh process of this module, or what it said last where it failed."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if variant == "expandable":  # read once, when the allocator starts: it must be in the environment
        env["PYTORCH_CUDA_ALLOC_CONF"] = EXPANDABLE
    argv = [sys.executable, "-m", "benchmarks.bench_repeat", device_name, "child", variant]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"a process ran past {CHILD_TIMEOUT_S} s"
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("sample ")]
    if proc.returncode != 0 or len(lines) != 1:
        return f"a process failed (exit {proc.returncode}): {last_line(proc.stderr)}"
    _, ran_with, *figures = lines[0]
    ours, bare, *nvml = (float(f) for f in figures)
    return Sample(ran_with, ours, bare, tuple(nvml))


def _nvml_range(samples: list[Sample]) -> str:
    parts = []
    for i, (_, name, unit) in enumerate(NVML):
        seen = [s.nvml[i] for s in samples if not math.isnan(s.nvml[i])]
        if seen:
            parts.append(f"{name} {min(seen):.2f}-{max(seen):.2f}{unit}")
    return "NVML: " + ", ".join(parts) if parts else "no NVML figures"


def line(variant: str, samples: list[Sample]) -> str:
    """A variant's line: each loop's median samples/s and spread, what NVML saw, what it ran with."""
    ours, bare = [s.ours for s in samples], [s.bare for s in samples]
    each = ", ".join(f"{v:,.0f}" for v in ours)
    return (
        f"repeat: {variant} ({samples[0].ran_with}): devicebench {statistics.median(ours):,.0f} samples/s "
        f"(±{deviation(ours):.1%} over {len(samples)} fresh processes: {each}), "
        f"bare loop {statistics.median(bare):,.0f} (±{deviation(bare):.1%}); {_nvml_range(samples)}"
    )


def verdict(results: dict[str, list[Sample] | str]) -> tuple[str, bool]:
    """Which variants hold both loops to ±5 %; ok where `default` does (what the nightly check runs)."""
    said, holds = [], {}
    for variant, got in results.items():
        if isinstance(got, str):
            said.append(f"{variant} FAILED")
            continue
        worst = max(deviation([s.ours for s in got]), deviation([s.bare for s in got]))
        holds[variant] = worst <= HOLD
        said.append(f"{variant} {'holds' if holds[variant] else 'does not'} (±{worst:.1%})")
    ok = holds.get("default", False)
    return (
        f"repeat: within ±{HOLD:.0%} over fresh processes: {'; '.join(said)} {'ok' if ok else 'MISSED'}",
        ok,
    )


def main(device_name: str = "cuda", processes: str = "", variants: str = "") -> int:
    """`processes`: fresh processes per variant (default PROCESSES); `variants`: comma-separated, from
    VARIANTS (all by default; `default` always runs first, since the verdict is about it)."""
    if device_name not in CASES:
        raise BadArgument(f"bench_repeat: device {device_name!r} is not allowed; allowed: {', '.join(CASES)}")
    if processes == "child":
        print("sample", *_child_figures(variants, torch.device(device_name)))
        return 0
    if processes and (not processes.isdigit() or int(processes) < 1):
        raise BadArgument(f"bench_repeat: processes must be a whole number >= 1, not {processes!r}")
    chosen = (
        ["default", *(v for v in variants.split(",") if v and v != "default")] if variants else list(VARIANTS)
    )
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        raise BadArgument(f"bench_repeat: no variant {unknown[0]!r}; the variants: {', '.join(VARIANTS)}")
    if device_name == "cuda" and not torch.cuda.is_available():
        raise BadArgument("bench_repeat: torch finds no CUDA device on this host; run it on a GPU instance")
    results: dict[str, list[Sample] | str] = {v: [] for v in chosen}
    for _ in range(int(processes) if processes else PROCESSES):  # variants take turns: a drift hits all
        for variant in chosen:
            got = results[variant]
            if isinstance(got, list):
                sample = in_fresh_process(variant, device_name)
                results[variant] = sample if isinstance(sample, str) else [*got, sample]
    case = CASES[device_name]
    print(f"repeat: {case.model} batch {case.batch}, {case.samples:,} samples an epoch, on {device_name}")
    for variant, got in results.items():
        print(f"repeat: {variant}: FAILED: {got}" if isinstance(got, str) else line(variant, got), flush=True)
    said, ok = verdict(results)
    print(said)
    return 0 if ok else 1


def _child_figures(variant: str, device: torch.device) -> list[str]:
    if variant not in VARIANTS:
        raise BadArgument(f"bench_repeat: no variant {variant!r}; the variants: {', '.join(VARIANTS)}")
    s = measure(variant, device)
    return [s.ran_with, repr(s.ours), repr(s.bare), *(repr(v) for v in s.nvml)]


if __name__ == "__main__":
    exit_with(main, *sys.argv[1:4])
