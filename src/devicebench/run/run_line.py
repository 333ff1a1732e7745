"""A workload run's answer in one line, and the few metrics that lead its metric list.

A run's page in the MLflow UI shows its description (the `mlflow.note.content` tag) above its metrics,
and `devicebench <workload>` (so `mlflow run`) prints this same line last: time, throughput, quality,
device and cost, e.g. `train 561.20 ms · 3,542 img/s · acc 0.902 · cuda:0 · $0.000159/epoch (illustrative
$1/h)`. A made-up price says so here as in the report, so it cannot pass for a real one.

Wherever MLflow orders metrics by name, `time/...` and `throughput/...` came after the per-class
accuracies. `at_a_glance/*` repeats the headline figures under a name that sorts before every other
prefix (cost/, dist/, eval/, matmul/, memory/, time/, ...); the original names stay as they are, for the
report and for every run already logged. (The run page's own metrics table, seen in MLflow 3.17, lists
metrics in the order they were first logged, warm-up first; there the description above it leads.)
Torch- and mlflow-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from devicebench.config.workloads import KIND_OF
from devicebench.errors import UsageError
from devicebench.pricing.prices import ILLUSTRATIVE, OVERRIDE, Price, priced_as
from devicebench.report.read.options import Query
from devicebench.schema import (
    COST_PER_EPOCH,
    COST_PER_MILLION,
    GFLOP_PER_USD,
    HOST_SLOWDOWN,
    PRODUCT,
    SERVING,
    TRAIN_S,
    TRAINING,
    Kind,
    glance_key,
    headline_point,
    tag,
)
from devicebench.util.busy_host import RERUN, busy_caveat, is_busy, tail_caveat
from devicebench.util.fmt import (
    SEP,
    fmt_amount,
    fmt_count,
    fmt_money,
    fmt_price,
    fmt_quality,
    fmt_rel_error,
    fmt_s,
)
from devicebench.util.gpu_caveat import gpu_caveat


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def price_phrase(price: Price | str) -> str:
    """What the run was priced as, after its cost, in the report's words: `VM.GPU.A10.1: 1 of its 1
    GPUs, $2/h`, `as if on VM.Standard.E5.Flex: 1 OCPU + 2 GB, $0.034/h`, `$1/h set by hand`, and
    `illustrative` in front of a made-up or another host's price."""
    if not isinstance(price, Price):
        return ""
    hourly = f"${fmt_price(price.usd_per_hour)}/h"
    if price.source == OVERRIDE:
        return f"{hourly} set by hand"
    made_up = "illustrative " if price.source == ILLUSTRATIVE else ""
    if not price.shape:
        return f"{made_up}{hourly}"
    return f"{made_up}{priced_as(price.shape, price.units, price.as_if)}, {hourly}"


def _best_matmul(points: Sequence[Any]) -> Any | None:
    """The point that speaks for the run, as it speaks for its side and pair in the report
    (schema.headline_point): torch at its largest size, float32 where there is one."""
    by_key = {(p.backend, p.dtype, p.size): p for p in points}
    key = headline_point(list(by_key))
    return by_key[key] if key is not None else None


def _product_glance(points: Any, costs: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    best = _best_matmul(points or [])
    if best is not None:
        out.update(time_s=best.stats.median_s, gflops=best.gflops, rel_error=best.rel_error)
    if GFLOP_PER_USD in costs:
        out["gflop_per_usd"] = costs[GFLOP_PER_USD]
    return out


def _serving_glance(result: Any, costs: Mapping[str, float]) -> dict[str, float]:
    out = {
        "latency_p50_s": result.p50_s,
        "latency_p99_s": result.p99_s,
        "serve_samples_per_s": result.serve_samples_per_s,
        "serve_batch_size": result.best_batch,
    }
    answer = getattr(result, "answer", None)
    if answer is not None:  # LoadGen's server: its rate is QPS within the promise
        out["p99_bound_s"] = result.p99_bound_s
        # over MLflow's scoring server its figures are the server's, not the model's: the line says so
        out["over_http"] = float(answer.via == "http")
        if answer.body == "parquet":  # JSON is MLflow's documented body: only the other one is said
            out["http_parquet"] = 1.0
    if COST_PER_MILLION in costs:
        out["usd_per_million"] = costs[COST_PER_MILLION]
    return out


def _training_glance(result: Any, costs: Mapping[str, float]) -> dict[str, float]:
    out = {"train_s": result.train_s, "train_samples_per_s": result.train_samples_per_s}
    for name in ("accuracy", "chance_accuracy", "miou"):  # each training workload has its own quality
        if _finite(getattr(result, name, None)):
            out[name] = getattr(result, name)
    if COST_PER_EPOCH in costs:
        out["usd_per_epoch"] = costs[COST_PER_EPOCH]
    return out


GLANCE_OF_KIND = {PRODUCT: _product_glance, SERVING: _serving_glance, TRAINING: _training_glance}


def glance_metrics(workload: str, result: Any, costs: Mapping[str, float]) -> dict[str, float]:
    """`at_a_glance/*`: the headline figures again, under names that sort first (see the module doc)."""
    out = GLANCE_OF_KIND[KIND_OF[workload]](result, costs)
    return {glance_key(k): float(v) for k, v in out.items() if _finite(v)}


def oversubscription(device: str, budget: Mapping[str, str]) -> str:
    """`oversubscribed: 4 busy threads on 2 cores` for a CPU run whose torch threads and loader
    processes (host/cpu.cpu_budget) outnumbered its cores: its figures measure contention, which a lone
    run would otherwise say nowhere. "" otherwise, and on a GPU, whose torch threads mostly wait."""
    if not device.startswith("cpu") or budget.get("cpu.oversubscribed") != "true":
        return ""
    busy, cores = budget.get("cpu.busy_threads", "?"), budget.get("cpu.usable_cores", "?")
    return f"oversubscribed: {busy} busy threads on {cores} cores"


def _product_figures(g: Mapping[str, float], kind: Kind) -> list[str]:
    parts = []
    if "gflops" in g:
        parts += [f"{fmt_s(g['time_s'])} per product", f"{fmt_count(g['gflops'])} {kind.rate_unit}"]
    if "rel_error" in g:
        parts.append(f"rel err {fmt_rel_error(g['rel_error'])}")
    return parts


def _serving_figures(g: Mapping[str, float], kind: Kind) -> list[str]:
    parts = []
    if "latency_p50_s" in g:
        parts.append(f"p50 {fmt_s(g['latency_p50_s'])} · p99 {fmt_s(g.get('latency_p99_s'))} per request")
    if "serve_samples_per_s" in g:
        at = f" at batch {int(g['serve_batch_size'])}" if "serve_batch_size" in g else ""
        within = f" held within p99 {fmt_s(g['p99_bound_s'])}" if "p99_bound_s" in g else ""
        within += " over HTTP" if g.get("over_http") else ""
        within += " with Parquet bodies" if g.get("http_parquet") else ""
        parts.append(f"{fmt_count(g['serve_samples_per_s'])} {kind.rate_unit}{within}{at}")
    return parts


def _training_figures(g: Mapping[str, float], kind: Kind) -> list[str]:
    parts = []
    if "train_s" in g:
        parts.append(f"train {fmt_s(g['train_s'])}")
    if "train_samples_per_s" in g:
        parts.append(f"{fmt_count(g['train_samples_per_s'])} {kind.rate_unit}")
    if "accuracy" in g:  # beside what guessing scores: `acc 0.000` of 1,000 classes is chance, not a bug
        chance = f" (chance {fmt_quality(g['chance_accuracy'])})" if "chance_accuracy" in g else ""
        parts.append(f"acc {fmt_quality(g['accuracy'])}{chance}")
    if "miou" in g:
        parts.append(f"mIoU {fmt_quality(g['miou'])}")
    return parts


# the run line's figures before the device, each kind its own
FIGURES_OF_KIND = {PRODUCT: _product_figures, SERVING: _serving_figures, TRAINING: _training_figures}


def summary_line(
    workload: str,
    device: str,
    glance: Mapping[str, float],
    price: Price | str,
    world_size: int = 1,
    budget: Mapping[str, str] | None = None,
    gpu: Mapping[str, float] | None = None,
    host: Mapping[str, float] | None = None,
) -> str:
    """The run's one line: time · throughput · quality · device · cost (price source); a figure the
    run has not got is left out, and a run without a price says so rather than showing none. An
    oversubscribed CPU (`budget`: the run's `cpu.*` facts) is said after the device, and so are a host
    that other processes kept busy (`host`: its `host/*` figures, `busy_caveat`, with what to do), one
    too unsteady for a p99 to be the model's (`tail_caveat`) and
    what may keep a GPU run's speed from repeating (`gpu`: its `gpu/*` figures, `gpu_caveat`)."""
    g = {k.removeprefix(glance_key("")): v for k, v in glance.items()}
    kind = KIND_OF[workload]
    parts = FIGURES_OF_KIND[kind](g, kind)
    parts.append(device + (f" ×{world_size}" if world_size > 1 else ""))
    busy = busy_caveat(host or {})
    for caveat in (
        oversubscription(device, budget or {}),
        f"{busy}: {RERUN}" if busy else "",
        tail_caveat(host or {}),
        gpu_caveat(gpu or {}, g.get("train_s", math.nan)),
    ):
        if caveat:
            parts.append(caveat)
    phrase = price_phrase(price)
    if "usd_per_epoch" in g:
        parts.append(f"{fmt_money(g['usd_per_epoch'])}/epoch ({phrase})")
    elif "usd_per_million" in g:
        parts.append(f"{fmt_money(g['usd_per_million'])}/M predictions ({phrase})")
    elif "gflop_per_usd" in g:
        parts.append(f"{fmt_amount(g['gflop_per_usd'])} GFLOP per $ ({phrase})")
    elif isinstance(price, str):
        parts.append(f"no price: {price}")
    return SEP.join(parts)


def quiet_cost(
    tracking_uri: str, run_id: str, config_key: str, device: str, train_s: float
) -> dict[str, float]:
    """`host/slowdown_vs_quiet` for a training run measured on a busy host: its training time over that
    of the newest quiet finished run of the same config on the same kind of device, in any experiment;
    {} where there is none (or the store cannot say). Asked only of a busy run: the share of the CPU
    others took does not say what it cost (56% cost one run 11x its time)."""
    from mlflow.exceptions import MlflowException  # deferred: only a busy run asks the store
    from mlflow.tracking import MlflowClient  # deferred: only a busy run asks the store

    from devicebench.report.read.query import read_runs  # deferred: only a busy run asks the store

    same = f"tags.`{tag('config_key')}` = '{config_key}' and attributes.status = 'FINISHED'"
    try:
        runs = read_runs(MlflowClient(tracking_uri), Query(experiments=("all",), filter=same)).runs
    except (UsageError, MlflowException, OSError):
        return {}
    kind = device.split(":")[0]
    quiet = (
        r.metrics[TRAIN_S]
        for r in runs  # newest first
        if r.run_id != run_id
        and r.device.split(":")[0] == kind
        and not is_busy(r.metrics)
        and r.metrics.get(TRAIN_S)
    )
    last = next(quiet, None)
    return {HOST_SLOWDOWN: train_s / last} if last and math.isfinite(train_s) else {}
