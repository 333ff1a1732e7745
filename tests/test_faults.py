"""Faults injected for real: a tracking server stopped and started again under running jobs, a server gone
for good at the end of a run, SIGTERM and Ctrl-C mid-run, an allocation that cannot fit, four writers on one
embedded SQLite store.

A scheduled measurement logs to a server on another host; the server restarts, the network drops, the job
is stopped. These tests prove that nothing a run logged is lost or logged twice, and that every ending is a
status (FINISHED, FAILED, KILLED) plus one line, never a traceback.

Server starts cost ~25 s here, so the three server faults share one timeline (`outage`): one stop and one
start of a real `mlflow server` on the same SQLite store and port, with three jobs placed around it:

  up    a driver logs a point every 50 ms (restart test); `devicebench matmul` starts and is held at a
        local gate standing in for the OCI metadata service (gone-at-end test)
  down  `devicebench matmul` against the stopped server (down-before-run test); the held matmul is released
        and ends while the server is still down, so it spools
  up    the driver is told to finish; `devicebench sync` replays the spool, twice
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from own_tags import facts_of

from servers import QUICK_MATMUL, VENV_BIN, MlflowServer, devicebench_env, migrated_sqlite, run_cli, runs_of
from zygote import Forked, shared

# a server stopped and restarted under running commands, signals, many processes at once: `make test-e2e`
pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "fault_driver.py"
FAST = {  # small settings so each fault costs seconds (DESIGN: final flush 60 s, flush every 2 s)
    "DEVICEBENCH_FLUSH_INTERVAL_S": "0.2",
    "DEVICEBENCH_FINAL_FLUSH_S": "5",
    "DEVICEBENCH_STORE_TIMEOUT_S": "3",
    "DEVICEBENCH_OCI_METADATA_URL": "http://127.0.0.1:9/",  # stay on loopback, fail at once
    "DEVICEBENCH_OCI_TIMEOUT_S": "0.2",
    "OMP_NUM_THREADS": "1",
}
SMALL_MATMUL = ["matmul", "--sizes", "64,128", "--repeats", "2", *QUICK_MATMUL]


# --------------------------------------------------------------------------------------------- helpers


class Gate:
    """A local stand-in for the OCI metadata service that holds its answer until released.

    `devicebench <workload>` asks the metadata service once, after its run exists and before any work:
    pointing DEVICEBENCH_OCI_METADATA_URL here parks a real CLI run at a known point, with nothing patched.
    """

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                gate.arrived.set()
                gate.released.wait(120)
                body = json.dumps({"shape": "VM.Gate", "canonicalRegionName": "loopback"}).encode()
                with contextlib.suppress(OSError):  # the client may have been killed meanwhile
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:  # quiet test output
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def env(self) -> dict[str, str]:
        port = self.httpd.server_address[1]
        return {
            "DEVICEBENCH_OCI_METADATA_URL": f"http://127.0.0.1:{port}/",
            "DEVICEBENCH_OCI_TIMEOUT_S": "60",
        }

    def wait(self, proc: Forked, timeout_s: float = 45) -> None:
        """Until the run reaches the gate; fails early with its output if the process ends instead."""
        deadline = time.monotonic() + timeout_s
        while not self.arrived.wait(0.1):
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"exited {proc.returncode} before the gate:\n{out}\n{err}")
            if time.monotonic() > deadline:
                raise AssertionError("the run never reached the gate")

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def env_for(uri: str, **extra: str) -> dict[str, str]:
    """A CLI environment with the small FAST settings, `extra` winning."""
    return devicebench_env(uri, **{**FAST, **extra})


def error_lines(stderr: str) -> list[str]:
    """The `devicebench: error:` lines; also asserts that no traceback reached the user."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("devicebench: error: ")]


def read_int(path: Path) -> int:
    return int(path.read_text()) if path.exists() else 0


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def start_driver(workdir: Path, env: dict[str, str], sigint: bool = False) -> Forked:
    """The driver in its own process, forked from the warm zygote (tests/zygote.py: no interpreter
    importing MLflow first); `sigint` makes SIGINT raise KeyboardInterrupt in it, as Ctrl-C does (a shell
    starts background jobs with SIGINT ignored, and the child would inherit that)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return shared().start([str(workdir)], env, workdir, script=str(DRIVER), sigint=sigint)


def start_cli(args: list[str], env: dict[str, str], cwd: Path, sigint: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [str(VENV_BIN / "devicebench"), *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if sigint else None,
    )


def metric_counts(client: MlflowClient, run_id: str) -> Counter:
    """Points per metric key, from the full history (not the latest value)."""
    run = client.get_run(run_id)
    return Counter({k: len(client.get_metric_history(run_id, k)) for k in run.data.metrics})


def all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= all_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return out


# --------------------------------------------------------------------------------------------- the outage


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real server this module may stop and start again on the same SQLite store and port."""
    d = tmp_path_factory.mktemp("faults-server")
    srv = MlflowServer.in_folder(d)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def running_server(server: MlflowServer) -> MlflowServer:
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    return server


@dataclass
class Outage:
    """What happened around one stop/start of the server, for the tests below to judge."""

    server: MlflowServer
    down_at: float = 0.0
    up_at: float = 0.0
    # restart: the driver
    driver_dir: Path = Path()
    driver_rc: int | None = None
    driver_err: str = ""
    # down before the run
    early: subprocess.CompletedProcess | None = None
    early_s: float = 0.0
    baseline_s: float = 0.0  # a refused typo started at the same moment: what starting Python costs now
    early_experiment: str = ""
    early_spool: Path = Path()
    early_experiment_existed: bool = True
    # gone at the end, then sync
    spool: Path = Path()
    late_rc: int | None = None
    late_err: str = ""
    journal: dict[str, Any] = field(default_factory=dict)
    syncs: list[subprocess.CompletedProcess] = field(default_factory=list)
    counts_after_sync: list[Counter] = field(default_factory=list)
    late_experiment: str = ""


def _journal_snapshot(spool: Path) -> dict[str, Any]:
    """The spooled run as the sync will see it: its operations by kind and the staged files."""
    (run_dir,) = [p for p in spool.iterdir() if (p / "run.json").is_file()]
    ops = [json.loads(line) for line in (run_dir / "ops.jsonl").read_text().splitlines() if line.strip()]
    points = Counter()
    for op in ops:
        if op["op"] == "metrics":
            points.update(op["values"].keys())
    return {
        "dir": run_dir,
        "meta": json.loads((run_dir / "run.json").read_text()),
        "kinds": Counter(op["op"] for op in ops),
        "points": points,
        "params": {k: v for op in ops if op["op"] == "params" for k, v in op["values"].items()},
        "tags": {k: v for op in ops if op["op"] == "tags" for k, v in op["values"].items()},
        "ends": [op["status"] for op in ops if op["op"] == "end"],
        "files": {
            str(p.relative_to(run_dir / "files")) for p in (run_dir / "files").rglob("*") if p.is_file()
        },
        "sent": read_int(run_dir / "sent"),
        "copy": None,
    }


@pytest.fixture(scope="module")
def outage(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    """One stop/start of the server with three jobs around it (see the module docstring)."""
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    tmp = tmp_path_factory.mktemp("outage")
    tag = f"{os.getpid()}-{time.time_ns()}"
    o = Outage(server=server, driver_dir=tmp / "driver", spool=tmp / "spool-late")
    o.early_experiment, o.late_experiment = f"early-{tag}", f"late-{tag}"
    o.early_spool = tmp / "spool-early"
    gate = Gate()
    driver = late = None
    try:
        # up: the driver logs all the time; a real matmul run parks at the gate
        driver_env = env_for(
            server.url,
            DEVICEBENCH_EXPERIMENT=f"restart-{tag}",
            DEVICEBENCH_SPOOL_DIR=str(tmp / "spool-driver"),
            DEVICEBENCH_FINAL_FLUSH_S="30",
        )
        driver = start_driver(o.driver_dir, driver_env)
        wait_for(lambda: read_int(o.driver_dir / "logged") >= 20, 45, "the driver's first points")
        late_env = env_for(
            server.url,
            **gate.env,
            DEVICEBENCH_EXPERIMENT=o.late_experiment,
            DEVICEBENCH_SPOOL_DIR=str(o.spool),
        )
        late = shared().start(SMALL_MATMUL, late_env, tmp)
        gate.wait(late)

        # down
        server.stop()
        o.down_at = time.time()
        early_env = env_for(
            server.url,
            DEVICEBENCH_EXPERIMENT=o.early_experiment,
            DEVICEBENCH_SPOOL_DIR=str(o.early_spool),
        )
        t0 = time.monotonic()
        baseline = shared().start([*SMALL_MATMUL, "--device", "gpu"], early_env, tmp)
        o.early = run_cli(SMALL_MATMUL, early_env, cwd=tmp, timeout_s=60)
        o.early_s = time.monotonic() - t0
        baseline.communicate(timeout=60)
        o.baseline_s = time.monotonic() - t0
        # the server is down, so read its store directly: not even the experiment may exist
        o.early_experiment_existed = (
            MlflowClient(server.backend_uri).get_experiment_by_name(o.early_experiment) is not None
        )
        gate.released.set()  # the parked run does its work and ends while the server is away
        _, o.late_err = late.communicate(timeout=60)
        o.late_rc = late.returncode
        o.journal = _journal_snapshot(o.spool)
        o.journal["copy"] = tmp / "journal-copy"
        shutil.copytree(o.journal["dir"], o.journal["copy"])

        # up again, same store and port
        server.start()
        o.up_at = time.time()
        time.sleep(1.5)  # the driver logs on against the restarted server before it is told to finish
        (o.driver_dir / "finish").touch()
        _, o.driver_err = driver.communicate(timeout=60)
        o.driver_rc = driver.returncode

        # sync, twice
        sync_env = env_for(server.url, DEVICEBENCH_SPOOL_DIR=str(o.spool))
        client = MlflowClient(server.url)
        for _ in range(2):
            o.syncs.append(run_cli(["sync"], sync_env, cwd=tmp, timeout_s=60))
            o.counts_after_sync.append(metric_counts(client, o.journal["meta"]["run_id"]))
        yield o
    finally:
        gate.close()
        for proc in (driver, late):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(60, func_only=True)  # the shared timeline bounds itself
def test_server_down_before_the_run_fails_fast_naming_the_uri_and_does_nothing(outage: Outage) -> None:
    proc = outage.early
    assert proc is not None
    assert proc.returncode == 2, proc.stderr
    # within 10 s of what any refused command costs to start (imports take 3-15 s on a loaded 2-core host)
    assert outage.early_s < 10 + outage.baseline_s, f"took {outage.early_s:.1f} s ({outage.baseline_s:.1f} s)"
    print(
        f"\ndown before the run: refused in {outage.early_s:.1f} s (a refused typo: {outage.baseline_s:.1f} s)"
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == error_lines(proc.stderr) and len(lines) == 1, proc.stderr
    assert outage.server.url in lines[0]
    assert not outage.early_experiment_existed, "an experiment was created for a run that never started"
    assert not outage.early_spool.exists() or not any(outage.early_spool.iterdir()), "something was spooled"
    assert runs_of(outage.server.url, outage.early_experiment) == []


@pytest.mark.timeout(60, func_only=True)  # the shared timeline bounds itself
def test_server_restarted_mid_run_loses_no_metric(outage: Outage) -> None:
    assert outage.driver_rc == 0, outage.driver_err
    run_id = (outage.driver_dir / "run_id").read_text()
    logged = read_int(outage.driver_dir / "logged")
    client = MlflowClient(outage.server.url)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run_id, "fault/i"))
    assert steps == list(range(logged)), f"{logged} logged, {len(steps)} stored"
    times = [m.value for m in client.get_metric_history(run_id, "fault/t")]
    assert len(times) == logged
    during = sum(outage.down_at <= t <= outage.up_at for t in times)
    assert during >= 20, f"only {during} points fell in the outage; the fault was not exercised"
    assert "driver.txt" in all_artifacts(client, run_id)
    print(f"\nrestart: {logged} points logged, {during} during the outage, {logged - len(steps)} lost")


@pytest.mark.timeout(60, func_only=True)  # the shared timeline bounds itself
def test_server_gone_at_the_end_spools_and_sync_replays_exactly_once(outage: Outage) -> None:
    j = outage.journal
    assert outage.late_rc == 3, outage.late_err
    (line,) = error_lines(outage.late_err)
    assert "spooled to" in line and str(j["dir"]) in line and "devicebench sync" in line, line
    assert outage.server.url in line

    # the spool alone can replay the run: params, tags, metrics, artifacts and the status
    assert j["meta"] == {"run_id": j["dir"].name, "tracking_uri": outage.server.url}
    assert {"params", "tags", "metrics", "artifact", "end"} <= set(j["kinds"]), j["kinds"]
    assert j["ends"] == ["FINISHED"]
    assert {"host.json", "timings.json", "matmul.csv", "gflops.png"} <= j["files"]
    assert j["points"]["matmul/numpy/float64/gflops"] == 2  # one point per size

    first, second = outage.syncs
    assert first.returncode == 0 and "1 run(s) replayed, 0 still pending" in first.stdout, first
    assert second.returncode == 0 and "0 run(s) replayed" in second.stdout, second
    assert not j["dir"].exists(), "a replayed run leaves no spool behind"

    client = MlflowClient(outage.server.url)
    run_id = j["meta"]["run_id"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == j["params"]
    assert all(run.data.tags.get(k) == v for k, v in j["tags"].items())
    assert "devicebench.host.hostname" in facts_of(run)  # a fact: a param (schema.RUN_TAGS)
    assert outage.counts_after_sync[0] == j["points"], "a metric was lost or duplicated on replay"
    assert outage.counts_after_sync[1] == outage.counts_after_sync[0], "the second sync duplicated"
    assert {"host.json", "timings.json", "matmul.csv", "gflops.png"} <= all_artifacts(client, run_id)

    # a crash between sending and acknowledging replays the whole journal again: still no duplicate
    shutil.copytree(j["copy"], j["dir"])
    (j["dir"] / "sent").write_text("0")
    env = env_for(outage.server.url, DEVICEBENCH_SPOOL_DIR=str(outage.spool))
    again = run_cli(["sync"], env, timeout_s=60)
    assert again.returncode == 0 and "1 run(s) replayed" in again.stdout, again
    assert metric_counts(client, run_id) == j["points"]
    assert client.get_run(run_id).info.status == "FINISHED"
    total = sum(j["points"].values())
    print(
        f"\ngone at the end: {total} points spooled, {total - sum(metric_counts(client, run_id).values())} lost"
    )


# --------------------------------------------------------------------------------------------- sync vs live runs


@dataclass
class LiveAndDead:
    """Two drivers on one spool: `live` keeps logging through a `sync`; `dead` was SIGKILLed before it."""

    server: MlflowServer
    spool: Path
    live_dir: Path
    dead_dir: Path
    live_pid: int = 0
    sync: subprocess.CompletedProcess | None = None
    live_journal_after_sync: bool = False
    live_rc: int | None = None
    live_err: str = ""
    dead_logged: int = 0
    dead_attempted: int = 0


@pytest.fixture(scope="module")
def live_and_dead(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAndDead]:
    """Real processes: a driver SIGKILLed mid-run, another still logging, and `devicebench sync` between."""
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    tmp = tmp_path_factory.mktemp("live-and-dead")
    o = LiveAndDead(server=server, spool=tmp / "spool", live_dir=tmp / "live", dead_dir=tmp / "dead")
    env = env_for(
        server.url, DEVICEBENCH_EXPERIMENT=f"live-dead-{tmp.name}", DEVICEBENCH_SPOOL_DIR=str(o.spool)
    )
    live = start_driver(o.live_dir, env)
    dead = start_driver(o.dead_dir, env)
    try:

        def both() -> bool:
            for proc in (live, dead):
                if proc.poll() is not None:
                    raise AssertionError(f"a driver exited {proc.returncode} early: {proc.communicate()}")
            return min(read_int(o.dead_dir / "logged"), read_int(o.live_dir / "logged")) >= 10

        wait_for(both, 90, "both drivers' first points")
        dead.kill()  # SIGKILL: no handler runs, no end record is written
        dead.communicate(timeout=10)
        o.dead_logged, o.dead_attempted = read_int(o.dead_dir / "logged"), read_int(o.dead_dir / "attempted")
        o.live_pid = live.pid
        o.sync = run_cli(["sync"], env, cwd=tmp, timeout_s=60)
        o.live_journal_after_sync = (o.spool / (o.live_dir / "run_id").read_text() / "ops.jsonl").is_file()
        time.sleep(0.5)  # the live run logs on after the sync
        (o.live_dir / "finish").touch()
        _, o.live_err = live.communicate(timeout=60)
        o.live_rc = live.returncode
        yield o
    finally:
        for proc in (live, dead):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(60, func_only=True)  # the shared fixture bounds itself
def test_sync_leaves_a_live_runs_journal_alone_and_says_so(live_and_dead: LiveAndDead) -> None:
    o = live_and_dead
    assert o.sync is not None
    run_id = (o.live_dir / "run_id").read_text()
    assert o.live_journal_after_sync, f"sync took the journal of a live run: {o.sync.stdout}{o.sync.stderr}"
    assert "1 live run(s) skipped" in o.sync.stdout, o.sync.stdout
    assert f"run {run_id} skipped" in o.sync.stderr and f"process {o.live_pid}" in o.sync.stderr, (
        o.sync.stderr
    )
    # the live run itself never noticed: it ends FINISHED with every point, and its journal goes with it
    assert o.live_rc == 0, o.live_err
    assert "Traceback" not in o.live_err, o.live_err
    client = MlflowClient(o.server.url)
    assert client.get_run(run_id).info.status == "FINISHED"
    logged = read_int(o.live_dir / "logged")
    assert sorted(m.step for m in client.get_metric_history(run_id, "fault/i")) == list(range(logged))
    assert not (o.spool / run_id).exists(), "a delivered run leaves no spool behind"


@pytest.mark.timeout(60, func_only=True)  # the shared fixture bounds itself
def test_sync_ends_a_run_whose_process_died_failed_with_every_point(live_and_dead: LiveAndDead) -> None:
    o = live_and_dead
    assert o.sync is not None and o.sync.returncode == 0, o.sync
    run_id = (o.dead_dir / "run_id").read_text()
    assert "1 run(s) replayed (1 ended FAILED: process died)" in o.sync.stdout, o.sync.stdout
    assert f"run {run_id}: its process died" in o.sync.stderr, o.sync.stderr
    client = MlflowClient(o.server.url)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED", "a killed run may not stay RUNNING forever"
    assert run.data.tags["devicebench.error"] == "process died (no end record)"
    assert run.info.end_time is not None and run.info.end_time <= int(time.time() * 1000)
    steps = sorted(m.step for m in client.get_metric_history(run_id, "fault/i"))
    assert o.dead_logged <= len(steps) <= o.dead_attempted and steps == list(range(len(steps)))
    assert not (o.spool / run_id).exists(), "a replayed run leaves no spool behind"


# --------------------------------------------------------------------------------------------- signals


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_a_signal_mid_run_flushes_and_ends_killed(
    running_server: MlflowServer, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """The driver logs all the time: every point it logged before the signal is in the store."""
    env = env_for(
        running_server.url,
        DEVICEBENCH_EXPERIMENT=f"signal-{tmp_path.name}",
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
    )
    workdir = tmp_path / "driver"
    proc = start_driver(workdir, env, sigint=signum == signal.SIGINT)
    try:
        wait_for(lambda: read_int(workdir / "logged") >= 30, 45, "the driver's first points")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    run_id = (workdir / "run_id").read_text()
    client = MlflowClient(running_server.url)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert said in run.data.tags["devicebench.error"], run.data.tags["devicebench.error"]
    steps = sorted(m.step for m in client.get_metric_history(run_id, "fault/i"))
    logged, attempted = read_int(workdir / "logged"), read_int(workdir / "attempted")
    # a signal may land inside the last log call: that one point may or may not have been queued
    assert logged <= len(steps) <= attempted and steps == list(range(len(steps))), (logged, attempted)
    assert not (tmp_path / "spool" / run_id).exists(), "a delivered run leaves no spool behind"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_the_cli_ends_killed_with_the_signal_exit_code_and_one_line(
    running_server: MlflowServer, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """A real `devicebench matmul`, signalled while its run is open (parked at the gate)."""
    gate = Gate()
    name = f"cli-signal-{tmp_path.name}"
    env = env_for(
        running_server.url,
        **gate.env,
        DEVICEBENCH_EXPERIMENT=name,
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
    )
    proc = start_cli(SMALL_MATMUL, env, cwd=tmp_path, sigint=signum == signal.SIGINT)
    try:
        gate.wait(proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        gate.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == error_lines(err) and len(lines) == 1 and said in lines[0], err
    (run,) = runs_of(running_server.url, name)
    assert run.info.status == "KILLED"
    assert said in run.data.tags["devicebench.error"]
    assert run.data.params["sizes"] == "64,128", "what was logged before the signal is kept"


def test_a_terminated_epoch_keeps_every_loss_point_it_measured(one_torch_thread: None) -> None:
    """LossLog brings losses to the host in batches of 1024 steps; a SIGTERM after 7 logged steps must not drop those 7."""
    import torch

    from devicebench.errors import Interrupted
    from devicebench.tracking.protocol import MemoryTracker
    from devicebench.train import loop, records
    from devicebench.train.step import Learner, StepSettings

    def loader() -> Iterator[tuple[Any, Any]]:
        for _ in range(7):
            yield torch.randn(2, 3), torch.tensor([0, 1])
        raise Interrupted(signal.SIGTERM)  # where the signal handler raises: between two batches

    model = torch.nn.Linear(3, 2)
    tracker = MemoryTracker()
    with pytest.raises(Interrupted):
        loop.train_epoch(
            Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss()),
            loader(),
            StepSettings(torch.device("cpu")),
            loss_log=records.LossLog(tracker, every=1),
            first_step=0,
        )
    assert [step for key, _, step in tracker.metrics if key == "train/loss"] == list(range(1, 8))


def test_a_dataloader_worker_whose_peer_left_mid_handshake_prints_no_traceback(tmp_path: Path) -> None:
    """A DataLoader worker shares each batch through multiprocessing's resource sharer; a SIGTERM in the
    main process mid-handshake made the worker print a 19-line ConnectionResetError. Reproduced here
    without torch: a peer connects to the sharer and leaves with the challenge unread."""
    script = tmp_path / "peer_gone.py"
    script.write_text(
        "import os, socket, time\n"
        "from devicebench.tracking.signals import install_signal_handlers\n"
        "install_signal_handlers()  # what every run does first; forked workers inherit it\n"
        "from multiprocessing import resource_sharer\n"
        "resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))  # starts the sharer thread\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(resource_sharer._resource_sharer._address)\n"
        "time.sleep(0.3)\n"
        "s.close()\n"
        "time.sleep(0.5)\n"
        "raise SystemExit(0)\n"
    )
    # the sharer's folder in one of ours, removed after: a short path (a Unix socket's is at most 107
    # bytes, which tmp_path under a long $TMPDIR passes), and not left in $TMPDIR when the script ends
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        proc = subprocess.run(
            [str(VENV_BIN / "python"), str(script)],
            env=devicebench_env("sqlite:///unused.db", TMPDIR=tmp),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr


# --------------------------------------------------------------------------------------------- memory


@pytest.mark.timeout(60)
def test_out_of_host_memory_names_the_parameter_to_lower(tmp_path: Path) -> None:
    """60000² float64 is 28.8 GB per matrix: more than the host has, so the allocation fails at once
    (NumPy's MemoryError) instead of swapping."""
    import psutil

    need = 2 * 60000**2 * 8
    if psutil.virtual_memory().total + psutil.swap_memory().total > need:
        pytest.skip(f"this host could hold {need / 1e9:.0f} GB; the allocation would not fail")
    uri = migrated_sqlite(tmp_path / "m.db")
    env = env_for(uri, DEVICEBENCH_EXPERIMENT="oom", DEVICEBENCH_SPOOL_DIR=str(tmp_path / "s"))
    proc = run_cli(
        ["matmul", "--sizes", "60000", "--dtypes", "float64", "--backends", "numpy"],
        env,
        cwd=tmp_path,
        timeout_s=50,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line == error_lines(proc.stderr)[0]
    assert "out of host memory" in line and "lower --sizes" in line, line
    (run,) = runs_of(uri, "oom")
    assert run.info.status == "FAILED"
    assert "lower --sizes" in run.data.tags["devicebench.error"]


# --------------------------------------------------------------------------------------------- concurrency


@pytest.mark.timeout(120)  # ~20 s on an idle 2-core host; four interpreters starting at once on a loaded one
def test_four_runs_at_once_on_the_embedded_sqlite_store(tmp_path: Path) -> None:
    """DESIGN: whoever fans out creates the store and experiment first. Then four writers either all
    finish with every metric, or each that fails says so in one line that recommends a server."""
    from devicebench.config.settings import load_settings
    from devicebench.tracking.store import ensure_experiment

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    ensure_experiment(load_settings({"MLFLOW_TRACKING_URI": uri, "DEVICEBENCH_EXPERIMENT": "four"}))
    env = env_for(uri, DEVICEBENCH_EXPERIMENT="four", DEVICEBENCH_SPOOL_DIR=str(tmp_path / "s"))
    # four processes at once, forks of the warm zygote (tests/zygote.py) rather than four interpreters
    with ThreadPoolExecutor(4) as pool:
        procs = list(pool.map(lambda i: run_cli(SMALL_MATMUL, env, cwd=tmp_path, timeout_s=110), range(4)))
    ok = [p for p in procs if p.returncode == 0]
    for p in procs:
        if p.returncode != 0:
            lines = error_lines(p.stderr)
            assert len(lines) == 1 and "server" in lines[0], p.stderr
    runs = runs_of(uri, "four")
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == len(ok)
    client = MlflowClient(uri)
    counts = [metric_counts(client, r.info.run_id) for r in finished]
    assert all(c == counts[0] for c in counts), "a finished run lost metrics"
    print(f"\nsqlite, 4 writers at once: {len(ok)}/4 finished, {4 - len(ok)} refused with one line")


@pytest.mark.timeout(150)  # ~10 s on an idle 2-core host
def test_eight_runs_at_once_on_a_fresh_sqlite_store_leave_it_usable(tmp_path: Path) -> None:
    """Nobody created the store first: eight runs raced MLflow's schema migration and bricked the file for
    good (`duplicate column name: step`, `_alembic_tmp_tags` left behind). The first to take the store's
    lock creates it; the others wait, then find it current.

    The runs are fault drivers that end at once (`run_context` as the CLI uses it), eight processes
    forked at once from the warm zygote (tests/zygote.py): the race is the same (eight processes, eight
    connections, one fresh file), without eight interpreters importing MLflow first (~48 CPU-s here)."""
    import sqlite3

    db = tmp_path / "fresh.db"
    uri = f"sqlite:///{db}"
    env = env_for(
        uri,
        DEVICEBENCH_EXPERIMENT="eight",
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "s"),
        FAULT_DRIVER_MAX_S="0",
        MLFLOW_LOGGING_LEVEL="WARNING",  # as the CLI sets it: MLflow logs its migrations at INFO
    )

    def drive(i: int) -> subprocess.CompletedProcess:
        (tmp_path / f"d{i}").mkdir()
        return shared().run([str(tmp_path / f"d{i}")], env, tmp_path, timeout_s=140, script=str(DRIVER))

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(drive, range(8)))
    results = [(p, p.stdout, p.stderr) for p in procs]
    took = time.monotonic() - t0
    ok = [p for p, _, _ in results if p.returncode == 0]
    for p, _, err in results:
        assert "duplicate column" not in err and "alembic" not in err.lower(), err
        if p.returncode != 0:  # SQLite's one-writer limit may still refuse one: one line, naming a server
            lines = error_lines(err)
            assert p.returncode == 2 and len(lines) == 1 and "server" in lines[0], err
        else:
            assert error_lines(err) == [], err
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert not {t for t in tables if t.startswith("_alembic_tmp_")}, tables
    finished = [r for r in runs_of(uri, "eight") if r.info.status == "FINISHED"]
    assert len(finished) == len(ok) >= 1
    print(f"\nfresh sqlite, 8 runs at once: {len(ok)}/8 finished in {took:.1f} s, the store is usable")


def test_a_sigterm_after_the_command_returned_is_not_raised_into_shutdown() -> None:
    """torchrun stops a failed job's other ranks with SIGTERM; one that lands while rank 0 is already
    exiting (its line written, atexit running) printed a traceback under it. Once the command returned,
    SIGTERM is not raised; a new run in the same process is interruptible again."""
    from devicebench.errors import Interrupted
    from devicebench.tracking.signals import exiting, install_signal_handlers

    previous = signal.getsignal(signal.SIGTERM)
    try:
        install_signal_handlers()
        exiting()
        os.kill(os.getpid(), signal.SIGTERM)  # would raise Interrupted here
        time.sleep(0.05)
        install_signal_handlers()  # what run_context does first
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
