"""What MLflow's scoring server costs beside the model: LoadGen over HTTP against in-process, per model.

For a small and a mid-size torchvision model, each logged once to a throw-away SQLite store and served
by `mlflow models serve --env-manager local` (run.scoring, as `infer --via http` serves it): LoadGen's
SingleStream (p90, p99) and Offline (samples/s) through devicebench's `workloads.serving.drive`,
in-process and over HTTP with each body (`http_body`: MLflow's `inputs` JSON, Parquet), alternated
`ROUNDS` times in this process, the same inputs each way. Printed per model and body: the median
figures and the HTTP/in-process ratios, with the CPU and the host's load. Every way computes with one
torch thread (`THREADS`), so the difference is the way in.

Then where one request's time goes (`where_time_goes`, medians of `CALLS`): devicebench's HTTP client
against a server that answers at once, MLflow's `invocations` called directly on each body (no
transport), the pyfunc's `predict` alone (its share of `invocations`; the rest is MLflow's reading of
the body and writing of the answer), and a bare forward back to back and after `IDLE_S` asleep (what
an idle CPU adds to a request after a gap).

    .venv/bin/python -m benchmarks.bench_http            # both models (a few minutes on 2 cores)
    .venv/bin/python -m benchmarks.bench_http resnet18   # one
"""

from __future__ import annotations

import http.server
import os
import socketserver
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torchvision

from devicebench.config.workloads import InferConfig
from devicebench.host.cpu import cpu_model
from devicebench.run import scoring
from devicebench.workloads.loadgen import Predict
from devicebench.workloads.serving import BODIES, SAMPLES, drive, in_process, over_http

ROUNDS = 2
MODELS = {"resnet18": (3, 64, 64), "resnet50": (3, 224, 224)}  # small (acceptance's) and mid-size
SECONDS = 2.0  # LoadGen's least duration per test
QUERIES = 64  # and its fewest queries: a p99 over 64 is their slowest but one, said as such
THREADS = 1
CALLS = 60  # calls per figure of where_time_goes
IDLE_S = 0.05  # the gap before each call of the "after idle" forward


def logged(model: torch.nn.Module, shape: tuple[int, ...], folder: Path) -> tuple[str, str]:
    """(model URI, tracking URI): the model logged with an input example, in a store of its own."""
    import mlflow  # lazy: the in-process side never needs it
    import mlflow.pytorch

    tracking = f"sqlite:///{folder}/mlflow.db"
    mlflow.set_tracking_uri(tracking)
    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            model, name="m", input_example=torch.zeros(1, *shape).numpy(), serialization_format="pickle"
        )
    return info.model_uri, tracking


def figures(cfg: InferConfig, predict: Predict, via: str, workers: int, out: Path) -> dict[str, float]:
    served = drive(cfg, predict, via, workers, out)
    single, offline = served.outcomes["single_stream"], served.outcomes["offline"]
    return {"p90_s": single.p90_s, "p99_s": single.p99_s, "offline_per_s": offline.rate}


def bench(name: str, shape: tuple[int, ...], tmp: Path) -> dict[str, dict[str, float]]:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    xs = torch.randn(SAMPLES, *shape)
    uri, tracking = logged(model, shape, tmp)
    cfg = InferConfig(scenarios=("single_stream", "offline"), min_duration_s=SECONDS, min_queries=QUERIES)
    server = scoring.start(uri, 0, tracking)
    runs: dict[str, list[dict[str, float]]] = {"in_process": [], "http": [], "http_parquet": [], "parts": []}
    try:
        ways = {
            "in_process": (in_process(model, xs, torch.device("cpu"), None), 1),
            "http": (over_http(server.url, xs, server.log), 1),
            "http_parquet": (over_http(server.url, xs, server.log, "parquet"), 1),
        }
        for i in range(ROUNDS):
            for via, (predict, workers) in ways.items():
                folder = tmp / f"{name}-{via}-{i}"
                runs[via].append(figures(cfg, predict, via, workers, folder))
    finally:
        server.stop()
    runs["parts"].append(where_time_goes(model, xs, uri, tracking))
    return {via: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for via, rs in runs.items()}


class _Instant(http.server.BaseHTTPRequestHandler):
    """Reads the body and answers in one write (two writes would wait on Nagle and a delayed ACK)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def log_message(self, *args: object) -> None:
        pass


class _InstantServer(socketserver.ThreadingTCPServer):
    # the client's kept-alive connection holds its handler thread: never waited for at close
    daemon_threads, block_on_close = True, False


def _median_ms(call: Callable[[int], object], gap_s: float = 0.0) -> float:
    times = []
    for i in range(CALLS):
        time.sleep(gap_s)
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def where_time_goes(model: torch.nn.Module, xs: torch.Tensor, uri: str, tracking: str) -> dict[str, float]:
    """One request's parts, in ms (medians): the client, MLflow's handling, the model, the idle CPU."""
    import mlflow.pyfunc  # lazy, as in `logged`
    from mlflow.pyfunc.scoring_server import invocations

    with _InstantServer(("127.0.0.1", 0), _Instant) as instant:
        threading.Thread(target=instant.serve_forever, daemon=True).start()
        client = over_http(f"http://127.0.0.1:{instant.server_address[1]}", xs, None)
        client_ms = _median_ms(lambda i: client([i % len(xs)]))
        instant.shutdown()
    mlflow.set_tracking_uri(tracking)
    pyfunc = mlflow.pyfunc.load_model(uri)
    schema = pyfunc.metadata.get_input_schema()
    bodies = {name: make(xs) for name, make in BODIES.items()}
    arrays = [x.unsqueeze(0).numpy() for x in xs]

    def forward(i: int) -> None:
        with torch.inference_mode():
            model(xs[i % len(xs)].unsqueeze(0))

    return {
        "client": client_ms,
        **{
            f"invocations_{name}": _median_ms(
                lambda i, b=body: invocations(b.of([i % len(xs)]), b.content_type, pyfunc, schema)
            )
            for name, body in bodies.items()
        },
        "predict": _median_ms(lambda i: pyfunc.predict(arrays[i % len(xs)])),
        "forward": _median_ms(forward),
        "forward_after_idle": _median_ms(forward, IDLE_S),
    }


def main(argv: Sequence[str] = ()) -> int:
    """A figure for the note, not a target: always 0 unless it fails."""
    # one torch thread each way (the server inherits the environment): what differs is the way in,
    # and OpenMP's spinning against the other process on a shared host stays out of the figure
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    torch.set_num_threads(THREADS)
    names = list(argv) or list(MODELS)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load before {os.getloadavg()[0]:.2f}")
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for name in names:
        with tempfile.TemporaryDirectory(prefix="devicebench-http-bench-") as tmp:
            got = bench(name, MODELS[name], Path(tmp))
        ip = got["in_process"]
        shape = "x".join(map(str, MODELS[name]))
        for via, body in (("http", "JSON"), ("http_parquet", "Parquet")):
            http = got[via]
            print(
                f"{name} {shape}, HTTP with a {body} body: SingleStream p90 in-process "
                f"{ip['p90_s'] * 1e3:.2f} ms, HTTP {http['p90_s'] * 1e3:.2f} ms "
                f"({http['p90_s'] / ip['p90_s']:.2f}x); p99 {ip['p99_s'] * 1e3:.2f} / "
                f"{http['p99_s'] * 1e3:.2f} ms; Offline in-process {ip['offline_per_s']:.1f}/s, HTTP "
                f"{http['offline_per_s']:.1f}/s ({http['offline_per_s'] / ip['offline_per_s']:.2f}x)"
            )
        part = got["parts"]
        print(
            f"  one request's parts (medians of {CALLS}; load now {os.getloadavg()[0]:.2f}): client "
            f"against an instant server {part['client']:.2f} ms; predict {part['predict']:.2f} ms; "
            f"MLflow's invocations {part['invocations_json']:.2f} ms with a JSON body (MLflow's own "
            f"{part['invocations_json'] - part['predict']:.2f} ms), {part['invocations_parquet']:.2f} ms "
            f"with a Parquet one ({part['invocations_parquet'] - part['predict']:.2f} ms); a bare "
            f"forward {part['forward']:.2f} ms back to back, {part['forward_after_idle']:.2f} ms after "
            f"{IDLE_S * 1e3:.0f} ms idle"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
