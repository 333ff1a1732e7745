"""infer's LoadGen scenarios: the model's predictions in-process or over HTTP, driven by LoadGen
(workloads/loadgen.py), and what a run logs of them.

In-process, a batch of queries is one forward in `torch.inference_mode()`, its inputs copied to the
device and its outputs back to the host. Over HTTP, it is one `/invocations` request to MLflow's
scoring server (started by the CLI, which alone talks to MLflow: the workload gets its URL and log),
its body MLflow's `inputs` JSON or Parquet (`http_body`), sent on one of `clients` keep-alive
connections, one per worker. The server scenario's answer is the
highest QPS LoadGen calls VALID within `p99_ms`, found by `loadgen.peak_search` within
`serve_budget_s`; with `tune`, over a few batching settings, the best kept.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import torch
from matplotlib.figure import Figure

from devicebench.config.serving_fields import LOADGEN_SCENARIOS
from devicebench.config.workloads import InferConfig as Config
from devicebench.errors import UsageError
from devicebench.host.precision import autocast
from devicebench.models import zoo
from devicebench.schema import loadgen_artifact, loadgen_key, loadgen_tag, loadgen_test_key
from devicebench.tracking.protocol import Tracker
from devicebench.util.fmt import fmt_s
from devicebench.workloads.loadgen import Load, LoadGenResult, Predict, highest_held, peak_search, run_test

SAMPLES = 64  # LoadGen's sample library: distinct inputs its queries pick from
ESTIMATE_CALLS = 5  # untimed-by-LoadGen calls that warm the model and set LoadGen's expectations
OFFLINE_TESTS = 3  # offline tests at most, each asking twice the rate the one before measured
LOG_TAIL_LINES = 5  # a scoring server's last lines said when it fails
SETTLE_S = 2.0  # the longest a failure waits for a dying server's log to stop growing
# the server search starts where one model is busy this share of the time (HTTP clients overlap only
# the round trips): queueing stays short, so
# the first test usually holds and the search doubles up from there
START_LOAD = 0.3


@dataclass
class Served:
    """One way's LoadGen outcomes: each scenario's, the server search's tests, the winning setting."""

    via: str
    body: str = ""  # over HTTP, how its requests carried the samples (a name in BODIES)
    outcomes: dict[str, LoadGenResult] = field(default_factory=dict)
    tried: list[LoadGenResult] = field(default_factory=list)
    max_batch: int = 1
    max_wait_s: float = 0.0
    tuned: list[tuple[int, float, float]] = field(default_factory=list)  # (max_batch, max_wait_ms, max QPS)
    failure: UsageError | None = None  # the server search held no QPS within the promise


def in_process(
    model: torch.nn.Module, xs: torch.Tensor, device: torch.device, amp: torch.dtype | None
) -> Predict:
    """A batch of sample indices as one forward, inputs in and outputs out across the host boundary."""

    @torch.inference_mode()
    def predict(indices: Sequence[int]) -> None:
        with autocast(device, amp):
            out = zoo.main_output(model(xs[list(indices)].to(device)))
        out.float().cpu()

    return predict


def _settled(log: Path) -> None:
    """Wait (at most SETTLE_S) until the log stops growing: a server that just died is often still
    writing its last words (MLflow's traceback for its dead uvicorn)."""
    deadline, size = time.monotonic() + SETTLE_S, -1
    while time.monotonic() < deadline and size != (size := log.stat().st_size):
        time.sleep(SETTLE_S / 8)


def _without_frames(lines: list[str]) -> list[str]:
    """A traceback reduced to its exception line: its indented frames say where, not why."""
    out, in_traceback = [], False
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif not (in_traceback and line[:1].isspace()):
            out.append(line)
            in_traceback = False
    return out


def server_tail(log: Path | None) -> str:
    """The scoring server's last lines once it has stopped writing, tracebacks to their exception,
    joined: what a failure says of it."""
    if log is None or not log.exists():
        return ""
    _settled(log)
    lines = [x.strip() for x in _without_frames(log.read_text(errors="replace").splitlines()) if x.strip()]
    return " | ".join(lines[-LOG_TAIL_LINES:])


@dataclass(frozen=True)
class Body:
    """How a batch of sample indices travels to `/invocations`: the content type and the bytes."""

    content_type: str
    of: Callable[[Sequence[int]], bytes]


def json_body(xs: torch.Tensor) -> Body:
    """MLflow's `inputs` JSON, each sample serialised once (the client's work is not the server's)
    and joined per request."""
    rows = [json.dumps(x.tolist()) for x in xs]
    return Body(
        "application/json",
        lambda indices: ('{"inputs": [' + ",".join(rows[i] for i in indices) + "]}").encode(),
    )


def parquet_body(xs: torch.Tensor) -> Body:
    """MLflow's Parquet body: one column, a row per sample holding its values flattened in their
    logical order, which MLflow reshapes to the signature's shape. A single sample's body is written
    once; a batch's when it is asked (about a millisecond and a half for resnet18's 48 KiB samples)."""
    import pyarrow  # lazy: only an HTTP run that asks for Parquet pays for pyarrow's import
    import pyarrow.parquet

    flat = xs.reshape(len(xs), -1).float().numpy()

    def written(indices: Sequence[int]) -> bytes:
        rows = flat[list(indices)]
        column = pyarrow.FixedSizeListArray.from_arrays(pyarrow.array(rows.reshape(-1)), rows.shape[1])
        sink = pyarrow.BufferOutputStream()
        pyarrow.parquet.write_table(pyarrow.table({"inputs": column}), sink, compression="none")
        return sink.getvalue().to_pybytes()

    singles = [written([i]) for i in range(len(xs))]
    return Body(
        "application/vnd.apache.parquet",
        lambda indices: singles[indices[0]] if len(indices) == 1 else written(indices),
    )


BODIES: dict[str, Callable[[torch.Tensor], Body]] = {"json": json_body, "parquet": parquet_body}


def over_http(url: str, xs: torch.Tensor, log: Path | None, body: str = "json") -> Predict:
    """A batch of sample indices as one `/invocations` request (`body`: a name in `BODIES`), each
    worker thread on its own keep-alive connection; a refusal or a non-200 answer is one line with the
    server's answer and its last log lines."""
    parts = urlsplit(url)
    wire = BODIES[body](xs)
    local = threading.local()

    def post(data: bytes) -> tuple[int, bytes]:
        # a kept-alive connection the server closed while idle (uvicorn's keep-alive timeout between
        # tests) fails once: a fresh connection is tried before the server is called gone
        for attempt in (0, 1):
            if not hasattr(local, "conn"):
                local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            try:
                local.conn.request("POST", "/invocations", data, {"Content-Type": wire.content_type})
                answer = local.conn.getresponse()
                return answer.status, answer.read()
            except (OSError, http.client.HTTPException) as exc:  # a reset, or an answer cut short
                local.conn.close()
                del local.conn
                if attempt:
                    raise RuntimeError(
                        f"the scoring server at {url} stopped answering ({exc}): {server_tail(log)}"
                    ) from None
        raise AssertionError("unreachable")

    def predict(indices: Sequence[int]) -> None:
        status, text = post(wire.of(indices))
        if status != 200:
            first = " ".join(text.decode(errors="replace").split())[:300]
            raise RuntimeError(f"the scoring server answered {status}: {first}")

    return predict


def _latency_s(predict: Predict, batch: int) -> float:
    """The fastest of a few calls: LoadGen's expected latency and first QPS, never a logged figure."""
    best = float("inf")
    for _ in range(ESTIMATE_CALLS):
        t0 = time.perf_counter()
        predict(list(range(batch)))
        best = min(best, time.perf_counter() - t0)
    return best


def _load(cfg: Config, max_batch: int, max_wait_ms: float, workers: int) -> Load:
    return Load(cfg.min_duration_s, cfg.min_queries, cfg.p99_ms / 1e3, max_batch, max_wait_ms / 1e3, workers)


def _single_stream(predict: Predict, load: Load, latency_s: float, out: Path) -> LoadGenResult:
    """single_stream at the latency a few calls promised; once more at LoadGen's own mean latency
    where the queries it pre-generated from that promise ran out before the least duration (an
    estimate slowed by a busy host: LoadGen's recommendation, expect faster)."""
    first = run_test("single_stream", predict, SAMPLES, load, 0.0, latency_s, out)
    if first.valid or first.min_duration_met:
        return first
    return run_test("single_stream", predict, SAMPLES, load, 0.0, 1 / first.rate, out)


def _offline(predict: Predict, load: Load, latency_s: float, out: Path) -> LoadGenResult:
    """Offline at the rate a batch's latency promises; again at twice LoadGen's own measured rate while
    LoadGen found its query too small to last the least duration (its recommendation), at most
    OFFLINE_TESTS tests: on a host whose speed swings, a test ran faster than the one before it."""
    result = run_test("offline", predict, SAMPLES, load, load.max_batch / latency_s, latency_s, out)
    for _ in range(OFFLINE_TESTS - 1):
        if result.valid or result.rate <= result.target_qps:
            break
        result = run_test("offline", predict, SAMPLES, load, 2 * result.rate, latency_s, out)
    return result


def settings_to_try(cfg: Config) -> list[tuple[int, float]]:
    """(max_batch, max_wait_ms) for the server search: the given one, and with `tune` a few batch sizes
    each waiting up to a tenth of the promise to fill."""
    given = (cfg.max_batch, cfg.max_wait_ms)
    if not cfg.tune:
        return [given]
    wait = cfg.p99_ms / 10
    tried = [(1, 0.0), (4, wait), (16, wait)]
    return tried if given in tried else [*tried, given]


def _server(cfg: Config, predict: Predict, workers: int, out: Path, served: Served) -> None:
    """The server scenario's search at each batching setting within its share of the budget; the
    setting that held the highest QPS is kept (its tests are `served.tried`; each setting's highest,
    `served.tuned`)."""
    settings = settings_to_try(cfg)
    searches = []
    for max_batch, max_wait_ms in settings:
        load = _load(cfg, max_batch, max_wait_ms, workers)
        latency_s = _latency_s(predict, 1)
        tried = peak_search(
            lambda qps, test, latency_s=latency_s: run_test(
                "server", predict, SAMPLES, test, qps, latency_s, out
            ),
            START_LOAD / latency_s,
            load,
            cfg.serve_budget_s / len(settings),
        )
        top = max((o.target_qps for o in tried if o.valid), default=0.0)
        searches.append((top, tried, load))
        served.tuned.append((max_batch, max_wait_ms, top))
    _, served.tried, load = max(searches, key=lambda s: s[0])
    served.max_batch, served.max_wait_s = load.max_batch, load.max_wait_s
    served.outcomes["server"] = highest_held(served.tried, load)


def drive(cfg: Config, predict: Predict, via: str, workers: int, out: Path) -> Served:
    """Each LoadGen scenario `cfg.scenarios` asks, through `predict`, its logs under `out`."""
    served = Served(via, cfg.http_body if via == "http" else "")
    load = _load(cfg, cfg.max_batch, cfg.max_wait_ms, workers)
    latency_s = _latency_s(predict, 1)
    for scenario in [s for s in cfg.scenarios if s in LOADGEN_SCENARIOS]:
        if scenario == "single_stream":
            served.outcomes[scenario] = _single_stream(predict, load, latency_s, out)
        elif scenario == "offline":
            served.outcomes[scenario] = _offline(predict, load, _latency_s(predict, cfg.max_batch), out)
        else:
            try:
                _server(cfg, predict, workers, out, served)
            except UsageError as exc:  # said once every figure measured is logged (infer.under_load)
                served.failure = exc
    return served


def log_served(tracker: Tracker, served: Served, out: Path) -> None:
    """Each scenario's figures as LoadGen's detail log gave them, VALID or INVALID with its reason, the
    server search's tests (a table, a series for the UI, and flat keys for the report's chart), and
    LoadGen's logs as artifacts."""
    for scenario, o in served.outcomes.items():
        figures = {
            "rate": o.rate,
            "p50_s": o.p50_s,
            "p90_s": o.p90_s,
            "p99_s": o.p99_s,
            "valid": float(o.valid),
        }
        if scenario == "server":
            figures["max_qps"] = o.target_qps
        tracker.log_metrics({loadgen_key(served.via, scenario, k): v for k, v in figures.items()})
        tracker.set_tags({loadgen_tag(served.via, scenario): "VALID" if o.valid else f"INVALID: {o.reason}"})
    for i, o in enumerate(served.tried):
        tried = {"tried_qps": o.target_qps, "tried_p99_s": o.p99_s}
        tracker.log_metrics({loadgen_key(served.via, "server", k): v for k, v in tried.items()}, step=i)
        test = {"qps": o.target_qps, "p99_s": o.p99_s, "valid": float(o.valid)}
        tracker.log_metrics({loadgen_test_key(served.via, i, k): v for k, v in test.items()})
    if served.tried:
        rows = {
            "qps": [o.target_qps for o in served.tried],
            "p99_ms": [1e3 * o.p99_s for o in served.tried],
            "valid": [o.valid for o in served.tried],
        }
        tracker.log_table(rows, loadgen_artifact(served.via, "server_search.json"))
    if len(served.tuned) > 1:
        columns = ("max_batch", "max_wait_ms", "max_qps")
        tracker.log_table(
            {c: [t[i] for t in served.tuned] for i, c in enumerate(columns)},
            loadgen_artifact(served.via, "tune.json"),
        )
    for path in sorted(out.glob("*.txt")):  # as text: the folder is gone before a spooled run is sent
        tracker.log_text(path.read_text(errors="replace"), loadgen_artifact(served.via, path.name))


def p99_chart(ways: Sequence[Served], p99_bound_s: float, device: str) -> Figure:
    """Each way's server tests: p99 against the QPS asked, VALID filled, INVALID hollow, and the
    promise as a line; what `p99_vs_qps.png` shows beside the run's answer."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    ax.axhline(1e3 * p99_bound_s, color="grey", linestyle="--", label=f"promise: p99 {fmt_s(p99_bound_s)}")
    for way, colour in zip(ways, ("tab:blue", "tab:orange"), strict=False):
        tests = sorted(way.tried, key=lambda o: o.target_qps)
        xs, ys = [o.target_qps for o in tests], [1e3 * o.p99_s for o in tests]
        ax.plot(xs, ys, color=colour, label=f"{device} {way.via}")
        ax.scatter(xs, ys, color=colour, facecolors=[colour if o.valid else "none" for o in tests])
    ax.set_xlabel("QPS asked (Poisson arrivals)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title("LoadGen server scenario: p99 against QPS", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
