"""How `infer` loads its model as a deployed server is loaded: MLPerf LoadGen's scenarios, the p99
promise, the batching the server does, and whether requests go in-process or over HTTP through
MLflow's scoring server. One dataclass part (`ServingLoad`) that `InferConfig` inherits, so the
serving fields are declared once and apart from the rest of infer's."""

from __future__ import annotations

from dataclasses import dataclass

from devicebench.config.fields import param
from devicebench.config.parts import Part

# `timed`: infer's own timed requests and batch sizes; the others are LoadGen's scenarios
SCENARIOS = ("timed", "single_stream", "server", "offline")
LOADGEN_SCENARIOS = SCENARIOS[1:]
VIAS = ("in_process", "http")
HTTP_BODIES = ("json", "parquet")  # MLflow's scoring server's content types for a tensor


@dataclass(frozen=True)
class ServingLoad(Part):
    """The serving fields of `devicebench infer` (LoadGen, the p99 promise, batching, HTTP)."""

    scenarios: tuple[str, ...] = param(
        ("timed",),
        "timed (batch-1 requests one after another, then each batch size), or MLPerf LoadGen's "
        "single_stream (p90, p99), server (highest QPS within p99_ms) and offline (samples/s)",
        choices=SCENARIOS,
    )
    via: tuple[str, ...] = param(
        ("in_process",),
        "how LoadGen's queries reach the model: in_process, or http (model_uri served by `mlflow models "
        "serve` on 127.0.0.1); both: each, in the same run",
        choices=VIAS,
    )
    p99_ms: float = param(
        50.0, "the server scenario's promise: p99 latency at most this (ms)", above=0, max=600_000
    )
    serve_budget_s: float = param(
        60.0,
        "time the server scenario's search for its highest QPS may take",
        above=0,
        max=86_400,
        key=False,
    )
    min_duration_s: float = param(
        1.0,
        "LoadGen's shortest test of one scenario at one QPS (MLPerf's is 600)",
        above=0,
        max=3600,
        key=False,
    )
    min_queries: int = param(
        1024,
        "LoadGen's fewest queries in one test: its early stopping needs about 460 for a server p99 with "
        "none over the bound, more with a few over; fewer is INVALID however fast",
        min=1,
        max=10_000_000,
        key=False,
    )
    max_batch: int = param(1, "the server gathers up to this many queries into one batch", min=1, max=4096)
    max_wait_ms: float = param(
        0.0, "how long the server waits for more queries to fill a batch (ms)", min=0, max=10_000
    )
    tune: bool = param(
        False, "search max_batch and max_wait_ms for the highest QPS within p99_ms (the server scenario)"
    )
    http_body: str = param(
        "json",
        "how an HTTP request carries its samples: json (MLflow's `inputs` JSON, as its docs show) or "
        "parquet (application/vnd.apache.parquet: a row per sample, its values flattened, which MLflow "
        "reshapes to the model's signature)",
        choices=HTTP_BODIES,
    )
    clients: int = param(
        4, "client connections that send LoadGen's queries over HTTP", min=1, max=256, key=False
    )
    serve_port: int = param(
        0, "the scoring server's port on 127.0.0.1 (0: a free one)", min=0, max=65535, key=False
    )
