"""The compare report at scale: read 2,000 runs (~40 metrics each) from a local `mlflow server` and report.

The store is generated here with the run schema's tags, params and metrics, logged directly with
`MlflowClient.log_batch` (three requests a run) into a real `mlflow server` on SQLite; then the same code
the `compare` command runs reads, pairs and renders it. Target: <= 5 s for 2,000 runs. The figure is
printed with the time per 1,000 runs and the part spent reading. The matmul runs carry their per-size
points as flat keys, as the workload logs them: no request per run.

Each figure is the median of 3 rounds after a warm-up search, and each round is set beside the floor:
one stream of plain REST search pages for the same runs, with nothing done with them. That ratio is the
part devicebench owns; the absolute 5 s is the issue's target for the whole.

Measured here (2-core VM, 2026-11-24): 12.0 s before the flat keys and the JSON search (10.8 s reading,
664 history requests), 7.0 s after, then 5.8-8.8 s against a floor of 5.4-7.7 s while the report read
one stream per workload: the client keeps its connections alive, and the few it opened at once were
accepted by one of the server's two worker processes, which answered nearly everything (5.5-6.3 of
6.4 server CPU-s). Reading by workload x start time (four streams at a time, a new connection a page:
report/query.time_slices) spreads the pages over both workers: 4.9 s with 16 streams, 4.5 and 4.8 s
with 32, against a floor of 5.4-6.0 s (0.79-0.88x), of which reading 3.6-4.1 s and the four charts
~0.7 s. The server's
own work is the rest: MLflow's SqlAlchemyStore builds ~124,000 ORM rows for 2,000 runs and encodes
the pages with the pure Python JSON encoder, ~6.2 CPU-s of the host's two cores.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicebench.config.fields import SETTING, key_of
from devicebench.config.workloads import not_work
from devicebench.data import voc
from devicebench.schema import SCHEMA_VERSION, matmul_point_key

ROOT = Path(__file__).resolve().parents[1]
N_RUNS = 2000
TARGET_S = 5.0
ROUNDS = 3  # after a warm-up; the median round is printed
TARGET_FLOOR = 1.25  # read + pair + render within a quarter of what the server alone takes to answer
EXPERIMENT = "bench-compare"
# the project's server (docker/mlflow-server.sh, MLFLOW_WORKERS); MLflow's own default is 4
SERVER_WORKERS = 2
# The class names the real workloads log (the report reads them back as eval/acc/<class>, eval/iou/<class>).
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
VOC_CLASSES = list(voc.CLASSES)
HOSTS = {
    "cpu": {"host.hostname": "bench-a10", "host.cpu_model": "AMD EPYC 7J13", "host.gpu_name": "NVIDIA A10"},
    "cuda:0": {
        "host.hostname": "bench-a10",
        "host.cpu_model": "AMD EPYC 7J13",
        "host.gpu_name": "NVIDIA A10",
    },
}


@dataclass
class Spec:
    """One run to log, in the schema's terms (tags without the `devicebench.` prefix)."""

    workload: str
    device: str
    params: dict[str, str]
    metrics: dict[str, float]
    history: dict[str, dict[int, float]] = field(default_factory=dict)
    device_name: str = ""
    data: str = "synthetic"
    host: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"
    start_time: int = 0  # ms; 0 = now
    suite: str = ""
    extra_tags: dict[str, str] = field(default_factory=dict)

    def config_key(self) -> str:
        """The CLI's key, computed from the params as they are logged."""
        return key_of(self.workload, {k: v for k, v in self.params.items() if k not in not_work()})

    def work_key(self) -> str:
        """The config key without the setting fields, as a run logs it (config.fields.work_key)."""
        work = {k: v for k, v in self.params.items() if k not in not_work() and k not in SETTING}
        return key_of(self.workload, work)

    def tags(self) -> dict[str, str]:
        name = self.device_name or (
            self.host.get("host.cpu_model", "")
            if self.device == "cpu"
            else self.host.get("host.gpu_name", "")
        )
        t = {
            "workload": self.workload,
            "schema": str(SCHEMA_VERSION),
            "device": self.device.split(":")[0] if self.device != "cpu" else "cpu",
            "device.resolved": self.device,
            "device.name": name,
            "data": self.data,
            "config_key": self.config_key(),
            "work_key": self.work_key(),
            **self.host,
        }
        if self.suite:
            t["suite"] = self.suite
        out = {f"devicebench.{k}": v for k, v in t.items()}
        out.update(self.extra_tags)
        return out


def log_run(client: Any, experiment_id: str, spec: Spec) -> str:
    """Create, fill and end one run in three requests (tags ride on create_run)."""
    from mlflow.entities import Metric, Param

    start = spec.start_time or int(time.time() * 1000)
    run = client.create_run(
        experiment_id, start_time=start, tags=spec.tags(), run_name=f"{spec.workload}-{spec.device}"
    )
    rid = run.info.run_id
    metrics = [Metric(k, float(v), start, 0) for k, v in spec.metrics.items()]
    for key, hist in spec.history.items():
        metrics.extend(Metric(key, float(v), start, int(step)) for step, v in sorted(hist.items()))
    params = [Param(k, str(v)) for k, v in spec.params.items()]
    for i in range(0, max(len(metrics), len(params), 1), 1000):
        client.log_batch(rid, metrics=metrics[i : i + 1000], params=params[i : i + 100] if i == 0 else [])
    if len(params) > 100:
        for i in range(100, len(params), 100):
            client.log_batch(rid, params=params[i : i + 100])
    client.set_terminated(rid, spec.status, end_time=start + 1000)
    return rid


def log_runs(client: Any, experiment_id: str, specs: Iterable[Spec], workers: int = 4) -> list[str]:
    """Log many runs with a few concurrent requests (the server serialises SQLite writes anyway)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: log_run(client, experiment_id, s), specs))


# --------------------------------------------------------------------------------------------- the mix


def _noise(rng: random.Random, x: float, rel: float = 0.03) -> float:
    return x * math.exp(rng.gauss(0, rel))


def cifar_spec(rng: random.Random, device: str, width: int, batch: int, start: int, night: int) -> Spec:
    gpu = device != "cpu"
    train = 30 * width * (1 + 16 / batch) if not gpu else 1.5 * math.sqrt(width) * (1 + 256 / batch)
    train = _noise(rng, train)
    wait = train * (0.7 if gpu and batch >= 256 else 0.05)
    eval_s = train / 6
    acc = min(0.45 + 0.05 * width + rng.gauss(0, 0.01), 0.9)
    m = {
        "time/train_s": train,
        "time/eval_s": eval_s,
        "time/total_s": train + eval_s + 3,
        "time/data_wait_s": wait,
        "time/epoch_s": train / 2,
        "throughput/train_samples_per_s": 100000 / train,
        "throughput/eval_samples_per_s": 20000 / eval_s,
        "train/loss": 1.2,
        "train/epoch_loss": 1.1,
        "eval/accuracy": acc,
        "memory/peak_bytes": 2e8 * width * (1 + batch / 128),
        "memory/peak_rss_bytes": 1.5e9,
        **{f"eval/acc/{c}": acc + rng.gauss(0, 0.05) for c in CIFAR_CLASSES},
        **{f"system/metric_{i}": rng.random() for i in range(16)},
    }
    params = {
        "device": device,
        "epochs": "2",
        "batch_size": str(batch),
        "lr": "0.001",
        "momentum": "0.9",
        "seed": "0",
        "model": "tutorial",
        "width": str(width),
        "precision": "fp32",
        "loader": "dataloader",
        "num_workers": "2",
        "data": "synthetic",
    }
    return Spec("cifar", device, params, m, host=HOSTS[device], start_time=start, suite=f"nightly-{night}")


def unet_spec(rng: random.Random, device: str, batch: int, start: int, night: int) -> Spec:
    gpu = device != "cpu"
    train = _noise(rng, 400 if not gpu else 25 * (1 + 8 / batch))
    miou = 0.3 + rng.gauss(0, 0.01)
    m = {
        "time/train_s": train,
        "time/eval_s": train / 4,
        "time/total_s": train * 1.3,
        "time/data_wait_s": train * 0.1,
        "throughput/train_samples_per_s": 300 / train,
        "throughput/eval_samples_per_s": 100 / train,
        "train/loss": 0.9,
        "eval/miou": miou,
        "eval/dice": miou * 1.2,
        "eval/pixel_accuracy": 0.8,
        "memory/peak_bytes": 4e9,
        **{f"eval/iou/{c}": miou + rng.gauss(0, 0.05) for c in VOC_CLASSES},
        **{f"system/metric_{i}": rng.random() for i in range(9)},
    }
    params = {"device": device, "epochs": "1", "batch_size": str(batch), "image_size": "256", "seed": "0"}
    return Spec("unet", device, params, m, host=HOSTS[device], start_time=start, suite=f"nightly-{night}")


def matmul_spec(rng: random.Random, device: str, start: int, night: int) -> Spec:
    """A CPU-vs-GPU matmul sweep over three sizes, its points also as flat per-size keys
    (schema.matmul_point_key), as the workload logs them."""
    sizes = (1024, 2048, 4096)
    gpu = device != "cpu"
    hist: dict[str, dict[int, float]] = {}
    flat_keys: dict[str, float] = {}
    for backend in ("numpy", "torch"):
        for dtype in ("float64", "float32"):
            base = f"matmul/{backend}/{dtype}"
            for n in sizes:
                rate = (60 if dtype == "float64" else 120) * 1e9
                if gpu and backend == "torch":
                    rate = (400 if dtype == "float64" else 25000) * 1e9 * min(1.0, n / 4096)
                t = _noise(rng, 2 * n**3 / rate)
                hist.setdefault(f"{base}/time_s", {})[n] = t
                hist.setdefault(f"{base}/gflops", {})[n] = 2 * n**3 / t / 1e9
                hist.setdefault(f"{base}/time_p10_s", {})[n] = t * 0.98
                hist.setdefault(f"{base}/time_p90_s", {})[n] = t * 1.03
                hist.setdefault(f"{base}/rel_error", {})[n] = 1e-7 if dtype == "float32" else 1e-15
                if gpu and backend == "torch":
                    hist.setdefault(f"{base}/unsynced_time_s", {})[n] = 2e-5
                    flat_keys[matmul_point_key(backend, dtype, n, "unsynced_time_s")] = 2e-5
                flat_keys[matmul_point_key(backend, dtype, n, "time_s")] = t
                flat_keys[matmul_point_key(backend, dtype, n, "gflops")] = 2 * n**3 / t / 1e9
    params = {
        "device": device,
        "sizes": ",".join(map(str, sizes)),
        "dtypes": "float64,float32",
        "backends": "numpy,torch",
        "repeats": "5",
        "warmup": "1",
        "seed": "0",
    }
    return Spec(
        "matmul",
        device,
        params,
        {"time/total_s": _noise(rng, 20), **flat_keys},
        history=hist,
        data="random",
        host=HOSTS[device],
        start_time=start,
        suite=f"nightly-{night}",
    )


def generate(n_runs: int = N_RUNS, seed: int = 0, matmul_share: float = 0.1) -> list[Spec]:
    """A nightly-style store: a CIFAR width × batch grid, UNet batches and matmul sweeps on cpu and cuda:0,
    three repeats a night, as many nights as it takes to reach `n_runs`."""
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    specs: list[Spec] = []
    night = 0
    n_matmul = int(n_runs * matmul_share)
    while len(specs) < n_runs:
        start = now - (400 - night) * 86_400_000
        batch: list[Spec] = []
        for device in ("cpu", "cuda:0"):
            for rep in range(3):
                t = start + rep * 60_000
                for width in (1, 2, 4):
                    for bs in (4, 32, 128, 512):
                        batch.append(cifar_spec(rng, device, width, bs, t, night))
                for bs in (4, 16):
                    batch.append(unet_spec(rng, device, bs, t, night))
                if sum(s.workload == "matmul" for s in specs + batch) < n_matmul:
                    batch.append(matmul_spec(rng, device, t, night))
        specs.extend(batch)
        night += 1
    return specs[:n_runs]


# --------------------------------------------------------------------------------------------- bench


def _timed_report(uri: str, experiment: str, out: Path) -> tuple[float, int, float]:
    from mlflow.tracking import MlflowClient

    from devicebench.report.judge.judgement import judge
    from devicebench.report.model.comparison import compare
    from devicebench.report.read.options import Query
    from devicebench.report.read.query import read_runs
    from devicebench.report.render.files import write_report

    t0 = time.perf_counter()
    sel = read_runs(MlflowClient(uri), Query(experiments=(experiment,)))
    write_report(judge(compare(sel.runs, baseline="previous")), out, {"experiments": experiment})
    return time.perf_counter() - t0, len(sel.runs), sel.read_s


def bare_search_s(uri: str, experiment: str) -> float:
    """The floor: every run of the experiment in one stream of plain REST search pages, nothing else."""
    import requests

    got = requests.get(
        f"{uri}/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": experiment}, timeout=60
    )
    body: dict[str, Any] = {
        "experiment_ids": [got.json()["experiment"]["experiment_id"]],
        "max_results": 1000,
    }
    t0 = time.perf_counter()
    with requests.Session() as session:
        while True:
            page = session.post(f"{uri}/api/2.0/mlflow/runs/search", json=body, timeout=120).json()
            if not page.get("next_page_token"):
                return time.perf_counter() - t0
            body["page_token"] = page["next_page_token"]


def build_store(d: Path, n_runs: int = N_RUNS) -> tuple[Any, float]:
    """A server on a SQLite file filled with `n_runs` runs; returns (started server, seconds to fill).

    The runs are written through the embedded store into the server's own SQLite file while the server
    starts (the store is created first, so the two never migrate it at once): over HTTP the same
    log_batch calls take ~4x longer on a 2-core machine, and filling is not what this bench measures.
    """
    import threading

    from mlflow.tracking import MlflowClient

    from testbed.mlflow_server import MlflowServer

    uri = f"sqlite:///{d}/mlflow.db"
    writer = MlflowClient(uri)
    exp = writer.create_experiment(EXPERIMENT, artifact_location=str(d / "artifacts"))
    server = MlflowServer(uri, d / "artifacts", workers=SERVER_WORKERS)
    failure: list[BaseException] = []

    def start() -> None:
        try:
            server.start(timeout_s=180)
        except BaseException as e:  # reported after the fill
            failure.append(e)

    starter = threading.Thread(target=start)
    starter.start()
    t0 = time.perf_counter()
    log_runs(writer, exp, generate(n_runs), workers=1)
    fill_s = time.perf_counter() - t0
    starter.join()
    if failure:
        raise failure[0]
    return server, fill_s


def main(argv: Sequence[str] = ()) -> int:
    """Generate the store, then time read + report through the HTTP server; 0 when within the target."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_compare")
    parser.parse_args(list(argv))
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        server, fill_s = build_store(Path(tmp))
        try:
            bare_search_s(server.url, EXPERIMENT)  # warm-up: a nightly compare meets a running server
            rounds, floors = [], []
            for i in range(ROUNDS):  # alternated, so that both see the same machine
                rounds.append(_timed_report(server.url, EXPERIMENT, Path(tmp) / f"report{i}"))
                floors.append(bare_search_s(server.url, EXPERIMENT))
            total_s, n, read_s = sorted(rounds)[len(rounds) // 2]
            floor_s = statistics.median(floors)
        finally:
            server.stop()
    per_1000 = total_s / n * 1000
    print(
        f"compare: {n} runs read+reported in {total_s:.1f} s ({per_1000:.1f} s per 1000 runs, median of "
        f"{ROUNDS} after a warm-up) [target <= {TARGET_S:.0f} s]"
    )
    print(f"compare: of which reading {read_s:.1f} s; filling the store took {fill_s:.0f} s (not timed)")
    print(
        f"compare: {total_s / floor_s:.2f}x the server's own search of the same runs "
        f"(one stream of REST pages, nothing else: {floor_s:.1f} s) [target <= {TARGET_FLOOR:.2f}x]"
    )
    return 0 if total_s <= TARGET_S and total_s / floor_s <= TARGET_FLOOR else 1


def specs_for(workload: str, devices: Sequence[str], **kw: Any) -> list[Spec]:
    """Small helper for tests: one spec per device with default shapes."""
    rng = random.Random(1)
    out = []
    for dev in devices:
        if workload == "matmul":
            out.append(matmul_spec(rng, dev, kw.get("start", 0), 0))
        elif workload == "unet":
            out.append(unet_spec(rng, dev, kw.get("batch", 4), kw.get("start", 0), 0))
        else:
            out.append(cifar_spec(rng, dev, kw.get("width", 1), kw.get("batch", 4), kw.get("start", 0), 0))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
