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

import math
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from devicebench.config.spelling import parse_input
from devicebench.config.workloads import InferConfig as Config
from devicebench.errors import UsageError
from devicebench.host import peaks, precision
from devicebench.host.context import Context, LoadedModel
from devicebench.host.memory import peak_memory, reset_peak_memory
from devicebench.host.steadiness import host_tail
from devicebench.host.timing import Timer, TimingStats
from devicebench.models import zoo
from devicebench.schema import (
    FORWARD_FLOPS,
    SERVE_BATCH,
    SERVE_MAX_QPS,
    SERVE_MAX_QPS_P99,
    SERVE_MAX_WAIT,
    SERVE_P50,
    SERVE_P90,
    SERVE_P99,
    SERVE_P99_BOUND,
    SERVE_RATE,
    SERVE_TFLOPS,
    loadgen_artifact,
    serve_batch_key,
    serve_series_key,
    tag,
)
from devicebench.tracking.protocol import Tracker
from devicebench.train.seeding import seed_everything
from devicebench.train.summary import forward_flops_per_sample, utilization_metrics
from devicebench.util.busy_host import tail_caveat
from devicebench.util.fmt import fmt_count, fmt_s
from devicebench.util.stats import quantile
from devicebench.workloads.serving import SAMPLES, Served, drive, in_process, log_served, over_http, p99_chart

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
    served: dict[str, Served] = field(default_factory=dict)  # LoadGen's outcomes, per way in
    p99_bound_s: float = math.nan  # the server scenario's promise
    host: dict[str, float] = field(default_factory=dict)  # how steady the CPU was (host/steadiness.py)

    @property
    def answer(self) -> Served | None:
        """The way whose server scenario answers for the run: over HTTP where it ran (what a deployed
        server holds), else in-process; None without a server scenario."""
        return next(
            (
                self.served[v]
                for v in ("http", "in_process")
                if "server" in self.served.get(v, Served(v)).outcomes
            ),
            None,
        )

    @property
    def best_batch(self) -> int:
        if self.answer is not None:
            return self.answer.max_batch
        if not self.samples_per_s:
            return 1
        return max(self.samples_per_s, key=lambda b: self.samples_per_s[b])

    @property
    def serve_samples_per_s(self) -> float:
        """The highest QPS held within the p99 promise where the server scenario ran, else the best
        rate timed, else LoadGen's offline rate."""
        if self.answer is not None:
            return self.answer.outcomes["server"].target_qps
        if self.samples_per_s:
            return self.samples_per_s[self.best_batch]
        offline = [s.outcomes["offline"].rate for s in self.served.values() if "offline" in s.outcomes]
        return offline[0] if offline else math.nan


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
        with precision.autocast(device, amp):
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
    if "timed" not in cfg.scenarios:
        return InferResult(math.nan, math.nan, math.nan, 0)
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
    if set(cfg.scenarios) - {"timed"}:  # LoadGen's p99s, and its promise, rest on the CPU's own tail
        result.host = host_tail()
        tracker.log_metrics(result.host)
    result.served = under_load(cfg, ctx, tracker, model, shape, result.host)
    result.p99_bound_s = cfg.p99_ms / 1e3
    _loadgen_latencies(result)
    _log(tracker, result, ctx.device, peaks.training_dtype(cfg.precision, math_tags[tag("fp32_math")]))
    if "timed" in cfg.scenarios:
        print(
            f"{name} on {ctx.device}: batch 1 p50 {fmt_s(result.p50_s)}, p99 {fmt_s(result.p99_s)} over "
            f"{result.requests} requests; best {fmt_count(max(result.samples_per_s.values()))} predictions/s"
        )
    for way in result.served.values():
        print(f"{name} on {ctx.device} {way.via}, LoadGen: {said(way)}")
    return result


def said(way: Served) -> str:
    """One way's LoadGen scenarios in a line: each figure, VALID or INVALID, the server's setting."""
    words = {True: "VALID", False: "INVALID"}
    parts = []
    for scenario, o in way.outcomes.items():
        if scenario == "single_stream":
            parts.append(f"single_stream p90 {fmt_s(o.p90_s)} p99 {fmt_s(o.p99_s)} {words[o.valid]}")
        elif scenario == "offline":
            parts.append(f"offline {fmt_count(o.rate)} samples/s {words[o.valid]}")
        else:
            wait = f", waiting up to {fmt_s(way.max_wait_s)}" if way.max_wait_s else ""
            parts.append(
                f"server {fmt_count(o.target_qps)} QPS held with p99 {fmt_s(o.p99_s)} "
                f"(batch up to {way.max_batch}{wait}) {words[o.valid]}"
            )
    return " · ".join(parts)


def _with_host(failure: UsageError, host: Mapping[str, float]) -> UsageError:
    """A search's failure with what an unsteady CPU did to it (util/busy_host.tail_caveat), if it did."""
    caveat = tail_caveat(host)
    if not caveat:
        return failure
    return UsageError(f"{failure.said}; {caveat}", param=failure.param)


def under_load(
    cfg: Config,
    ctx: Context,
    tracker: Tracker,
    model: torch.nn.Module,
    shape: tuple[int, ...],
    host: Mapping[str, float] = MappingProxyType({}),
) -> dict[str, Served]:
    """LoadGen's scenarios through each way in `cfg.via` (in-process first), each logged as it ends;
    a search that held nothing fails with what `host` (the CPU's steadiness) did to it."""
    if set(cfg.scenarios) <= {"timed"}:
        return {}
    amp = precision.check_precision(cfg.precision, ctx.device)
    xs = torch.randn((SAMPLES, *shape), generator=torch.Generator().manual_seed(cfg.seed))
    if cfg.channels_last and xs.dim() == 4:
        xs = xs.contiguous(memory_format=torch.channels_last)
    out: dict[str, Served] = {}
    for via in sorted(cfg.via, key=lambda v: v != "in_process"):
        if via == "http":
            url, log = ctx.served.url, ctx.served.log  # started by the CLI before the run: check() saw it
            predict, workers = over_http(url, xs, log, cfg.http_body), cfg.clients
            tracker.set_tags({tag("serve.url"): url})
        else:
            predict, workers = in_process(model, xs, ctx.device, amp), 1
        with tempfile.TemporaryDirectory(prefix="devicebench-loadgen-") as folder:
            out[via] = drive(cfg, predict, via, workers, Path(folder))
            log_served(tracker, out[via], Path(folder))
    searched = [way for way in out.values() if way.tried]
    if searched:
        tracker.log_figure(
            p99_chart(searched, cfg.p99_ms / 1e3, str(ctx.device)), loadgen_artifact("all", "p99_vs_qps.png")
        )
    if "http" in out and ctx.served is not None and ctx.served.log is not None:
        tracker.log_text(
            ctx.served.log.read_text(errors="replace"), loadgen_artifact("http", "scoring_server.log")
        )
    for way in out.values():  # a search that held no QPS fails the run, its figures logged first
        if way.failure is not None:
            raise _with_host(way.failure, host)
    return out


def _loadgen_latencies(r: InferResult) -> None:
    """Without timed requests, the run's p50/p90/p99 are LoadGen's single_stream's (else its server's
    at the highest QPS held), from the way that answers."""
    if not math.isnan(r.p50_s) or not r.served:
        return
    way = r.answer or next(iter(r.served.values()))
    o = way.outcomes.get("single_stream") or way.outcomes.get("server") or next(iter(way.outcomes.values()))
    r.p50_s, r.p90_s, r.p99_s, r.requests = o.p50_s, o.p90_s, o.p99_s, o.queries


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
    if rows["batch_size"]:
        tracker.log_table(rows, "serving.json")
    if r.answer is not None:
        server = r.answer.outcomes["server"]
        tracker.log_metrics(
            {
                SERVE_MAX_QPS: server.target_qps,
                SERVE_MAX_QPS_P99: server.p99_s,
                SERVE_P99_BOUND: r.p99_bound_s,
                SERVE_MAX_WAIT: r.answer.max_wait_s,
            }
        )
