"""Runs → sides: the repeats of one config on one device model, summarised as medians with their spread.

Runs with the same `devicebench.config_key` did the same work. Within one key, runs on the same device,
hardware model, shape and world size are repeats of one *side*. The world size (processes of a
data-parallel job) is not part of the key, on purpose: the runs of one config at 1, 2, 4, 8 processes
form a scaling series (scaling.py); but a job of 8 processes is never a repeat of one of 1. Every figure
is a median of repeats with its spread, because a single timing of a GPU is a coin toss.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from devicebench.config.workloads import KIND_OF, not_work
from devicebench.report.model.price import SidePrice, by_hand, price_of
from devicebench.report.read.records import RunRecord
from devicebench.schema import (
    ACCURACY,
    ALLREDUCE_S,
    COMM_SHARE,
    COMPILE_S,
    COST_PER_1K,
    COST_PER_EPOCH,
    COST_PER_HOUR,
    COST_PER_MILLION,
    COST_USD,
    DATA_WAIT_S,
    EVAL_RATE,
    EVAL_S,
    FORWARD_FLOPS,
    GFLOP_PER_USD,
    GPU_BUSY_SHARE,
    GPU_POWER_CAPPED_S,
    GPU_SM_CLOCK_SHARE,
    GPU_THERMAL_CAPPED_S,
    HOST_LOAD_1M,
    HOST_OTHERS_SHARE,
    MIOU,
    PEAK_BYTES,
    PEAK_FRACTION,
    PEAK_RSS_BYTES,
    SERVE_BATCH,
    SERVE_MAX_WAIT,
    SERVE_P50,
    SERVE_P90,
    SERVE_P99,
    SERVE_P99_BOUND,
    SERVE_RATE,
    TOTAL_S,
    TRAIN_RATE,
    TRAIN_S,
    TRAIN_TFLOPS,
    Kind,
)
from devicebench.util.busy_host import is_busy
from devicebench.util.stats import Stat

# params the job derives from the work and its world size (batch_size × processes): logged beside the
# config, not part of it, so they tell no two configs apart
JOB_PARAMS = frozenset({"global_batch_size"})
# params that say where or how a run worked, not what work it measured: the config key's own rule
NOT_WORK = not_work() | JOB_PARAMS

TIME_METRICS = (TRAIN_S, EVAL_S, TOTAL_S, DATA_WAIT_S)
THROUGHPUT_METRICS = (TRAIN_RATE, EVAL_RATE, SERVE_RATE)
# infer: a request's latency, the best batch, and under LoadGen the p99 promise its rate was held within
# and how long its server waited to fill a batch
SERVE_METRICS = (SERVE_P50, SERVE_P90, SERVE_P99, SERVE_BATCH, SERVE_P99_BOUND, SERVE_MAX_WAIT)
QUALITY_METRICS = (ACCURACY, MIOU)
MEMORY_METRICS = (PEAK_BYTES, PEAK_RSS_BYTES)
UTIL_METRICS = (
    PEAK_FRACTION,
    TRAIN_TFLOPS,
    FORWARD_FLOPS,
)  # the share of the device's peak; the model's size
# what the run side logs where it knew a price; absent: no price, never a zero
COST_METRICS = (
    COST_USD,
    COST_PER_HOUR,
    COST_PER_EPOCH,
    COST_PER_1K,
    COST_PER_MILLION,
    GFLOP_PER_USD,
)
# data-parallel jobs: the upper bound on the share of training spent in all-reduce, and its time
DIST_METRICS = (COMM_SHARE, ALLREDUCE_S)
# what NVML saw the GPU do over a CUDA training run's epochs (host/gpu_state.py; util/gpu_caveat.py)
GPU_METRICS = (GPU_BUSY_SHARE, GPU_SM_CLOCK_SHARE, GPU_POWER_CAPPED_S, GPU_THERMAL_CAPPED_S)
SETUP_METRICS = (COMPILE_S,)  # what a compiled side paid once, before its timed steps
# how busy the host was while each run ran (host/busy.py; util/busy_host.py)
HOST_METRICS = (HOST_OTHERS_SHARE, HOST_LOAD_1M)
SUMMARY_METRICS = (
    TIME_METRICS
    + SETUP_METRICS
    + SERVE_METRICS
    + THROUGHPUT_METRICS
    + QUALITY_METRICS
    + MEMORY_METRICS
    + COST_METRICS
    + DIST_METRICS
    + UTIL_METRICS
    + GPU_METRICS
    + HOST_METRICS
)


# --------------------------------------------------------------------------------------------- sides


@dataclass(frozen=True, eq=False)
class Side:
    """The repeats of one config on one device model (possibly from several hosts with that model).
    Built whole by `summarise`; identity is what tells two sides apart (eq=False), never their figures."""

    workload: str
    config_key: str
    device: str
    device_name: str
    runs: list[RunRecord]
    metrics: dict[str, Stat] = field(default_factory=dict)
    wait_share: Stat | None = None
    # (backend, dtype, size) -> {"time": Stat, "unsynced": Stat}
    product_points: dict[tuple[str, str, int], dict[str, Stat]] = field(default_factory=dict)
    shape: str = ""  # the OCI shape the runs were priced on (or ran on): its own side, at its own price
    world_size: int = 1  # processes in each run's job: a side of 8 is never a repeat of a side of 1
    tuned: bool = False  # `devicebench tune` CPU runs: never averaged with the CPU as configured
    price: SidePrice = field(default_factory=SidePrice)  # an hour of what its runs used (price.py)
    # `$0.5/h set by hand` where runs of its config on its device were priced two ways (price.by_hand)
    priced_by_hand: str = ""
    # its runs measured on a busy host while a quiet run of the side exists: shown, never in a figure
    left_out: list[RunRecord] = field(default_factory=list)

    @property
    def kind(self) -> Kind | None:
        """What kind of work its workload is (config.workloads.KIND_OF); None for a name no workload has."""
        return KIND_OF.get(self.workload)

    @property
    def work_key(self) -> str:
        """The work its runs did, however the CPU was threaded and fed."""
        return self.runs[0].tag("work_key")

    @property
    def label(self) -> str:
        job = f"{self.world_size} processes" if self.world_size > 1 else ""
        tuned = "tuned" if self.tuned else ""
        what = ", ".join(x for x in (self.device_name, self.shape, job, tuned, self.priced_by_hand) if x)
        return f"{self.device} ({what})" if what else self.device

    @property
    def gpu_figures(self) -> dict[str, float]:
        """The median of each `gpu/*` figure its runs logged ({} for a CPU side or a MIG slice)."""
        return {k: self.metrics[k].median for k in GPU_METRICS if k in self.metrics}

    @property
    def busy_runs(self) -> list[RunRecord]:
        """Its runs measured while other processes kept the host busy (util/busy_host.is_busy)."""
        return [r for r in self.runs if is_busy(r.metrics)]

    @property
    def unusable(self) -> bool:
        """Every run of it was measured on a busy host: its figures time the neighbours, not the device."""
        return bool(self.runs) and len(self.busy_runs) == len(self.runs)

    @property
    def is_cpu(self) -> bool:
        return self.device.startswith("cpu")

    @property
    def params(self) -> dict[str, str]:
        return self.runs[0].params

    @property
    def data(self) -> str:
        return self.runs[0].tag("data")

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.runs})

    def time_metric(self) -> str | None:
        """The headline time: training where there is one, a request's (p50) for serving, else the whole
        run."""
        for key in (TRAIN_S, SERVE_P50, TOTAL_S):
            if key in self.metrics:
                return key
        return None


def wait_share(run: RunRecord) -> float | None:
    """The fraction of training time spent waiting for the next batch (`data_wait / train`)."""
    wait = run.metrics.get(DATA_WAIT_S)
    total = run.metrics.get(TRAIN_S) or run.metrics.get(TOTAL_S)
    if wait is None or not total:
        return None
    return min(max(wait / total, 0.0), 1.0)


@dataclass(frozen=True)
class Placement:
    """Where a side's runs ran besides their device: the OCI shape, the processes of their job, whether
    a tuning chose their setting, and a price set by hand where the same device has another."""

    shape: str = ""
    world_size: int = 1
    tuned: bool = False
    priced_by_hand: str = ""


def summarise(
    workload: str, key: str, device: str, name: str, runs: list[RunRecord], placed: Placement = Placement()
) -> Side:
    """Medians and spreads of everything the report shows, over one side's repeats. A run measured on
    a busy host counts only where no quiet run of the side exists: a host that others kept busy slowed
    one config's run 11-fold, and repeats cannot average that away. The busy ones are kept to be listed."""
    quiet = [r for r in runs if not is_busy(r.metrics)]
    left_out = sorted((r for r in runs if quiet and is_busy(r.metrics)), key=lambda r: r.start_time)
    runs = quiet or runs
    ordered = sorted(runs, key=lambda r: r.start_time)
    metrics = {m: s for m in SUMMARY_METRICS if (s := Stat.of(r.metrics.get(m) for r in runs)) is not None}
    points: dict[tuple[str, str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for k, hist in r.history.items():
            parts = k.split("/")
            kind = "unsynced" if parts[-1] == "unsynced_time_s" else "time"
            for size, value in hist.items():
                points[(parts[1], parts[2], size)][kind].append(value)
    product_points = {
        pt: {kind: s for kind, vs in points[pt].items() if (s := Stat.of(vs)) is not None}
        for pt in sorted(points)
    }
    return Side(
        workload,
        key,
        device,
        name,
        ordered,
        metrics,
        Stat.of(wait_share(r) for r in runs),
        product_points,
        shape=placed.shape,
        world_size=placed.world_size,
        tuned=placed.tuned,
        price=price_of(runs),
        priced_by_hand=placed.priced_by_hand,
        left_out=left_out,
    )


def side_of(run: RunRecord) -> tuple[str, str]:
    """(device kind, hardware model): `cuda:0` and `cuda:1` of one model are repeats of one side, not two
    sides to pair (a "speedup" of one A10 over an identical one is noise). A MIG slice is its own model."""
    name = run.device_name
    mig = run.tag("host.gpu_mig_profile")
    if mig and mig.lower() not in name.lower():
        name = f"{name} MIG {mig}"
    return run.device.split(":")[0], name


def shape_of(run: RunRecord) -> str:
    """The OCI shape a run ran on (or was priced as its own), else "": an A10 in VM.GPU.A10.1 and one in
    VM.GPU.A10.2 time alike but cost twice apart per hour, so they are two sides to compare. Never an
    "as if" shape: a CPU side priced as VM.Standard.E5.Flex still ran on its GPU host, and its runs
    priced before and after per-use pricing are repeats of one side."""
    own = run.tag("price.shape") if run.tag("price.as_if") != "true" else ""
    return run.tag("host.oci.shape") or own


Where = tuple[str, str, str, int, bool, str]  # device kind, model, shape, world size, tuned, price by hand


def build_sides(runs: Sequence[RunRecord]) -> dict[str, list[Side]]:
    """config_key → its sides (one per device, hardware model, shape, world size, price set by hand
    and, on the CPU, tuned or not), CPU first, then by world size."""
    groups: dict[tuple[str, str], dict[Where, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        side = (*side_of(r), shape_of(r), r.world_size, r.tuned, by_hand(r))
        groups[(r.workload, r.config_key or f"(no key) {r.run_id}")][side].append(r)
    out: dict[str, list[Side]] = {}
    for (workload, key), by_side in groups.items():
        split = Counter(where[:-1] for where in by_side)  # the same device priced two ways
        sides = [_side(workload, key, where, rs, split[where[:-1]] > 1) for where, rs in by_side.items()]
        out[key] = sorted(sides, key=_side_order)
    return out


def _side(workload: str, key: str, where: Where, runs: list[RunRecord], split: bool) -> Side:
    """One side; its price set by hand is in its label only where the same device has another price."""
    _, name, shape, world, tuned, by_hand_price = where
    device = ", ".join(sorted({r.device for r in runs}))
    placed = Placement(shape, world, tuned, by_hand_price if split else "")
    return summarise(workload, key, device, name, runs, placed)


def _side_order(s: Side) -> tuple:
    return (not s.is_cpu, s.world_size, s.tuned, s.device, s.device_name, s.shape, s.priced_by_hand)


def param_order(params: dict[str, str]) -> tuple:
    """Params as a sort key with numbers compared as numbers (batch 4 before batch 32)."""
    out = []
    for k, v in sorted(params.items()):
        try:
            out.append((k, 0, float(v), ""))
        except ValueError:
            out.append((k, 1, 0.0, v))
    return tuple(out)
