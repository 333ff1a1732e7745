"""The rules about a pair's GPU side: what held it back (its loader, small batches, its host, its own
limits), how much of it the work used, and when the measurement itself misleads (a timer that does not
synchronise, strict fp32 on a GPU with TF32). Each a small pure function of one pair (pair_rules.RULES
orders them); the thresholds are module constants so a test (or a reader) can see what "clearly" means.
"""

from __future__ import annotations

import math

from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.report.read.records import RunRecord
from devicebench.schema import PEAK_FRACTION, PRODUCT, TRAIN_S
from devicebench.util.fmt import fmt_percent, fmt_share, fmt_x
from devicebench.util.gpu_caveat import held_down, host_bound

LOADER_BOUND_SHARE = 0.5  # the GPU side waited for data more than half its training time
SMALL_IMAGE = 128  # unet images at most this side: shrinking them further is no longer the advice
SMALL_BATCH = 32  # batches this small leave a GPU idle between kernel launches
LAUNCH_BOUND_SPEEDUP = 3.0  # ...when the speedup stays below this
UNSYNCED_FACTOR = 2.0  # synchronised time more than 2x the unsynchronised one: the naive timer lies
COMPUTE_BOUND_SPEEDUP = 5.0
SMALL_PEAK_SHARE = 0.05  # a GPU side computing at under 5 % of its dense peak is starved or launch-bound


def _int(value: str) -> int | None:
    try:
        return int(float(value))
    except ValueError:
        return None


def _cores(run: RunRecord) -> int | None:
    """The cores the run's loader could use: the cores it was allowed (`cpu.usable_cores`, a container's
    cpuset), else the host's affinity or count from its fingerprint; None for a run that logged none."""
    for name in ("cpu.usable_cores", "host.cpu_affinity", "host.cpu_count"):
        n = _int(run.tag(name))
        if n is not None and n > 0:
            return n
    return None


def loader_hint(side: Side) -> str:
    """What to change about a loader-bound side, said only in parameters its workload takes: advice to
    set a parameter the command rejects is worse than none.

    A run with a `loader` param can keep its data in memory (`tensor`, cifar's). One with an `image_size`
    (unet's) has no such option: it decodes and resizes every image in `num_workers` processes, so the
    hint follows the run's own figures: more
    workers where it ran with fewer than its cores could feed (one core left to training), else smaller
    images (less resizing per sample), else `devicebench tune`, which measures the host's best setting.
    """
    params = side.params
    if "loader" in params:
        return "; try loader=tensor" if params["loader"] != "tensor" else ""
    if "image_size" not in params:  # no loader to choose, and no images resized on the CPU
        return ""
    workers = _int(params.get("num_workers", ""))
    cores = _cores(side.runs[0])
    if workers is not None and cores is not None and workers < cores - 1:
        return f"; try num_workers={cores - 1} (ran with {workers} on {cores} cores)"
    size = _int(params.get("image_size", ""))
    if size is not None and size > SMALL_IMAGE:
        return f"; try a smaller image_size (ran at {size}: every image is resized on the CPU)"
    return "; run devicebench tune unet to measure the num_workers this host runs fastest"


def loader_bound(pair: Pair) -> str | None:
    """A GPU that waits for the next batch most of the time measures the data loader, not itself."""
    if pair.other.is_cpu or pair.other.wait_share is None:
        return None
    share = pair.other.wait_share.median
    if share <= LOADER_BOUND_SHARE:
        return None
    hint = loader_hint(pair.other)
    return f"{pair.other.device} run waited for data {fmt_share(share)} of the time: loader-bound{hint}"


def _batch_size(side: Side) -> int | None:
    try:
        return int(float(side.params.get("batch_size", "")))
    except ValueError:
        return None


def launch_bound(pair: Pair) -> str | None:
    """Small batches give a GPU too little work per kernel launch: the speedup is the launch overhead's."""
    batch = _batch_size(pair.base)
    speedup = pair.headline
    if not pair.is_cpu_gpu or batch is None or speedup is None:
        return None
    if batch > SMALL_BATCH or speedup >= LAUNCH_BOUND_SPEEDUP:
        return None
    where = "see crossover" if pair.in_crossover else "try a larger batch_size"
    return f"batch {batch}: GPU launch-bound; speedup grows with batch size ({where})"


def peak_share(pair: Pair) -> str | None:
    """How much of the GPU the run used (`util/peak_fraction`, against the datasheet peak of the dtype it
    computed in): a tiny share says a larger batch or model will gain and a larger GPU will not."""
    stat = pair.other.metrics.get(PEAK_FRACTION)
    if not pair.is_cpu_gpu or stat is None or stat.median >= SMALL_PEAK_SHARE:
        return None
    dtype = pair.other.runs[0].tag("util.dtype") or "its"
    return (
        f"{fmt_percent(stat.median)} of {pair.other.device_name}'s {dtype} peak: launch-bound; a larger batch or "
        "model will gain, a larger GPU will not"
    )


def _gpu_sides(pair: Pair) -> list[Side]:
    return [s for s in (pair.base, pair.other) if not s.is_cpu]


def host_bound_gpu(pair: Pair) -> str | None:
    """A GPU side whose kernels ran for under `HOST_BOUND` of its epochs (`gpu/busy_share`, from NVML)
    waited on the host: its speed, and so the speedup, is the host CPU's as much as the GPU's and moves
    with it from one process to the next (docs/measured.md: one H100, two fresh processes). Not said where
    the loader or small batches already say why the GPU waited."""
    if loader_bound(pair) or launch_bound(pair):
        return None
    for side in _gpu_sides(pair):
        said = host_bound(side.gpu_figures)
        if said:
            return (
                f"{side.device} {said} of its epochs: the step waits on this host's CPU (Python, kernel "
                "launches, copies), so the figure moves with that CPU; a larger batch, CUDA graphs or "
                "compile gains"
            )
    return None


def gpu_held_down(pair: Pair) -> str | None:
    """A GPU side whose clocks its own limits held down (power, heat: `gpu/*_capped_s`, the mean SM clock)
    measured less than that GPU does: a comparison or a regression read from it is the host's cooling
    or power limit as much as the work."""
    for side in _gpu_sides(pair):
        train = side.metrics.get(TRAIN_S)
        said = held_down(side.gpu_figures, train.median if train else math.nan)
        if said:
            return (
                f"{side.device} slowed by its own limits ({', '.join(said)}): below what this GPU does; "
                "check its power limit and cooling before comparing"
            )
    return None


def gpu_slower(pair: Pair) -> str | None:
    """A CPU/GPU pair where the GPU lost and neither the loader nor small batches explain it."""
    speedup = pair.headline
    if not pair.is_cpu_gpu or speedup is None or speedup >= 1.0:
        return None
    if loader_bound(pair) or launch_bound(pair):
        return None
    return (
        f"{pair.other.device} slower than CPU ({fmt_x(speedup)}): too little work per step to pay for "
        "transfers and launches"
    )


def compute_bound(pair: Pair) -> str | None:
    """A large speedup with the loader not in the way: the expected case, said so the table reads whole.
    Not said where the GPU used a sliver of its peak or the CPU at its best closes the gap: then the
    large figure is the configured CPU's slowness (on the H100 the tutorial at batch 4 read "5.31x,
    compute-bound" beside "0.00076 % of peak" and 0.59x against the tuned CPU)."""
    speedup = pair.headline
    if not pair.is_cpu_gpu or speedup is None or speedup < COMPUTE_BOUND_SPEEDUP:
        return None
    if loader_bound(pair) or peak_share(pair):
        return None
    best = pair.best_cpu_speedup if pair.best_cpu_speedup is not None else speedup
    if pair.best_cpu is not pair.base and best < COMPUTE_BOUND_SPEEDUP:
        return None
    return f"compute-bound: {pair.other.device} {fmt_x(speedup)} faster"


def unsynced_underreport(pair: Pair) -> str | None:
    """The tutorial's unsynchronised GPU timer measures the launch; show by how much it under-reports."""
    worst: tuple[float, str, int] | None = None
    for (backend, dtype, size), v in pair.other.product_points.items():
        if backend != "torch" or "unsynced" not in v or "time" not in v:
            continue
        unsynced = v["unsynced"].median
        if unsynced <= 0:
            continue
        factor = v["time"].median / unsynced
        if worst is None or factor > worst[0]:
            worst = (factor, dtype, size)
    if worst is None or worst[0] < UNSYNCED_FACTOR:
        return None
    factor, dtype, size = worst
    return (
        f"unsynchronised timing under-reports {pair.other.device} matmul {fmt_x(factor)} at n={size} "
        f"({dtype}): it measures the kernel launch, not the product"
    )


def has_tf32(run: RunRecord) -> bool:
    """Whether the run's GPU has TF32 (compute capability 8.0 or newer), from its fingerprint."""
    major = run.tag("host.gpu_capability").split(".")[0]
    return major.isdigit() and int(major) >= 8


def strict_fp32_on_tf32_gpu(pair: Pair) -> str | None:
    """A GPU side that ran strict IEEE fp32 (`precision=fp32`) on a GPU with TF32 measured slower math than
    PyTorch's own default, which runs cuDNN convolutions in TF32 (ResNet-18 bs 128 on an H100: ~7,000
    img/s IEEE against ~11,300 with the defaults): users' unchanged code gets more than this speedup."""
    for side in (pair.base, pair.other):
        if side.is_cpu or side.kind is PRODUCT or side.params.get("precision") != "fp32":
            continue
        runs = [r for r in side.runs if r.tag("fp32_math") == "ieee" and has_tf32(r)]
        if runs:
            return (
                f"{side.device} ran strict IEEE fp32 on a GPU with TF32: precision=default (PyTorch's own "
                "math, TF32 convolutions) is what users' code runs and is typically faster, so this "
                "understates their speedup"
            )
    return None
