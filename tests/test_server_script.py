"""docker/mlflow-server.sh for real: the exact command line of the compose `mlflow` service (and of
`make server`), on a throwaway PostgreSQL database, on a free 127.0.0.1 port.

One server per fixture and module (a start costs ~20 s): a plain one on a database left one schema
revision behind (so the script's `mlflow db upgrade` has work to do), and one with basic auth."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_matmul import mlflow_run_matmul

from servers import QUICK_MATMUL, VENV_BIN, MlflowServer, devicebench_env, pg_available, pg_database, run_cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docker" / "mlflow-server.sh"
ADMIN_PASSWORD = "correct-horse-battery-staple"
# The database password in the auth server's URI (trust auth ignores it): it must be on no command line.
DB_PASSWORD = "db-canary-Zq7:pw"
needs_postgres = pytest.mark.skipif(
    not pg_available(), reason="PostgreSQL is not answering on 127.0.0.1:5432"
)


def script_env(**settings: str) -> dict[str, str]:
    """The caller's environment without MLflow/devicebench settings, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env.update(settings)
    return env


@dataclass
class ScriptServer(MlflowServer):
    """MlflowServer's start/stop/wait, but the command is the shared script, configured by env."""

    def command(self) -> list[str]:
        return ["bash", str(SCRIPT)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def start_script_server(tmp: Path, backend_uri: str, **settings: str) -> ScriptServer:
    """The script's server; MLFLOW_WORKERS as the caller says (2, compose's default, where several
    workers matter: the concurrency test), else 1 (each worker imports MLflow's server, ~7 CPU-s)."""
    server = ScriptServer(backend_uri, tmp / "artifacts", log_path=tmp / "server.log")
    server.env = script_env(
        MLFLOW_BACKEND_STORE_URI=backend_uri,
        MLFLOW_ARTIFACTS_DESTINATION=str(server.artifacts_dir),
        MLFLOW_HOST="127.0.0.1",
        MLFLOW_PORT=str(server.port),
        **{"MLFLOW_WORKERS": "1", **settings},
    )
    try:
        server.start(timeout_s=120)
    except Exception as e:
        raise RuntimeError(f"{e}\n--- server log ---\n{server.log()[-4000:]}") from e
    return server


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def schema_revisions() -> tuple[str, str]:
    """(head, the revision before it) of MLflow's tracking-store migrations."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision

    head = _get_latest_schema_revision()
    previous = ScriptDirectory.from_config(_get_alembic_config("")).get_revision(head).down_revision
    assert isinstance(previous, str), previous
    return head, previous


def migrate_to(uri: str, revision: str) -> None:
    """Bring an empty database to `revision`, the way MLflow creates a store, but stop short of head."""
    import sqlalchemy
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    engine = sqlalchemy.create_engine(uri)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old migrations use old SQLAlchemy API
            InitialBase.metadata.create_all(engine)
            config = _get_alembic_config(uri)
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
    finally:
        engine.dispose()


def pg_query(uri: str, sql: str) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(uri) as conn, conn.cursor() as cur:
        cur.execute(sql)
        rows = cur.fetchall()
    conn.close()
    return rows


@pytest.fixture(scope="module")
def old_schema_db() -> Iterator[tuple[str, str, str]]:
    """A database one schema revision behind MLflow's head: (uri, head, previous)."""
    if not pg_available():
        pytest.skip("PostgreSQL is not answering on 127.0.0.1:5432")
    head, previous = schema_revisions()
    with pg_database() as uri:
        migrate_to(uri, previous)
        yield uri, head, previous


@pytest.fixture(scope="module")
def pg_server(
    old_schema_db: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScriptServer]:
    # compose's two workers: the eight concurrent runs below reach both processes
    server = start_script_server(tmp_path_factory.mktemp("script-pg"), old_schema_db[0], MLFLOW_WORKERS="2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptServer]:
    if not pg_available():
        pytest.skip("PostgreSQL is not answering on 127.0.0.1:5432")
    with pg_database() as uri:
        server = start_script_server(
            tmp_path_factory.mktemp("script-auth"),
            uri.replace("postgres@", f"postgres:{urllib.parse.quote(DB_PASSWORD, safe='')}@"),
            MLFLOW_AUTH="true",
            MLFLOW_AUTH_ADMIN_USERNAME="admin",
            MLFLOW_AUTH_ADMIN_PASSWORD=ADMIN_PASSWORD,
            MLFLOW_FLASK_SERVER_SECRET_KEY="test-secret-key-not-for-production",
        )
        yield server
        server.stop()


# --- refusals: no database, no server start needed ------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": "password1234"}, "MLFLOW_AUTH_ADMIN_PASSWORD"),
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": ""}, "MLFLOW_AUTH_ADMIN_PASSWORD"),
        ({}, "MLFLOW_AUTH_ADMIN_PASSWORD"),
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": "short-pw"}, "at least 12"),
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD, "MLFLOW_FLASK_SERVER_SECRET_KEY": ""}, "SECRET_KEY"),
    ],
    ids=["documented-default", "empty", "unset", "too-short", "no-secret-key"],
)
def test_auth_refuses_to_start_without_a_real_password(
    tmp_path: Path, settings: dict[str, str], says: str
) -> None:
    base = {
        "MLFLOW_AUTH": "true",
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "k",
        "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{tmp_path / 'never.db'}",
    }
    env = script_env(**{**base, **settings})
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("mlflow-server: "), proc.stderr
    assert not (tmp_path / "never.db").exists(), "it touched the store before refusing"


@pytest.mark.parametrize(
    "settings", [{"MLFLOW_AUTH": "maybe"}, {"MLFLOW_PORT": "http"}, {"MLFLOW_WORKERS": "0"}]
)
def test_bad_settings_are_refused_with_one_line(tmp_path: Path, settings: dict[str, str]) -> None:
    env = script_env(MLFLOW_BACKEND_STORE_URI=f"sqlite:///{tmp_path / 'never.db'}", **settings)
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert next(iter(settings)) in proc.stderr


def test_beyond_loopback_without_auth_is_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    """Issue 40: MLFLOW_HOST=0.0.0.0 (or compose's MLFLOW_BIND, as MLFLOW_PUBLISHED_ON) with auth off
    served every run to anyone who reached the port; MLFLOW_ALLOW_UNAUTHENTICATED=true is the opt-out."""
    for exposed in (
        {"MLFLOW_HOST": "0.0.0.0"},
        {"MLFLOW_HOST": "0.0.0.0", "MLFLOW_PUBLISHED_ON": "10.0.0.5"},
        # Issue 56 #9: in the host's network a loopback MLFLOW_PUBLISHED_ON does not make 0.0.0.0 private.
        {"MLFLOW_HOST": "0.0.0.0", "MLFLOW_PUBLISHED_ON": "127.0.0.1"},
    ):
        env = script_env(MLFLOW_BACKEND_STORE_URI=f"sqlite:///{tmp_path / 'never.db'}", **exposed)
        proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "beyond loopback" in proc.stderr and "MLFLOW_ALLOW_UNAUTHENTICATED=true" in proc.stderr
        assert not (tmp_path / "never.db").exists(), "it touched the store before refusing"


def test_a_wildcard_in_a_network_of_its_own_is_judged_by_where_it_is_published(tmp_path: Path) -> None:
    """A bridged container: MLFLOW_HOST=0.0.0.0 reaches beyond the container only through its published
    port, so a loopback MLFLOW_PUBLISHED_ON starts it (compose's default) and a wider one is refused.
    A fresh network namespace (loopback only, its own /sys as a container mounts) stands in for it."""
    own_network = ["unshare", "--net", "--mount", "sh", "-c", 'mount -t sysfs sysfs /sys && exec "$@"', "-"]
    if subprocess.run([*own_network, "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --net is not allowed here (needs root or user namespaces)")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mlflow").write_text('#!/bin/sh\necho "mlflow $*"\n')
    (fake / "mlflow").chmod(0o755)
    for published, code in (("127.0.0.1", 0), ("0.0.0.0", 2)):
        env = script_env(
            MLFLOW_BACKEND_STORE_URI=f"file://{tmp_path}/mlruns",
            MLFLOW_HOST="0.0.0.0",
            MLFLOW_PUBLISHED_ON=published,
        )
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
        proc = subprocess.run(
            [*own_network, "bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == code, proc.stderr
        assert ("mlflow server" in proc.stdout) == (code == 0), proc.stdout + proc.stderr


def test_script_is_the_only_place_the_server_command_is_written() -> None:
    script = SCRIPT.read_text()
    assert script.count("exec mlflow server") == 1
    for flag in ("--serve-artifacts", "--artifacts-destination", "--allowed-hosts", "--workers"):
        assert flag in script
    for other in ("docker/server.Dockerfile", "docker/compose.yaml", "docker/docker.mk"):
        assert "mlflow server" not in (ROOT / other).read_text(), other
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# --- the PostgreSQL-backed server -----------------------------------------------------------------


@pytest.mark.postgres
@needs_postgres
def test_health_and_schema_upgraded_before_start(pg_server: ScriptServer, old_schema_db: tuple) -> None:
    uri, head, _previous = old_schema_db
    assert get(f"{pg_server.url}/health")[0] == 200
    assert pg_query(uri, "SELECT version_num FROM alembic_version") == [(head,)]
    tables = {r[0] for r in pg_query(uri, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"experiments", "runs", "metrics", "params", "tags", "latest_metrics"} <= tables
    # the database was at `previous`: the script's `mlflow db upgrade` moved it, before `mlflow server`
    log = pg_server.log()
    announced = log.find("mlflow-server: upgrading the tracking store schema")
    upgraded = log.find("Updating database tables")
    started = log.find("mlflow-server: listening on")
    assert 0 <= announced < upgraded < started, log[:2000]


@pytest.mark.postgres
@needs_postgres
@pytest.mark.parametrize("host", ["mlflow:5000", "mlflow", "localhost:5000", "127.0.0.1"])
def test_compose_service_name_is_an_accepted_host(pg_server: ScriptServer, host: str) -> None:
    status, body = get(f"{pg_server.url}/api/2.0/mlflow/experiments/search?max_results=1", {"Host": host})
    assert status == 200, body


@pytest.mark.postgres
@needs_postgres
def test_unknown_host_is_rejected(pg_server: ScriptServer) -> None:
    status, body = get(
        f"{pg_server.url}/api/2.0/mlflow/experiments/search?max_results=1", {"Host": "evil.example"}
    )
    assert status == 403, (status, body)


@pytest.mark.e2e
@pytest.mark.postgres
@needs_postgres
def test_eight_concurrent_runs_lose_no_metric_and_artifacts_come_back(
    pg_server: ScriptServer, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=pg_server.url)
    name = f"concurrency-{os.getpid()}-{time.time_ns()}"
    experiment_id = client.create_experiment(name)  # created once, before the fan-out
    env = devicebench_env(pg_server.url, DEVICEBENCH_EXPERIMENT=name, OMP_NUM_THREADS="1")
    # eight processes at once, each a fork of the warm zygote (tests/zygote.py): the same concurrency
    # against the server without eight interpreters importing torch and MLflow at the same moment
    args = ["matmul", "--sizes", "64", "--repeats", "2", *QUICK_MATMUL]
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda i: run_cli(args, env, cwd=tmp_path, timeout_s=240), range(8)))
    assert all(p.returncode == 0 for p in procs), "\n---\n".join((p.stdout + p.stderr)[-2000:] for p in procs)

    runs = client.search_runs([experiment_id], max_results=100)
    assert len(runs) == 8, [r.info.run_id for r in runs]
    assert {r.info.status for r in runs} == {"FINISHED"}
    # Every point of every metric, counted from the store through the server.
    per_run = []
    for run in runs:
        counts = Counter()
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            counts[key] = len(history)
        per_run.append(counts)
    total = sum(sum(c.values()) for c in per_run)
    reference = per_run[0]
    for run, counts in zip(runs, per_run, strict=True):
        assert counts == reference, f"run {run.info.run_id} differs: {counts ^ reference}"
    for backend in ("numpy", "torch"):
        for dtype in ("float64", "float32"):
            for what in ("gflops", "time_s"):
                assert reference[f"matmul/{backend}/{dtype}/{what}"] >= 1, sorted(reference)
    assert total == 8 * sum(reference.values()) and total >= 8 * 8

    # Artifacts are proxied by the server (mlflow-artifacts:/...) and come back through it.
    run = runs[0]
    assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri
    files = [f for f in client.list_artifacts(run.info.run_id) if not f.is_dir]
    assert files, "the run logged no artifact"
    target = files[0]
    local = Path(client.download_artifacts(run.info.run_id, target.path, str(tmp_path)))
    assert local.is_file() and local.stat().st_size == target.file_size > 0
    if local.suffix == ".json":
        json.loads(local.read_text())
    stored = list(pg_server.artifacts_dir.rglob(Path(target.path).name))
    assert any(p.read_bytes() == local.read_bytes() for p in stored), "artifact not in the destination"


@pytest.mark.e2e
@pytest.mark.postgres
@needs_postgres
def test_mlflow_run_matmul_logs_through_the_server(pg_server: ScriptServer) -> None:
    """The acceptance command, `mlflow run . -e matmul`, into the PostgreSQL-backed server compose runs."""
    mlflow_run_matmul(pg_server.url, f"mlflow-run-{os.getpid()}-{time.time_ns()}", quick=True)


# --- basic auth -----------------------------------------------------------------------------------


@pytest.mark.postgres
@needs_postgres
def test_basic_auth_requires_the_right_credentials(auth_server: ScriptServer) -> None:
    url = f"{auth_server.url}/api/2.0/mlflow/experiments/search?max_results=1"
    assert get(url)[0] == 401
    assert get(url, basic("admin", "wrong-password-123"))[0] == 401
    assert get(url, basic("nobody", ADMIN_PASSWORD))[0] == 401
    status, body = get(url, {**basic("admin", ADMIN_PASSWORD), "Host": "mlflow:5000"})
    assert status == 200, body
    assert get(f"{auth_server.url}/health")[0] == 200
    assert ADMIN_PASSWORD not in auth_server.log()


@pytest.mark.postgres
@needs_postgres
def test_auth_tables_live_beside_the_tracking_tables(auth_server: ScriptServer) -> None:
    uri = auth_server.env["MLFLOW_BACKEND_STORE_URI"]
    tables = {r[0] for r in pg_query(uri, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"users", "alembic_version_auth", "experiments", "alembic_version"} <= tables
    assert pg_query(uri, "SELECT username, is_admin FROM users") == [("admin", True)]


@pytest.mark.postgres
@needs_postgres
def test_devicebench_is_refused_with_wrong_credentials_then_logs_through_basic_auth(
    auth_server: ScriptServer,
) -> None:
    """Wrong credentials: one line naming the 401, exit 2 and no run; the right ones: a FINISHED run,
    the only one in its experiment."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    name = f"auth-{os.getpid()}-{time.time_ns()}"
    credentials = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD}
    matmul = ["matmul", "--sizes", "64", "--repeats", "2", *QUICK_MATMUL]
    wrong = devicebench_env(auth_server.url, DEVICEBENCH_EXPERIMENT=name, **credentials)
    wrong["MLFLOW_TRACKING_PASSWORD"] = "wrong-1234567"
    refused = run_cli(matmul, wrong, timeout_s=120)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert lines[0].startswith("devicebench: error: ") and "refused the credentials (HTTP 401)" in lines[0]
    proc = run_cli(matmul, devicebench_env(auth_server.url, DEVICEBENCH_EXPERIMENT=name, **credentials), 240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    os.environ.update(credentials)
    try:
        client = MlflowClient(tracking_uri=auth_server.url)
        experiment = client.get_experiment_by_name(name)
        runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL)
    finally:
        for key in credentials:
            os.environ.pop(key, None)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics


def server_processes(server: ScriptServer) -> dict[int, tuple[str, dict[str, str]]]:
    """pid -> (command line, environment) of every process in the server's process group."""
    assert server.proc is not None
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != server.proc.pid:
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            raw = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        env = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
        found[int(proc.name)] = (cmdline, env)
    return found


@pytest.mark.postgres
@needs_postgres
def test_the_database_password_is_on_no_command_line_and_its_files_are_private(
    auth_server: ScriptServer,
) -> None:
    procs = server_processes(auth_server)
    commands = [cmd for cmd, _ in procs.values()]
    assert any("mlflow server" in c or "mlflow.server" in c or "uvicorn" in c for c in commands), commands
    for cmd in commands:
        assert DB_PASSWORD not in cmd and urllib.parse.quote(DB_PASSWORD, safe="") not in cmd, cmd
    config = {env["MLFLOW_AUTH_CONFIG_PATH"] for _, env in procs.values() if "MLFLOW_AUTH_CONFIG_PATH" in env}
    assert len(config) == 1, config
    ini = Path(config.pop())
    assert ini.stat().st_mode & 0o777 == 0o600 and ini.parent.stat().st_mode & 0o777 == 0o700
    assert "database_uri = postgresql://postgres@127.0.0.1" in ini.read_text()
    pgpass = ini.parent / "pgpass"
    assert pgpass.stat().st_mode & 0o777 == 0o600
    assert "db-canary-Zq7\\:pw" in pgpass.read_text()  # where libpq finds it, ':' escaped as pgpass wants


@pytest.mark.postgres
@needs_postgres
def test_the_private_files_go_when_the_server_stops(auth_server: ScriptServer) -> None:
    """Last in this module: it stops the shared auth server (its fixture's stop is then a no-op)."""
    private = {
        Path(env["MLFLOW_AUTH_CONFIG_PATH"]).parent
        for _, env in server_processes(auth_server).values()
        if "MLFLOW_AUTH_CONFIG_PATH" in env
    }
    assert len(private) == 1 and private.copy().pop().is_dir()
    auth_server.stop(timeout_s=30)
    assert not private.pop().exists(), "basic_auth.ini and pgpass outlived the server"
