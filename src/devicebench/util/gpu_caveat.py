"""Why a GPU run's speed may not repeat, said from its `gpu/*` figures (host/gpu_state.py reads them from
NVML over the training epochs): one judgement, so a run's own line, the report's verdict on a pair and a
nightly regression say the same thing in the same words.

Below these a GPU run's speed is not the GPU's alone: under HOST_BOUND of the time running kernels, the
step waits on the host CPU, whose speed moves between processes (ResNet-18 at 32 px: 11,852 and 14,644
img/s in two processes on one H100); a mean SM clock under CLOCK_LOW of its maximum, or clocks capped for
over CAPPED of training, is the GPU slowed by its own limits (power, heat).
Torch- and mlflow-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from devicebench.schema import GPU_BUSY_SHARE, GPU_POWER_CAPPED_S, GPU_SM_CLOCK_SHARE, GPU_THERMAL_CAPPED_S
from devicebench.util.fmt import fmt_share
from devicebench.util.stats import is_figure

HOST_BOUND = 0.8
CLOCK_LOW = 0.9
CAPPED = 0.05


def host_bound(gpu: Mapping[str, float]) -> str:
    """`host-bound: GPU busy 41%`, or "" where the GPU ran kernels for most of the step (or no one knows)."""
    busy = gpu.get(GPU_BUSY_SHARE)
    return f"host-bound: GPU busy {fmt_share(busy)}" if is_figure(busy) and busy < HOST_BOUND else ""


def held_down(gpu: Mapping[str, float], train_s: float) -> list[str]:
    """What held the GPU's own clocks down over `train_s` seconds of training: `power-capped 12% of
    training`, `thermal-capped ...`, `SM clock at 72% of max`; [] when nothing did (or no one knows)."""
    said = []
    for key, what in ((GPU_POWER_CAPPED_S, "power"), (GPU_THERMAL_CAPPED_S, "thermal")):
        capped = gpu.get(key)
        if is_figure(capped) and is_figure(train_s) and train_s > 0 and capped / train_s > CAPPED:
            said.append(f"{what}-capped {fmt_share(min(capped / train_s, 1.0))} of training")
    clock = gpu.get(GPU_SM_CLOCK_SHARE)
    if is_figure(clock) and clock < CLOCK_LOW:
        said.append(f"SM clock at {fmt_share(clock)} of max")
    return said


def gpu_caveat(gpu: Mapping[str, float], train_s: float) -> str:
    """Every reason in one phrase, host-bound first: `host-bound: GPU busy 41%, power-capped 12% of
    training`; "" when none applies or the figures are unknown (a CPU run, a MIG slice, no NVML)."""
    return ", ".join(filter(None, [host_bound(gpu), *held_down(gpu, train_s)]))
