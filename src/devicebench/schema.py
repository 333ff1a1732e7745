"""The run schema in one torch-free place: workload names, the tag prefix, metric names, MLflow's limits.

Workloads, tracker, suite, report and benchmarks all speak this schema (ARCHITECTURE.md, layer 0); a
name defined twice drifts, so each is defined here once, and the code that logs a metric and every
piece that reads it import the same constant: `grep TRAIN_S` finds where training time is measured
(train/loop.py), priced, compared and printed. Nothing here imports torch or mlflow: the report and the
suite's plan validation read it without paying for either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from devicebench.errors import UsageError

TAG_PREFIX = "devicebench."
# The form of what a run logs, logged by every workload run (`devicebench.schema`). The report knows this
# one form: a run logged in an older one is named and left out, rather than read by a path kept for it.
SCHEMA_VERSION = 1
MAX_TAG_VALUE = 8000  # MLflow's tag value limit
NOTE_TAG = "mlflow.note.content"  # what the MLflow UI shows (and edits) as a run's description

# ---- metric names (the per-class, per-size and per-rank families are built by the functions below) ----
# Timings, seconds (time/<phase>_s; the report reads a phase generically as f"time/{phase}_s")
TRAIN_S = "time/train_s"  # all epochs' training steps; a job's is its slowest rank's (train/summary.py)
EVAL_S = "time/eval_s"
DATA_WAIT_S = "time/data_wait_s"  # the part of TRAIN_S spent waiting for the next batch
EPOCH_S = "time/epoch_s"  # per epoch, step = epoch
WARMUP_S = "time/warmup_s"  # before the clock: cuDNN autotuning, allocator, first launches
COMPILE_S = "time/compile_s"  # torch.compile's share of the warm-up
TO_TARGET_S = "time/to_target_s"  # training seconds until test accuracy reached the target
TOTAL_S = "time/total_s"  # the run's wall time, from the run's creation to its end
# A run's fixed cost by phase (what it pays that is not its work), beside TOTAL_S
START_S = "time/start_s"  # process start to the run's creation: interpreter, imports, flags, STORE_S
STORE_S = "time/store_s"  # the store checked (unless its plan just did) and the run created
HOST_S = "time/host_s"  # the device resolved and the host fingerprint logged
ARTIFACTS_S = "time/artifacts_s"  # tables, figures and files staged, models logged
PROCESS_S = "time/process_s"  # process start to the run's end, before END_S
END_S = "time/end_s"  # what the run logged flushed to the store before it ends
# Rates and the share of the device
TRAIN_RATE = "throughput/train_samples_per_s"  # a job's: every rank's samples / the slowest rank's time
EVAL_RATE = "throughput/eval_samples_per_s"
TRAIN_TFLOPS = "throughput/train_tflops"
FLOPS_PER_SAMPLE = "flops/train_per_sample"  # forward + backward, counted once (train/summary.py)
FORWARD_FLOPS = (
    "flops/forward_per_sample"  # the forward alone (model, infer): the x of "for my kind of model"
)
PEAK_TFLOPS = "util/peak_tflops"  # the datasheet's dense peak for the dtype the run computed in
PEAK_FRACTION = "util/peak_fraction"
# Learning
TRAIN_LOSS = "train/loss"  # step = optimizer step, window means
EPOCH_LOSS = "train/epoch_loss"  # step = epoch
EVAL_LOSS = "eval/loss"
ACCURACY = "eval/accuracy"  # cifar; per class: class_accuracy_key
MIOU = "eval/miou"  # unet; per class: class_iou_key
DICE = "eval/dice"
PIXEL_ACCURACY = "eval/pixel_accuracy"
# Serving (infer): one request is a batch of 1, copied in, run and copied out, timed end to end
SERVE_P50 = "serve/latency_p50_s"
SERVE_P90 = "serve/latency_p90_s"
SERVE_P99 = "serve/latency_p99_s"
SERVE_RATE = "throughput/serve_samples_per_s"  # the best over the batch sizes; each: serve_batch_key
SERVE_TFLOPS = "throughput/serve_tflops"
SERVE_BATCH = "serve/best_batch_size"  # where SERVE_RATE was measured
# LoadGen's server scenario (workloads/loadgen.py): the highest QPS it called VALID within the p99
# promise, the p99 there and the promise itself; each scenario's figures: loadgen_key
SERVE_MAX_QPS = "serve/max_qps_within_p99"
SERVE_MAX_QPS_P99 = "serve/p99_at_max_qps_s"
SERVE_P99_BOUND = "serve/p99_bound_s"
SERVE_MAX_WAIT = (
    "serve/max_wait_s"  # the batching setting that held SERVE_MAX_QPS (SERVE_BATCH: its max batch)
)
# Memory, bytes
PEAK_BYTES = "memory/peak_bytes"  # the device allocator's peak (GPU)
PEAK_RSS_BYTES = "memory/peak_rss_bytes"  # the process's

# What the GPU did over the training epochs, as NVML saw it (host/gpu_state.py): why a run moved
GPU_BUSY_SHARE = "gpu/busy_share"  # the share of time a kernel ran: well under 1 is a host-bound step
GPU_SM_CLOCK_MHZ = "gpu/sm_clock_mhz"  # the mean SM clock
GPU_SM_CLOCK_SHARE = "gpu/sm_clock_share"  # that mean over the SM clock's maximum
GPU_POWER_CAPPED_S = "gpu/power_capped_s"  # seconds the clocks were held down by the power limit
GPU_THERMAL_CAPPED_S = "gpu/thermal_capped_s"  # ... by temperature
# How busy the host was while the run ran (host/busy.py; util/busy_host.py judges it)
HOST_OTHERS_SHARE = "host/others_cpu_share"  # the run's cores' time other processes took (0-1)
HOST_LOAD_1M = "host/load_1m"  # the 1-minute load average when its work ended
HOST_SLOWDOWN = "host/slowdown_vs_quiet"  # a busy run's training time over the last quiet run's of its config
# How steady the host's CPU was before a served model's tests (host/steadiness.py): a fixed piece of work
HOST_TAIL_P50_S = "host/tail_p50_s"  # the piece's median time
HOST_TAIL_P99_S = "host/tail_p99_s"  # its p99
HOST_TAIL_RATIO = "host/tail_p99_over_p50"  # near 1 on a steady CPU; a p99 promise rests on it
# Money (pricing/costs.py), where the run had a price
COST_USD = "cost/usd"
COST_PER_HOUR = "cost/usd_per_hour"
COST_PER_EPOCH = "cost/usd_per_epoch"
COST_PER_1K = "cost/usd_per_1k_samples"
COST_PER_MILLION = "cost/usd_per_million"  # infer: a million predictions at the best batch size
GFLOP_PER_USD = "cost/gflop_per_usd"  # matmul; per point: matmul_key(backend, dtype, "gflop_per_usd")
# A job of several processes (train/summary.py); each rank's own figures: rank_key
WORLD_SIZE = "dist/world_size"
SLOWEST_RANK = "dist/slowest_rank"
ALLREDUCE_S = "dist/allreduce_s"  # one all-reduce of the model's gradients, measured apart
COMM_SHARE = "dist/comm_share"  # steps × ALLREDUCE_S / TRAIN_S: an upper bound (DDP overlaps it)
# The headline figures again, under a prefix that sorts before every other (cost/ dist/ eval/ matmul/
# memory/ system/ throughput/ time/ train/): `at_a_glance/train_s` leads a run's metric list (run/run_line.py)
GLANCE = "at_a_glance"
MAX_BATCH_METRICS = 1000  # MLflow's log_batch limit
MAX_RUN_NAME = 250  # MLflow's run name limit
MAX_EXPERIMENT = 500  # MLflow's experiment name limit


# ---- the kinds of work: every place that treats workloads differently asks a workload's kind ----
@dataclass(frozen=True)
class Kind:
    """One kind of work, declared once: its unit of work, the figures that answer it, how a verdict says
    what it does. A workload's config names one (`KIND`); code reads the kind, never the workload's
    name, so a new workload of a known kind needs no branch anywhere (tests/test_layout.py looks)."""

    name: str  # product, training, serving
    unit: str  # what its cost is per (report.model.cost)
    time_metric: str  # the headline time of a run (a product's: one product at its headline point)
    rate_metric: str  # the headline rate
    rate_unit: str  # that rate as the run line spells it
    cost_metric: str  # its cost per unit, as pricing.costs logs it
    speedup: str  # which speedup is its headline (report.model.pairs.Figures)
    does: str  # a verdict's verb: "the A10 trains this 3× faster"
    to_do: str  # the same after "must": "a GPU must train this 2× faster"


PRODUCT = Kind(
    name="product",
    unit="GFLOP",
    time_metric="",
    rate_metric="",
    rate_unit="GFLOP/s",
    cost_metric=GFLOP_PER_USD,
    speedup="product",
    does="computes this product",
    to_do="compute this product",
)
TRAINING = Kind(
    name="training",
    unit="epoch",
    time_metric=TRAIN_S,
    rate_metric=TRAIN_RATE,
    rate_unit="img/s",
    cost_metric=COST_PER_EPOCH,
    speedup="train",
    does="trains this",
    to_do="train this",
)
SERVING = Kind(
    name="serving",
    unit="M predictions",
    time_metric=SERVE_P50,
    rate_metric=SERVE_RATE,
    rate_unit="predictions/s",
    cost_metric=COST_PER_MILLION,
    speedup="latency",
    does="serves this model",
    to_do="serve this model",
)
# Each workload's kind is its config's (`config.workloads.KIND_OF`, read from each config's KIND)

# The words MLproject passes for a command option that is not set, and the CLI's defaults too: `mlflow run`
# logs every parameter shell-quoted, so an empty default was logged as the literal `''`. The CLI turns
# them back into the empty value the command reads; the report run logs them, so both paths log the same.
UNSET_WORDS: dict[str, dict[str, str]] = {
    "compare": {
        "workload": "all",
        "since": "all",
        "filter": "none",
        "host": "any",
        "out": "auto",
        "deadline": "none",
    },
    "suite": {"resume": "none"},
}


def tag(name: str) -> str:
    """`devicebench.<name>`: every tag the project writes or reads is spelled through this."""
    return TAG_PREFIX + name


# ---- where a run's facts live: a few tags, every other fact a param of the same name ----
# The MLflow UI lists a run's tags above its description: a CPU run's 42 `devicebench.*` tags (its host
# fingerprint, price detail, how it computed) pushed its one-line answer below the first screen. So a workload run carries as tags only what people filter and pair on; every
# other `devicebench.<name>` fact is logged as a param of the same name (tracking/tracker.py splits
# them). Params, not a JSON tag or an artifact: they come back with the search that finds the run (the
# report reads 2,000 runs without one request per run), `params.`devicebench.host.gpu_name`` filters
# them, and the UI's compare view sets two runs' params side by side (the host that changed). A param is
# written once: a fact is set once per run; `run_facts` reads a run's facts from both.
RUN_TAGS = tuple(
    tag(name)
    for name in (
        "workload",  # what the report searches by, server-side
        "device",  # as asked: cpu, cuda, auto
        "device.name",  # the hardware: a GPU model or a CPU model
        "config_key",  # the same work and setting on any device: what pairs a CPU side with a GPU side
        "work_key",  # the same work however the CPU was threaded and fed
        "data",  # synthetic or real: the report never mixes them unsaid
        "world_size",  # the processes of a job: a scaling series
        "suite",  # the plan run that started it, searched server-side
        "suite.item",  # its place in the plan, what `suite --resume` skips
        "error",  # why a run failed, in one line
        "price.source",  # where its price came from (a table, by hand, illustrative)
        "tuned",  # a `devicebench tune` run: never a repeat of the side as configured
        "cpu.oversubscribed",  # more busy threads than cores: its figures measure contention
        "host.label",  # DEVICEBENCH_HOST: the machine as the report groups it
        "replayed_from",  # a run `sync --recreate-lost` made again from its journal
    )
)
MAX_RUN_TAGS = 15  # a workload run's own tags at most (tests/test_run_tags.py)
# Tags of devicebench's own runs that are not workload runs: the report run's, the suite run's heartbeat
# the report's own (report.selection: what it read, as one digest, so the same selection logs no second
# report run) and the suite's
OTHER_RUN_TAGS = (tag("report.run_count"), tag("report.selection"), tag("suite.alive"))
MAX_PARAM_VALUE = 6000  # MLflow's param value limit


def is_tag(key: str) -> bool:
    """Whether `key` is logged as a tag: MLflow's own (`mlflow.*`) and anything not devicebench's are,
    and of devicebench's facts only RUN_TAGS and OTHER_RUN_TAGS; every other fact is a param."""
    return not key.startswith(TAG_PREFIX) or key in RUN_TAGS or key in OTHER_RUN_TAGS


def run_facts(tags: Mapping[str, str], params: Mapping[str, str]) -> dict[str, str]:
    """A run's tags with its `devicebench.*` facts added from its params (RUN_TAGS says which are tags):
    every fact in one place, whichever way it was logged. A tag wins."""
    return {**{k: v for k, v in params.items() if k.startswith(TAG_PREFIX)}, **tags}


def gflops(n: int, seconds: float) -> float:
    """2n³ floating-point operations per n×n product: the one definition the workload logs and the
    report recomputes from logged times, so the two can never disagree."""
    return 2.0 * n**3 / seconds / 1e9


# matmul's per-size figures. Each is logged twice: under `matmul/<backend>/<dtype>/<figure>` with step = n
# (the MLflow UI draws it against n), and under a flat key per size, `matmul/<backend>/<dtype>/n<size>/<figure>`.
# `search_runs` returns only a metric's latest value, so the stepped form needs one history request per
# run and figure (thousands of requests for a store of a few thousand runs); the flat keys come back with the search.
MATMUL_POINT_FIGURES = ("gflops", "time_s", "unsynced_time_s")
MATMUL_POINT_RE = re.compile(r"^matmul/([^/]+)/([^/]+)/n(\d+)/([^/]+)$")


def matmul_prefix(backend: str) -> str:
    """`matmul/<backend>/`: every figure of one backend's series (`torch`, `numpy`) starts so."""
    return f"matmul/{backend}/"


def matmul_key(backend: str, dtype: str, figure: str) -> str:
    """`matmul/<backend>/<dtype>/<figure>`: the stepped series (step = matrix size), and a point's
    `gflop_per_usd` (pricing/costs.py)."""
    return f"{matmul_prefix(backend)}{dtype}/{figure}"


def matmul_point_key(backend: str, dtype: str, size: int, figure: str) -> str:
    """`matmul/<backend>/<dtype>/n<size>/<figure>`: one point as a plain metric, so that the search that
    finds the run returns it (the report then needs no history request for the run)."""
    return f"matmul/{backend}/{dtype}/n{int(size)}/{figure}"


def phase_time_key(phase: str) -> str:
    """`time/<phase>_s`: a phase's seconds read generically (`train` is TRAIN_S, `eval` EVAL_S)."""
    return f"time/{phase}_s"


def serve_batch_key(batch_size: int, figure: str) -> str:
    """`serve/bs<N>/<figure>`: infer's `samples_per_s` and `batch_p50_s` (the median time of one batch,
    copies included) at one batch size, a plain
    metric so that the search that finds the run returns it; also logged as `serve/<figure>` with
    step = batch size, which the MLflow UI draws against the batch size."""
    return f"serve/bs{int(batch_size)}/{figure}"


def serve_series_key(figure: str) -> str:
    """`serve/<figure>`: the same figure stepped by batch size (the UI's chart against the batch); its
    figures are never SERVE_P50's name (`latency_p50_s`), which a stepped series would overwrite."""
    return f"serve/{figure}"


def loadgen_key(via: str, scenario: str, figure: str) -> str:
    """`loadgen/<via>/<scenario>/<figure>`: one LoadGen scenario's figure as read from its detail log
    (`rate`, `p50_s`, `p90_s`, `p99_s`, `valid`; the server's `max_qps`, `tried_qps`, `tried_p99_s`),
    in-process or over HTTP."""
    return f"loadgen/{via}/{scenario}/{figure}"


def loadgen_test_key(via: str, test: int, figure: str) -> str:
    """`loadgen/<via>/server/test<N>/<figure>`: the server search's Nth test (`qps` asked, its `p99_s`,
    `valid`) as a flat metric, which the report's search returns with the run (no history request per
    run), as a matmul run's points (LOADGEN_TEST_RE reads it back)."""
    return f"loadgen/{via}/server/test{int(test)}/{figure}"


LOADGEN_TEST_RE = re.compile(r"^loadgen/([^/]+)/server/test(\d+)/(qps|p99_s|valid)$")


def loadgen_artifact(via: str, name: str) -> str:
    """`loadgen/<via>/<name>`: LoadGen's own logs and the server search's tables, per way in."""
    return f"loadgen/{via}/{name}"


def loadgen_tag(via: str, scenario: str) -> str:
    """`devicebench.loadgen.<via>.<scenario>`: VALID, or INVALID with LoadGen's reason."""
    return tag(f"loadgen.{via}.{scenario}")


def class_accuracy_key(class_name: str) -> str:
    """`eval/acc/<class>`: cifar's accuracy on one class (its name made metric-safe by the caller)."""
    return f"eval/acc/{class_name}"


def class_iou_key(class_name: str) -> str:
    """`eval/iou/<class>`: unet's intersection over union on one class."""
    return f"eval/iou/{class_name}"


def rank_key(rank: int, figure: str) -> str:
    """`dist/rank/<rank>/<figure>`: one rank's own figure in a job (`train_s`, `data_wait_s`, ...)."""
    return f"dist/rank/{int(rank)}/{figure}"


# The report run's own headline metrics, one per CPU/GPU pair or scaling series (`best`, `worst` over them),
# and how many regressions it found (report/render/headline.py); how many pairs, its description says
REPORT_REGRESSIONS = "regressions"
SPEEDUP_PREFIX, SPEEDUP_BEST_CPU_PREFIX, COST_RATIO_PREFIX = "speedup/", "speedup_best_cpu/", "cost_ratio/"


def speedup_key(pair: str) -> str:
    """`speedup/<pair>`: how many times faster the GPU trained than the CPU as configured."""
    return f"{SPEEDUP_PREFIX}{pair}"


def speedup_best_cpu_key(pair: str) -> str:
    """`speedup_best_cpu/<pair>`: the GPU against this CPU at its best (a tuned or faster CPU side)."""
    return f"{SPEEDUP_BEST_CPU_PREFIX}{pair}"


def cost_ratio_key(pair: str) -> str:
    """`cost_ratio/<pair>`: the GPU's cost of the same work over the CPU's."""
    return f"{COST_RATIO_PREFIX}{pair}"


def scaling_efficiency_key(series: str, world_size: int) -> str:
    """`scaling/<series>/efficiency_<N>`: a scaling series' efficiency at N processes."""
    return f"scaling/{series}/efficiency_{int(world_size)}"


def glance_key(figure: str) -> str:
    """`at_a_glance/<figure>`: a headline figure repeated where it sorts first (`train_s`, `accuracy`)."""
    return f"{GLANCE}/{figure}"


def headline_point(
    points: Sequence[tuple[str, str, int]], fallback: bool = True
) -> tuple[str, str, int] | None:
    """The (backend, dtype, size) that speaks for a matmul sweep: torch at its largest size, float32
    where there is one. The run's line, a side's cost and a pair's speedup all take this point, so they
    describe one product. `fallback`: a sweep without torch points speaks through its other backend's."""
    chosen = [k for k in points if k[0] == "torch"] or (list(points) if fallback else [])
    if not chosen:
        return None
    biggest = max(k[2] for k in chosen)
    at = [k for k in chosen if k[2] == biggest]
    return next((k for k in at if k[1] == "float32"), at[0])


DEVICE_CHOICES = "cpu, cuda, cuda:N, mps, auto"
_DEVICE_RE = re.compile(r"^(cpu|cuda|mps|auto|cuda:\d+)$")


def check_device_spelling(requested: str) -> str:
    """Validate the *form* of a device string (before any run exists); availability is checked later."""
    value = requested.strip().lower()
    if not _DEVICE_RE.match(value):
        raise UsageError(f"unknown device {requested!r}; allowed: {DEVICE_CHOICES}", param="device")
    return value


# A run is a measurement of minutes to hours: a million epochs of even 8 images is days of a host's time,
# and `--epochs 1000000000` was accepted and ran until killed.
MAX_EPOCHS = 100_000
WORKERS_PER_CORE = 4  # loader processes per usable core: I/O-bound decoding gains little beyond that


def max_workers() -> int:
    """The most DataLoader workers this host can run: each is a process with its own copy of the
    dataset's state, and `--num_workers 10000` ended with the out-of-memory killer and no message."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(WORKERS_PER_CORE, WORKERS_PER_CORE * cores)


def check_workers(num_workers: int) -> None:
    """Refuse more DataLoader workers than `max_workers` (cifar's and unet's `num_workers`)."""
    most = max_workers()
    if num_workers > most:
        raise UsageError(
            f"{num_workers} is out of range; this host takes at most {most} "
            f"({WORKERS_PER_CORE} per usable core)",
            param="num_workers",
        )
