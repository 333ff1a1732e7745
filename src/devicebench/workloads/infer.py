"""Serving figures for a model on one device: what a request takes, and how many predictions a second.

A request is what a server does for one caller: its input copied from the host to the device, the
forward in `torch.inference_mode()` (autocast where `precision` asks), its result copied back to the
host; each is timed end to end from the host's clock after the device has finished (MLPerf Inference's
SingleStream). `requests` of them at batch 1 give the latency percentiles, p99 resting on the slowest
1 % (a thousand requests by default: ten samples above it). Each of `batch_sizes` then runs back to back
for `min_time_s` (MLPerf's Offline): predictions a second, what a batch takes, and from the run's price
what a million predictions cost. The model is a logged one (`model_uri`, loaded before the run by the
CLI, which alone talks to MLflow) or one built by name with seeded, untrained weights: serving time
does not depend on what the weights learnt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from devicebench.config.spelling import parse_input
from devicebench.config.workloads import InferConfig as Config
from devicebench.errors import UsageError
from devicebench.host import peaks, precision
from devicebench.host.context import Context, LoadedModel
from devicebench.host.timing import Timer, TimingStats
from devicebench.models import zoo
from devicebench.schema import (
    FORWARD_FLOPS,
    SERVE_BATCH,
    SERVE_P50,
    SERVE_P90,
    SERVE_P99,
    SERVE_RATE,
    SERVE_TFLOPS,
    serve_batch_key,
    serve_series_key,
    tag,
)
from devicebench.tracking.protocol import Tracker
from devicebench.train.setup import autocast, peak_memory, reset_peak_memory, seed_everything
from devicebench.train.summary import forward_flops_per_sample, utilization_metrics
from devicebench.util.stats import quantile

DATA = "synthetic"  # random inputs of the model's shape: serving time does not depend on the pixels
MEMORY_PARAMS = ("batch_sizes", "input")
DEFAULT_INPUT = (3, 224, 224)
BATCH_REPEATS = 5  # at least this many timed batches per size, however long `min_time_s`


@dataclass
class InferResult:
    """What a run measured: the batch-1 percentiles, each batch size's rate, the best of them."""

    p50_s: float
    p90_s: float
    p99_s: float
    requests: int
    samples_per_s: dict[int, float] = field(default_factory=dict)
    batch_latency_s: dict[int, float] = field(default_factory=dict)
    forward_flops: float | None = None

    @property
    def best_batch(self) -> int:
        return max(self.samples_per_s, key=lambda b: self.samples_per_s[b])

    @property
    def serve_samples_per_s(self) -> float:
        return self.samples_per_s[self.best_batch]


def check(cfg: Config, served: LoadedModel | None = None) -> None:
    """Before the run exists: a logged model (`served`, loaded by then) has an input shape, its
    signature's or `input`, and gives one output per sample; a model built by name resolves, builds
    and takes the input."""
    if served is not None:
        zoo.served_checked(served.module, _served_shape(cfg, served), served.uri)
    else:
        _spec(cfg)


def _spec(cfg: Config) -> zoo.Spec:
    return zoo.checked(cfg.model, _shape(cfg), cfg.num_classes)


def _shape(cfg: Config) -> tuple[int, ...]:
    return parse_input(cfg.input) if cfg.input else DEFAULT_INPUT


def _served_shape(cfg: Config, served: LoadedModel) -> tuple[int, ...]:
    """A logged model's sample shape: `input` where given, else its signature's (none: refused)."""
    if cfg.input:
        return _shape(cfg)
    if served.input_shape is None:
        raise UsageError(
            f"the model at {served.uri} has no input shape in its signature; give input CxHxW", param="input"
        )
    return served.input_shape


def _model(cfg: Config, ctx: Context) -> tuple[torch.nn.Module, tuple[int, ...], str]:
    """(the module, one sample's shape, what to call it): the logged model, or one built by name."""
    if ctx.served is not None:
        return ctx.served.module, _served_shape(cfg, ctx.served), ctx.served.name or ctx.served.uri
    spec = _spec(cfg)
    seed_everything(cfg.seed)
    return spec.build(cfg.num_classes), _shape(cfg), spec.name


def _request(
    model: torch.nn.Module, x: torch.Tensor, device: torch.device, amp: torch.dtype | None, nhwc: bool
) -> Callable[[], torch.Tensor]:
    """One request as a server serves it: copy in, forward, copy the result out to the host."""

    def serve() -> torch.Tensor:
        on = x.to(device)
        if nhwc and on.dim() == 4:
            on = on.contiguous(memory_format=torch.channels_last)
        with autocast(device, amp):
            out = zoo.main_output(model(on))
        return out.float().cpu()

    return serve


def _one_row_each(cfg: Config, model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> None:
    """One untimed forward of `x`: a model whose output is not one row per sample (a loss, a mean over
    the batch) would be timed as `len(x)` predictions a call; it is one line naming the model."""
    who = ("model_uri", cfg.model_uri) if cfg.model_uri else ("model", cfg.model)
    zoo.one_per_sample(model(x.to(device)), len(x), who[1], who[0])


def _request_times(
    fn: Callable[[], object], device: torch.device, warmup: int, repeats: int, min_time_s: float
) -> TimingStats:
    """Each call timed alone from the host's clock, the device drained at both ends (no CUDA events:
    a request's time is what its caller waits, copies included)."""
    return Timer(device, use_events=False).measure(
        fn, warmup=warmup, repeats=repeats, min_time_s=min_time_s, block_s=0
    )


@torch.inference_mode()
def measure(cfg: Config, model: torch.nn.Module, shape: tuple[int, ...], device: torch.device) -> InferResult:
    """The batch-1 latencies, then each batch size's throughput, on inputs already on the host."""
    amp = precision.check_precision(cfg.precision, device)
    g = torch.Generator().manual_seed(cfg.seed)
    one = torch.randn((1, *shape), generator=g)
    _one_row_each(cfg, model, one, device)
    latency = _request_times(
        _request(model, one, device, amp, cfg.channels_last), device, cfg.warmup, cfg.requests, 0.0
    )
    xs = sorted(latency.samples_s)
    result = InferResult(quantile(xs, 0.5), quantile(xs, 0.9), quantile(xs, 0.99), len(xs))
    for b in sorted(set(cfg.batch_sizes)):
        batch = torch.randn((b, *shape), generator=g)
        _one_row_each(cfg, model, batch, device)
        stats = _request_times(
            _request(model, batch, device, amp, cfg.channels_last),
            device,
            cfg.warmup,
            BATCH_REPEATS,
            cfg.min_time_s,
        )
        result.batch_latency_s[b] = stats.median_s
        result.samples_per_s[b] = b / stats.median_s
    return result


def run(cfg: Config, ctx: Context, tracker: Tracker) -> InferResult:
    """Load or build the model, measure it serving on `ctx.device`, log the figures."""
    model, shape, name = _model(cfg, ctx)
    math_tags = precision.fp32_math(cfg.precision, ctx.device)
    tracker.set_tags(math_tags)
    model = model.to(ctx.device).eval()
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    forward = forward_flops_per_sample(model, shape)  # one request's forward, counted
    reset_peak_memory(ctx.device)
    result = measure(cfg, model, shape, ctx.device)
    result.forward_flops = forward
    _log(tracker, result, ctx.device, peaks.training_dtype(cfg.precision, math_tags[tag("fp32_math")]))
    print(
        f"{name} on {ctx.device}: batch 1 p50 {1e3 * result.p50_s:.2f} ms, p99 {1e3 * result.p99_s:.2f} ms "
        f"over {result.requests} requests; best {result.serve_samples_per_s:,.0f} predictions/s at batch "
        f"{result.best_batch}"
    )
    return result


def _log(tracker: Tracker, r: InferResult, device: torch.device, dtype: str) -> None:
    """The percentiles, each batch size's figures (flat, and stepped by batch size for the UI's chart),
    the best rate and where, peak memory and the share of the device's peak."""
    rows: dict[str, list[Any]] = {"batch_size": [], "samples_per_s": [], "latency_p50_ms": []}
    for b in sorted(r.samples_per_s):
        figures = {"samples_per_s": r.samples_per_s[b], "batch_p50_s": r.batch_latency_s[b]}
        tracker.log_metrics({serve_batch_key(b, k): v for k, v in figures.items()})
        tracker.log_metrics({serve_series_key(k): v for k, v in figures.items()}, step=b)
        for column, value in zip(rows, (b, r.samples_per_s[b], 1e3 * r.batch_latency_s[b]), strict=True):
            rows[column].append(value)
    util, util_tags = utilization_metrics(
        r.forward_flops, r.serve_samples_per_s, device, dtype, keys=(FORWARD_FLOPS, SERVE_TFLOPS)
    )
    tracker.set_tags(util_tags)
    tracker.log_metrics(
        {
            SERVE_P50: r.p50_s,
            SERVE_P90: r.p90_s,
            SERVE_P99: r.p99_s,
            SERVE_RATE: r.serve_samples_per_s,
            SERVE_BATCH: float(r.best_batch),
            **util,
            **peak_memory(device),
        }
    )
    tracker.log_table(rows, "serving.json")
