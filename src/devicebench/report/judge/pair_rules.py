"""The rules that explain a pair's speedup: why a GPU gained what it gained.

A number alone says *that* a GPU gained little; these rules say *why*, from what the workloads measured
apart on purpose (data wait vs compute, synchronised vs unsynchronised time, quality per device).
Each rule is a small pure function of one pair that returns a one-line reason or None; `RULES` is their
order in the report. A scaling series has its own rules (scaling_rules.py), and a regression is the
model's finding (model/regressions.py), not a rule here. The thresholds are module constants so a test
(or a reader) can see what "clearly" means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from devicebench.pricing.prices import priced_as
from devicebench.report.judge.reliability import busy_host, busy_side, noisy, noisy_side, single_repeat
from devicebench.report.model.best_cpu import reduced_precision, setting_of, throughput
from devicebench.report.model.pairs import Pair
from devicebench.report.model.sides import Side
from devicebench.report.read.records import RunRecord
from devicebench.schema import (
    ACCURACY,
    COMPILE_S,
    MIOU,
    PEAK_FRACTION,
    PRODUCT,
    SERVE_P99,
    SERVING,
    TRAIN_S,
    TRAINING,
)
from devicebench.util.fmt import fmt_money, fmt_percent, fmt_quality, fmt_s, fmt_share, fmt_x
from devicebench.util.gpu_caveat import held_down, host_bound
from devicebench.util.stats import Stat

LOADER_BOUND_SHARE = 0.5  # the GPU side waited for data more than half its training time
SMALL_IMAGE = 128  # unet images at most this side: shrinking them further is no longer the advice
SMALL_BATCH = 32  # batches this small leave a GPU idle between kernel launches
LAUNCH_BOUND_SPEEDUP = 3.0  # ...when the speedup stays below this
QUALITY_ABS = 0.05  # accuracy / mIoU differ by more than 5 points...
UNSYNCED_FACTOR = 2.0  # synchronised time more than 2x the unsynchronised one: the naive timer lies
COMPUTE_BOUND_SPEEDUP = 5.0


BARELY = 2.0  # against the CPU at its best, a GPU less than 2x faster barely helps this model
HELD_BACK_SHARE = 0.25  # a GPU side that waited for data this much was measured through its loader
TIE = (0.9, 1.1)  # against the CPU at its best, a speedup in this band is no gain either way
MADE_UP = " (illustrative prices, not real ones)"  # after every verdict bought with a made-up price


def across_hosts(pair: Pair) -> str | None:
    """Two sides from different machines (a CPU shape's runs beside a GPU shape's, or the same config
    run on two hosts) may be the comparison the user wants, but it is not one device against another on
    one host: the line says which hosts, first, so no table shows it as a plain speedup."""
    base, other = set(pair.base.hosts), set(pair.other.hosts)
    if base == other or pair.base.shape != pair.other.shape:  # two shapes: two machines, and labelled so
        return None
    return (
        f"the sides ran on different hosts ({pair.base.device}: {', '.join(sorted(base))}; {pair.other.device}: "
        f"{', '.join(sorted(other))}): a comparison of two machines, not of two devices of one"
    )


def against_best_cpu(pair: Pair) -> str | None:
    """Where a faster CPU configuration of the same work was measured, the pair's answer is against it:
    "against this CPU at its best (4 threads, data in memory) the H100 is 1.2x faster: not worth its
    price for this model". Worth it or not from the costs where both sides are priced (then against
    the best CPU), else from the speedup alone. A GPU side that waited for its loader was not measured
    at its best, while the CPU was: the line says so, because on the H100 of 2026-11-24 the tutorial's
    GPU side at batch 256 waited 83 % of its time and read as 0.23x the tuned CPU."""
    best, speedup = pair.best_cpu, pair.best_cpu_speedup
    if best is None or speedup is None or best is pair.base:
        return None
    said = (
        f"against this CPU at its best ({setting_of(best)}) {pair.other.label} is {fmt_x(speedup)} "
        f"{'faster' if speedup >= 1 else 'as fast'}"
    )
    ratio = pair.cost_ratio
    if ratio is not None:
        answer = f"{'worth' if ratio < 1 else 'not worth'} its price for this model"
    elif TIE[0] <= speedup < TIE[1]:
        answer = "no gain for this model"
    elif speedup < 1:
        answer = "the CPU wins for this model"
    else:
        answer = f"{'barely a gain' if speedup < BARELY else 'a clear gain'} for this model"
    wait = pair.other.wait_share
    if (
        wait is not None and HELD_BACK_SHARE < wait.median <= LOADER_BOUND_SHARE
    ):  # above: loader_bound says it
        answer += (
            f", but the GPU side waited for data {fmt_share(wait)} of its training time: it is not at its "
            f"best in this pair{loader_hint(pair.other)}"
        )
    return f"{said}: {answer}"


def best_against_best(pair: Pair) -> str | None:
    """Each device at its best, where a GPU setting faster than the pair's own was measured: "each at its
    best (CPU: 2 threads, data in memory; cuda: data in memory, compiled with CUDA graphs) the GPU is
    9.10x faster, at 0.40x the CPU's cost". A best that needed reduced precision says so, with its
    accuracy beside the full-precision side's; a compiled one what compiling took and when it pays back."""
    both = pair.best
    if both is None:
        return None
    said = (
        f"each at its best ({both.cpu.device}: {setting_of(both.cpu)}; {both.gpu.device}: "
        f"{setting_of(both.gpu)}) the GPU is {fmt_x(both.speedup)} {'faster' if both.speedup >= 1 else 'as fast'}"
    )
    if both.cost_ratio is not None:
        said += f", at {fmt_x(both.cost_ratio)} the CPU's cost"
    notes = (
        _precision_cost(both.gpu, pair.other),
        _precision_cost(both.cpu, pair.base),
        _payback(both.gpu),
        _payback(both.cpu),
    )
    return "; ".join([said, *(n for n in notes if n)])


def _precision_cost(best: Side, configured: Side) -> str | None:
    """What a best in reduced precision cost in quality, against the same device at full precision."""
    precision = reduced_precision(best)
    if precision is None or reduced_precision(configured):
        return None
    for key in (ACCURACY, MIOU):
        a, b = best.metrics.get(key), configured.metrics.get(key)
        if a is not None and b is not None:
            return (
                f"{best.device}'s best uses {precision} autocast, which changes the numerics: {key} "
                f"{fmt_quality(a.median)} against {fmt_quality(b.median)} at full precision"
            )
    return f"{best.device}'s best uses {precision} autocast, which changes the numerics (no quality to set beside it)"


def _payback(side: Side) -> str | None:
    """A compiled best: its compile time, and after how many epochs the time it saves a step repays
    it, from the same setting's uncompiled trial where the tuning measured one."""
    compile_s, rate, train = side.metrics.get(COMPILE_S), throughput(side), side.metrics.get(TRAIN_S)
    if compile_s is None or not rate or train is None:
        return None
    graphs = " with CUDA graphs" if side.params.get("compile_mode") == "reduce-overhead" else ""
    said = f"{side.device} compiled{graphs}: {fmt_s(compile_s.median)} to compile"
    eager = _float(side.runs[0].tag("tuned.eager_median_samples_per_s"))
    epochs = _int(side.params.get("epochs", "")) or 1
    images = rate * train.median / epochs  # one epoch's samples
    saved = images / eager - images / rate if eager else 0.0
    if saved > 0:
        return f"{said}, which pays back after {math.ceil(compile_s.median / saved):,} epochs"
    return said if eager is None else f"{said}, and it was no faster than uncompiled"


def _float(value: str) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def synthetic_data(pair: Pair) -> str | None:
    """Synthetic data times the real compute but its accuracy means nothing: say so on every such pair."""
    sides = [s for s in (pair.base, pair.other) if s.data == "synthetic"]
    if not sides:
        return None
    return "synthetic data: timings are real, accuracy/mIoU are not comparable with the real dataset"


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


def price_performance(pair: Pair) -> str | None:
    """Is the faster side worth its price (below); a verdict bought with a made-up price says so. A
    served model is answered by `serving`: its cost is per prediction at full throughput, not per the
    request time its headline speedup compares."""
    text = _serving(pair) if pair.kind is SERVING else _price_performance(pair)
    if text and (pair.base.price.illustrative or pair.other.price.illustrative):
        return text + MADE_UP
    return text


def price_said(side: Side) -> str:
    """What an hour of the side cost and what it was priced as: `VM.GPU.A10.1: 1 of its 1 GPUs, $2.00/h`,
    `as if on VM.Standard.E5.Flex: 1 OCPU + 2 GB, $0.0340/h`, `$1.00/h set by hand`."""
    p = side.price
    hourly = f"{fmt_money(p.hourly.median if p.hourly else None, p.currency)}/h"
    if p.whole_host:
        return f"{p.shape}, the whole host, {hourly}" if p.shape else f"the whole host, {hourly}"
    if not p.shape:
        return f"{hourly} set by hand"
    return f"{priced_as(p.shape, p.units, p.as_if)}, {hourly}"


def _verb(pair: Pair) -> str:
    kind = pair.kind or TRAINING
    return "runs this" if kind is TRAINING and not pair.is_cpu_gpu else kind.does


def _p99(side: Side) -> str:
    s = side.metrics.get(SERVE_P99)
    return f"p99 {fmt_s(s.median if s else None)}"


def _serving(pair: Pair) -> str | None:
    """Where to serve this model: the side that costs less per million predictions (each at its best
    batch size, kept busy), and what a caller waits on each (p99 of a batch-1 request), e.g. "serve on
    the CPU: p99 3.80 ms against 1.20 ms on the A10, at 0.10× its cost per million predictions"."""
    base, other = pair.base, pair.other
    rate = pair.speedups.get("serve_throughput")
    if rate is None:
        return None
    name = {id(s): s.device_name or s.device for s in (base, other)}
    pace = f"{name[id(other)]} serves {fmt_x(rate)} the predictions a second of {name[id(base)]}"
    ratio = pair.cost_ratio
    if ratio is None or ratio == 1.0:
        return f"{pace}; {_p99(other)} against {_p99(base)}"
    cheap, dear = (other, base) if ratio < 1 else (base, other)
    share = ratio if ratio < 1 else 1.0 / ratio
    return (
        f"serve on the {'CPU' if cheap.is_cpu else name[id(cheap)]}: {_p99(cheap)} against "
        f"{_p99(dear)} on {name[id(dear)]}, at {fmt_x(share)} its cost per million predictions ({pace})"
    )


def break_even(side: Side) -> str | None:
    """A priced CPU side with no GPU side yet, where its runs named a GPU shape to weigh it against
    (price_shape; the demo's): how much faster that GPU must be to cost less for the same work, its
    hourly price over the CPU's. The price answer a CPU-only host can give before any GPU run."""
    p = side.price
    if not side.is_cpu or p.hourly is None or p.hourly.median <= 0 or p.gpu_hourly is None:
        return None
    verb = (side.kind or TRAINING).to_do
    line = (
        f"break-even: a GPU of {p.gpu_shape} ({fmt_money(p.gpu_hourly, p.currency)}/h) must {verb} "
        f"{fmt_x(p.gpu_hourly / p.hourly.median)} faster than this CPU ({price_said(side)}) to cost less"
    )
    return line + MADE_UP if p.illustrative else line


def _price_performance(pair: Pair) -> str | None:
    """The user's first question, answered with both sides' prices: is the faster side worth its price?
    Only where both sides' runs carry a price: the cost of the same work against the hourly price ratio,
    which is the speedup at which the two cost the same (the break-even). Where a CPU side faster than
    the pair's own was measured, the cost and the speedup are both taken against that best CPU."""
    speedup, cost = pair.cost_speedup, pair.cost
    if speedup is None or cost is None or cost.cost_ratio is None or cost.price_ratio is None:
        return None
    ratio, base, other = cost.cost_ratio, pair.cost_base, pair.other
    against = base.device_name or base.device
    if base.is_cpu:
        against = "this CPU at its best" if base is not pair.base else "this CPU"
    pace = f"{fmt_x(speedup)} {'faster' if speedup >= 1 else 'as fast'}"
    if ratio == 1.0:
        money, answer = "the same", "no cheaper and no dearer"
    elif ratio < 1.0:
        money, answer = f"{fmt_x(1.0 / ratio)} less", "worth its price"
    else:
        money = f"{fmt_x(ratio)} more"
        answer = "worth it only when time matters more than money" if speedup > 1 else "not worth its price"
    return (
        f"{other.device_name or other.device} ({price_said(other)}) {_verb(pair)} {pace} than {against} "
        f"({price_said(base)}) and costs {money} per {cost.unit}: {answer} (break-even at "
        f"{fmt_x(cost.price_ratio)} faster)"
    )


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


SMALL_PEAK_SHARE = 0.05  # a GPU side computing at under 5 % of its dense peak is starved or launch-bound


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
    with it from one process to the next (issue 39: 11,852 and 14,644 img/s on one H100). Not said where
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
    for (backend, dtype, size), v in pair.other.matmul.items():
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


def _quality_pair(pair: Pair) -> tuple[str, Stat, Stat] | None:
    for key in (ACCURACY, MIOU):
        a, b = pair.base.metrics.get(key), pair.other.metrics.get(key)
        if a is not None and b is not None:
            return key, a, b
    return None


def quality_mismatch(pair: Pair) -> str | None:
    """Same config, clearly different quality: a numerical or nondeterminism problem, not a speedup.

    "Clearly" means more than QUALITY_ABS apart *and* outside both sides' spread of repeats.
    """
    found = _quality_pair(pair)
    if found is None:
        return None
    key, a, b = found
    gap = abs(a.median - b.median)
    if gap <= QUALITY_ABS:
        return None
    if (a.median < b.median and a.hi >= b.lo) or (a.median > b.median and b.hi >= a.lo):
        return None  # the repeats' ranges overlap: noise, not a mismatch
    return (
        f"quality differs: {key} {fmt_quality(a.median)} on {pair.base.device} vs {fmt_quality(b.median)} on "
        f"{pair.other.device} for the same config"
    )


def _contention(side: Side) -> str | None:
    """`2 torch threads + 2 loader workers on 2 cores (1/1 runs)` for a CPU side whose runs ran more
    busy threads than they had cores (run/workload.py logs the `cpu.*` facts host/cpu.cpu_budget
    counts); None for a GPU side or a CPU side that fit."""
    runs = [r for r in side.runs if r.tag("cpu.oversubscribed") == "true"]
    if not side.is_cpu or not runs:
        return None
    r = runs[0]
    threads, busy = r.tag("host.torch_threads", "?"), r.tag("cpu.busy_threads", "?")
    workers = int(busy) - int(threads) if busy.isdigit() and threads.isdigit() else "?"
    return (
        f"{threads} torch threads + {workers} loader workers on {r.tag('cpu.usable_cores', '?')} cores "
        f"({len(runs)}/{len(side.runs)} runs)"
    )


def oversubscribed(pair: Pair) -> str | None:
    """A CPU baseline that ran more busy threads than it had cores measured contention, not the CPU:
    every speedup over it is overstated."""
    for side in (pair.base, pair.other):
        said = _contention(side)
        if said:
            return (
                f"{side.device} baseline oversubscribed: {said}; it measures contention, so the speedup is "
                "overstated: rerun with num_workers=0 or fewer threads"
            )
    return None


def oversubscribed_alone(side: Side) -> str | None:
    """The same for a CPU side without a partner: no speedup to overstate yet, but its own figures
    measure contention, and a lone oversubscribed cifar run (42 img/s, 4 busy threads on 2 cores) was
    said nowhere (issue 41)."""
    said = _contention(side)
    if not said:
        return None
    return (
        f"{side.device} oversubscribed: {said}; its figures measure contention, not this CPU: rerun with "
        "num_workers=0 or fewer threads"
    )


# Ampere and newer data-centre and workstation GPUs, for runs logged before `host.gpu_capability` was.
_TF32_NAMES = re.compile(r"\b(A\d{2,3}|A[1-9]\d{3}|H\d{3}|GH\d{3}|L\d{1,2}S?|B\d{3}|RTX [345]0\d0)\b")


def has_tf32(run: RunRecord) -> bool:
    """Whether the run's GPU has TF32 (compute capability 8.0 or newer), from its fingerprint."""
    capability = run.tag("host.gpu_capability")
    if capability:
        return capability.split(".")[0].isdigit() and int(capability.split(".")[0]) >= 8
    return bool(_TF32_NAMES.search(run.tag("host.gpu_name")))


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


def _threads(run: RunRecord) -> str:
    return f"{run.tag('host.torch_threads', '?')} torch / {run.tag('host.blas_threads', '?')} BLAS threads"


def thread_mismatch(pair: Pair) -> str | None:
    """CPU timings taken with different thread counts are not like for like: say so beside the speedup.

    The CPU timing of a pair lives on its CPU sides, and for matmul on every side (NumPy runs on the
    host's CPU beside the GPU too).
    """
    sides = [s for s in (pair.base, pair.other) if s.is_cpu or s.kind is PRODUCT]
    counts = {s.device: sorted({_threads(r) for r in s.runs}) for s in sides}
    if len({c for cs in counts.values() for c in cs}) <= 1:
        return None
    said = "; ".join(f"{device}: {', '.join(cs)}" for device, cs in counts.items())
    return f"thread counts differ ({said}): the CPU figures are not like for like"


RULES: tuple[Callable[[Pair], str | None], ...] = (
    busy_host,
    across_hosts,
    against_best_cpu,
    best_against_best,
    oversubscribed,
    price_performance,
    loader_bound,
    launch_bound,
    peak_share,
    host_bound_gpu,
    gpu_held_down,
    gpu_slower,
    unsynced_underreport,
    strict_fp32_on_tf32_gpu,
    quality_mismatch,
    compute_bound,
    thread_mismatch,
    synthetic_data,
    noisy,
    single_repeat,
)


def explain(pair: Pair) -> list[str]:
    """Every rule that applies to the pair, in RULES order (the first is the headline verdict)."""
    return [line for rule in RULES if (line := rule(pair))]


# The rules of a side without a partner device (its price's break-even is said apart: `break_even`)
SIDE_RULES: tuple[Callable[[Side], str | None], ...] = (busy_side, oversubscribed_alone, noisy_side)


def explain_side(side: Side) -> list[str]:
    """Every side rule that applies to a side without a partner, in SIDE_RULES order."""
    return [line for rule in SIDE_RULES if (line := rule(side))]
