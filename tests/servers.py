"""What tests share: PostgreSQL databases, the CLI's environment and runners, and (from testbed/, which
the benchmarks use too) the real `mlflow server`. No mocks, loopback only, bounded waits."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from testbed.mlflow_server import VENV_BIN as VENV_BIN
from testbed.mlflow_server import MlflowServer as MlflowServer
from testbed.mlflow_server import free_port as free_port
from testbed.mlflow_server import wait_healthy as wait_healthy

PG_ADMIN_URI = "postgresql://postgres@127.0.0.1:5432/test"


def pg_available() -> bool:
    """True when the machine's PostgreSQL answers on 127.0.0.1:5432."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", 5432), timeout=1):
        return True
    return False


@contextlib.contextmanager
def pg_database(prefix: str = "devicebench_test") -> Iterator[str]:
    """A throwaway PostgreSQL database (trust auth), dropped afterwards; yields its SQLAlchemy URI."""
    import psycopg2

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(PG_ADMIN_URI)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


# A GPU that exists on no host (not even an 8-GPU one): the "device unavailable" paths run everywhere,
# GPU hosts included, instead of skipping wherever CUDA exists. The message names the device either way.
ABSENT_GPU = "cuda:99"
ABSENT_GPU_SAYS = re.compile(
    r"device 'cuda:99' requested but torch \S+ finds (no CUDA device|\d+ CUDA device)"
)

# For tests of tracking, concurrency and faults, not of timing: measure in this process with no time
# floor, so a small matmul costs one interpreter instead of one per series. The isolated, time-based
# path is what test_matmul, test_timing, the demo test and `make bench` exercise.
QUICK_MATMUL = ("--min_time_s", "0", "--isolation", "none")


def environ_snapshot() -> dict[str, str]:
    """A copy of os.environ that a worker thread can take while pytest's main thread changes it (it
    sets PYTEST_CURRENT_TEST around every test): copying iterates the keys, then reads each, so a key
    removed in between raised KeyError, or the dict changed size mid-iteration (seen in test_bad_input's
    pool). A copy that raced is taken again."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)


def devicebench_env(tracking_uri: str, **extra: str) -> dict[str, str]:
    """Environment for a `devicebench` / `mlflow run` subprocess: the venv first on PATH, quiet, no .env."""
    base = environ_snapshot()
    env = {k: v for k, v in base.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env.update(
        MLFLOW_TRACKING_URI=tracking_uri,
        PATH=f"{VENV_BIN}{os.pathsep}{base.get('PATH', '')}",
        DEVICEBENCH_DOTENV="none",
        PYTHONUNBUFFERED="1",
        GIT_PYTHON_REFRESH="quiet",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    env.update(extra)
    return env


def run_cli(
    args: Sequence[str],
    env: dict[str, str],
    timeout_s: float = 300,
    cwd: Path | None = None,
    real: bool = False,
) -> subprocess.CompletedProcess:
    """Run `devicebench ...` and capture its output: by default a fork of this worker's warm zygote
    (tests/zygote.py, a process of its own without paying the imports again); `real=True` starts the
    venv's console script, for what only a fresh interpreter shows."""
    if not real:
        from zygote import shared

        return shared().run(list(args), env, cwd, timeout_s)
    return subprocess.run(
        [str(VENV_BIN / "devicebench"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


_TEMPLATE: list[Path] = []  # this process's migrated SQLite store, made on first use


def migrated_sqlite(db: Path) -> str:
    """`sqlite:///<db>`, a store already at MLflow's current schema: a copy of one this process migrated
    once. MLflow migrates a fresh SQLite store inside the first client that opens it (every Alembic
    revision, 3 s quiet and 8-11 s on a loaded 2-core host, all of it CPU); a test of something else paid
    that in each of its processes. Its Default experiment's artifacts point into `db`'s folder, as a
    store made there would. A test of the creation itself (the lock, the race, a half-migrated store)
    keeps a fresh path, never this."""
    import sqlite3

    if not _TEMPLATE:
        from mlflow.tracking import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="devicebench-migrated-"))
        atexit.register(shutil.rmtree, folder, True)
        MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments(max_results=1)
        _TEMPLATE.append(folder / "mlflow.db")
    if db.exists():
        raise FileExistsError(f"{db}: a migrated store is copied to a new path only")
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATE[0], db)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
            (str(db.parent / "mlruns" / "0"),),
        )
    return f"sqlite:///{db}"


def which(name: str) -> str | None:
    return shutil.which(name, path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def run_mlflow_project(
    entry: str,
    params: dict[str, object],
    env: dict[str, str],
    timeout_s: float = 300,
    experiment: str | None = None,
) -> subprocess.CompletedProcess:
    """`.venv/bin/mlflow run . -e <entry> --env-manager local -P k=v ...` from the repo root, as the README
    writes it for a new shell: the venv is NOT on PATH, so the MLproject's launcher (src/mlproject-python)
    must find the project's interpreter itself (a bare `python` there is one without torch)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [str(VENV_BIN / "mlflow"), "run", str(root), "-e", entry, "--env-manager", "local"]
    if experiment:
        cmd += ["--experiment-name", experiment]
    for k, v in params.items():
        cmd += ["-P", f"{k}={v}"]
    env = {**env, "PATH": without_venv(env.get("PATH", ""))}
    return subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=timeout_s)


def without_venv(path: str) -> str:
    """PATH as a new shell has it: without this project's .venv/bin (activate or `make` put it there)."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and Path(d).resolve() != VENV_BIN.resolve())


def runs_of(tracking_uri: str, experiment: str) -> list:
    """Every run of an experiment, newest first (a test helper; the report has its own paging reader)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return list(
        client.search_runs([exp.experiment_id], max_results=1000, order_by=["attributes.start_time DESC"])
    )


def one_error_line(stderr: str) -> str:
    """The CLI's contract for bad input: exactly one `devicebench: error:` line on stderr, no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("devicebench: error: ")
    return lines[0]


@contextlib.contextmanager
def fake_oci_metadata(doc: Callable[[], dict]) -> Iterator[str]:
    """A metadata service on 127.0.0.1 that, like OCI's v2, wants `Authorization: Bearer Oracle` and
    answers /opc/v2/instance/ with `doc()`; yields its URL (DEVICEBENCH_OCI_METADATA_URL)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != "Bearer Oracle" or self.path != "/opc/v2/instance/":
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps(doc()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/opc/v2/instance/"
    finally:
        server.shutdown()
        server.server_close()


def compared_runs(tracking_uri: str, report_run_id: str) -> list[dict]:
    """The runs a report run compared, from its `compared_runs.json`."""
    import json
    import tempfile

    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as d:
        path = MlflowClient(tracking_uri).download_artifacts(report_run_id, "compared_runs.json", d)
        return json.loads(Path(path).read_text())
