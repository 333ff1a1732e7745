"""The one MLflow layer: runs, tags, params, batched asynchronous metrics, artifacts, models, status.

Workloads never import mlflow; they receive a `Tracker`. This module is the only writer to the store, so
the rules that keep a measurement trustworthy live here once:

* the store is checked *before* any work, and an unreachable one fails fast with its URI named;
* metrics are queued and sent in batches by a background thread, never one round trip per step, so
  tracking does not slow the workload it measures;
* every operation is first written to a local journal (the spool). A server that blinks mid-run loses
  nothing (the sender retries); a server gone for good at the end leaves a complete spool that
  `devicebench sync` replays later, exactly once;
* any exception marks the run FAILED with a one-line `devicebench.error` tag; a signal marks it KILLED;
* a journal belongs to its live process (an OS lock, released when the process dies): `sync` replays
  only journals whose process is gone, and ends a run that died without an end record FAILED.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from devicebench.errors import Interrupted, SpooledError, StoreUnavailable, UsageError
from devicebench.schema import MAX_BATCH_METRICS, MAX_TAG_VALUE
from devicebench.schema import TAG_PREFIX as TAG_PREFIX  # workloads and the suite import it from here
from devicebench.settings import Settings, redact_uri

SQLITE_CREATE_TIMEOUT_S = 120.0  # creating + migrating a fresh embedded store (measured 2-15 s here)


class Tracker(Protocol):
    """What a workload may do with the store. Values are plain Python numbers (no tensors)."""

    run_id: str | None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def log_dict(self, obj: Any, artifact_file: str) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_figure(self, figure: Any, artifact_file: str) -> None: ...
    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_model(self, model: Any, name: str, input_example: Any) -> None: ...


def one_line(exc: BaseException) -> str:
    """An exception as one line: what a user reads on stderr and in the `devicebench.error` tag."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, UsageError):
        text = f"{type(exc).__name__}: {text}"
    return text[:MAX_TAG_VALUE]


@dataclass
class MemoryTracker:
    """Keeps everything in memory: for unit tests of workloads and for untracked baselines in benchmarks."""

    run_id: str | None = None
    metrics: list[tuple[str, float, int | None]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    keep: bool = True

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.keep:
            self.metrics.extend((k, float(v), step) for k, v in metrics.items())

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.tags.update({k: str(v) for k, v in tags.items()})

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.artifacts[artifact_file] = obj

    def log_text(self, text: str, artifact_file: str) -> None:
        self.artifacts[artifact_file] = text

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        self.artifacts[artifact_file] = figure

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        name = Path(local_path).name
        self.artifacts[f"{artifact_path}/{name}" if artifact_path else name] = Path(local_path)

    def log_model(self, model: Any, name: str, input_example: Any) -> None:
        self.models[name] = (model, input_example)

    def values(self, key: str) -> list[float]:
        """Every value logged under `key`, in order (a test helper)."""
        return [v for k, v, _ in self.metrics if k == key]


def null_tracker() -> MemoryTracker:
    """A tracker that records nothing: the untracked baseline for overhead measurements."""
    return MemoryTracker(keep=False)


# --------------------------------------------------------------------------------------------- store


def _auth_header() -> dict[str, str]:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        import base64

        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def _check_http_store(uri: str, timeout_s: float) -> None:
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    body = json.dumps({"max_results": 1}).encode()
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **_auth_header()}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s):
            return
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise StoreUnavailable(
                f"tracking server {redact_uri(uri)} refused the credentials (HTTP {e.code}); "
                "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (e.g. in .env)"
            ) from None
        raise StoreUnavailable(
            f"tracking server {redact_uri(uri)} answered HTTP {e.code} to a test request"
        ) from None
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise StoreUnavailable(
            f"tracking store {redact_uri(uri)} is not reachable ({reason}); start it (make server) or fix MLFLOW_TRACKING_URI"
        ) from None


def _check_other_store(uri: str, timeout_s: float) -> None:
    """Database stores: a real query in a worker thread, so an unreachable host cannot hang us."""
    from mlflow.tracking import MlflowClient

    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            MlflowClient(uri).search_experiments(max_results=1)
            outcome.append(None)
        except BaseException as e:  # reported below, with the URI
            outcome.append(e)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s)
    if not outcome:
        raise StoreUnavailable(f"tracking store {redact_uri(uri)} did not answer within {timeout_s:.0f} s")
    if outcome[0] is not None:
        raise StoreUnavailable(f"tracking store {redact_uri(uri)} is not usable: {one_line(outcome[0])}")


def check_store(settings: Settings) -> None:
    """Fail within `store_timeout_s` with a line naming the URI when the store does not answer."""
    _client_env_defaults(settings)
    uri = settings.tracking_uri
    if uri.startswith(("http://", "https://")):
        _check_http_store(uri, max(settings.store_timeout_s, 0.5))
    elif uri.startswith("sqlite:"):
        prepare_sqlite_store(uri, max(settings.store_timeout_s, SQLITE_CREATE_TIMEOUT_S))
    else:
        _check_other_store(uri, max(settings.store_timeout_s, 0.5))


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI; None for an in-memory store."""
    path = uri[len("sqlite://") :].split("?", 1)[0]
    if not path.startswith("/") or path == "/:memory:":
        return None
    return Path(path[1:])  # sqlite:///rel.db is relative, sqlite:////abs.db absolute


@contextmanager
def _file_lock(path: Path, timeout_s: float, what: str) -> Iterator[None]:
    """An exclusive inter-process lock (flock: the OS drops it when its holder dies), waited for up to
    `timeout_s`; StoreUnavailable naming `what` when it cannot be had."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise StoreUnavailable(f"{what}: cannot create the lock file {path} ({e.strerror})") from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreUnavailable(
                        f"{what}: another process held {path} for more than {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _half_migrated(path: Path) -> str | None:
    """What is left of an interrupted schema migration in an SQLite store, or None when there is none.

    Alembic migrates SQLite tables by copying them through `_alembic_tmp_<table>`; a migration that
    dies half-way leaves such a table behind and the store can never be upgraded again by MLflow.
    """
    import sqlite3

    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        left = sorted(n for n in names if n.startswith("_alembic_tmp_"))
        if not left:
            return None
        revision = runs = "?"
        with contextlib.suppress(sqlite3.Error):
            revision = ",".join(r[0] for r in con.execute("SELECT version_num FROM alembic_version"))
        with contextlib.suppress(sqlite3.Error):
            runs = str(con.execute("SELECT count(*) FROM runs").fetchone()[0])
        return f"alembic revision {revision}, leftover table(s) {', '.join(left)}, {runs} run(s) in it"
    except sqlite3.Error:
        return None
    finally:
        con.close()


_MIGRATION_ERRORS = ("duplicate column name", "_alembic_tmp_", "Online migration expected")


def _half_migrated_error(uri: str, path: Path, detail: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"the embedded SQLite store {redact_uri(uri)} was left half-migrated by an interrupted schema "
        f"upgrade ({detail}); MLflow cannot open or upgrade it: delete {path} if it holds no runs you need "
        "(a store broken while being created is empty), otherwise restore it from a backup"
    )


def prepare_sqlite_store(uri: str, timeout_s: float) -> None:
    """Create or upgrade an embedded SQLite store once, under an inter-process lock, before any run uses it.

    MLflow creates and migrates a fresh store inside the first client that opens it; eight processes
    doing that at once raced each other's migrations and left the store unusable for good
    (`duplicate column name: step`, `_alembic_tmp_tags`). Whoever holds `<db>.lock` does the work;
    the others wait and then find a current schema. A store already broken is named as such.
    """
    path = _sqlite_path(uri)
    if path is None:
        _check_other_store(uri, timeout_s)
        return
    what = f"the embedded SQLite store {redact_uri(uri)}"
    with _file_lock(path.with_name(path.name + ".lock"), timeout_s, what):
        left = _half_migrated(path)
        if left:
            raise _half_migrated_error(uri, path, left)
        try:
            _check_other_store(uri, timeout_s)
        except StoreUnavailable as e:
            if any(m in str(e) for m in _MIGRATION_ERRORS):
                raise _half_migrated_error(uri, path, _half_migrated(path) or str(e)[-300:]) from None
            raise


def configure_mlflow_client(settings: Settings) -> None:
    """Point MLflow at our store and make its HTTP client fail fast: our sender does the retrying."""
    _client_env_defaults(settings)
    import mlflow

    mlflow.set_tracking_uri(settings.tracking_uri)


def _client_env_defaults(settings: Settings) -> None:
    """MLflow reads these from the environment on each request; set before anything imports it."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(max(settings.store_timeout_s, 1))))
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # our CLI prints its own line
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage pings from benchmark hosts


def ensure_experiment(settings: Settings, name: str | None = None) -> str:
    """The experiment's id, created if missing. A deleted experiment is an error, not a silent restore.

    Parallel launchers call this once before fanning out: a fresh SQLite store migrated by eight
    processes at once loses most of them.
    """
    from mlflow.tracking import MlflowClient

    name = name or settings.experiment
    client = MlflowClient(settings.tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        from mlflow.exceptions import MlflowException

        try:
            return client.create_experiment(name)
        except MlflowException:  # created by a concurrent process between the two calls
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise UsageError(
            f"experiment {name!r} is deleted; restore it (mlflow experiments restore --experiment-id "
            f"{exp.experiment_id}) or choose another name with DEVICEBENCH_EXPERIMENT"
        )
    return exp.experiment_id


# --------------------------------------------------------------------------------------------- spool


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive flock on `path`, or None while another process holds it.

    flock is tied to the open file, not the path: a journal folder renamed under its owner keeps the
    lock, and the OS releases it the moment the owner dies, SIGKILL included.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for `sync` to name
    return fd


def spool_root(settings: Settings) -> Path:
    """The spool folder, created if missing; a UsageError naming DEVICEBENCH_SPOOL_DIR when it cannot be."""
    root = settings.spool_dir
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)  # journals hold URIs and credentials
        if not root.is_dir():
            raise NotADirectoryError(f"{root} is not a folder")
    except OSError as e:
        reason = e.strerror or str(e)
        raise UsageError(
            f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r}: cannot create the spool folder there ({reason}); "
            "point it at a writable folder"
        ) from None
    return root


class Journal:
    """The local record of one run's operations: written before sending, deleted once all are sent.

    `ops.jsonl` holds one operation a line with a sequence number; `sent` holds the highest sequence
    number the store acknowledged. Replaying from `sent + 1` makes `devicebench sync` exactly-once.
    `lock` is flocked by the process writing the run (its PID inside) for as long as it lives, so a
    `sync` running meanwhile leaves the journal alone.

    The journal exists before its run: `Journal.create` makes and locks a `.new-*` folder first, and
    `bind` renames it to the run id the store gave. A run that cannot be journalled is never created.
    """

    NEW_PREFIX = ".new-"

    def __init__(self, root: Path, run_id: str, tracking_uri: str) -> None:
        """A journal for a run that already exists (the folder is created and locked here)."""
        self._open(root / run_id)
        self.bind(run_id, tracking_uri)

    @classmethod
    def create(cls, settings: Settings) -> Journal:
        """A locked, unbound journal in the spool; UsageError naming DEVICEBENCH_SPOOL_DIR if impossible."""
        root = spool_root(settings)
        self = cls.__new__(cls)
        try:
            self._open(root / f"{cls.NEW_PREFIX}{os.getpid()}-{time.time_ns()}")
        except OSError as e:
            raise UsageError(
                f"setting DEVICEBENCH_SPOOL_DIR={str(root)!r}: cannot write the run's journal there "
                f"({e.strerror or e}); point it at a writable folder"
            ) from None
        return self

    def _open(self, folder: Path) -> None:
        self.dir = folder
        self.files = self.dir / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)  # run.json holds the tracking URI, credentials included where it has them
        lock = _try_lock(self.dir / "lock")
        if lock is None:
            raise BlockingIOError(f"the journal {self.dir} is in use by another process")
        self._lock_fd: int | None = lock
        # Line-buffered: every operation reaches the kernel as it is logged, so a SIGKILL loses none of
        # them (a write per operation costs microseconds; the sending is what is batched).
        self._ops = open(self.dir / "ops.jsonl", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._seq = self._count_lines()
        self._lock = threading.Lock()

    def bind(self, run_id: str, tracking_uri: str) -> None:
        """Name the journal after its run; from here on `sync` can replay it (once its owner is gone)."""
        target = self.dir.parent / run_id
        if self.dir != target:
            self.dir.rename(target)  # the open ops file and the flock follow the folder
            self.dir, self.files = target, target / "files"
        meta = self.dir / "run.json"
        if not meta.exists():
            _write_atomic(meta, json.dumps({"run_id": run_id, "tracking_uri": tracking_uri}))

    def _count_lines(self) -> int:
        path = self.dir / "ops.jsonl"
        return sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else 0

    def append(self, op: dict[str, Any]) -> int:
        with self._lock:
            self._seq += 1
            op = {"seq": self._seq, **op}
            self._ops.write(json.dumps(op) + "\n")
            return self._seq

    def flush(self) -> None:
        with self._lock:
            self._ops.flush()

    def acknowledge(self, seq: int) -> None:
        _write_atomic(self.dir / "sent", str(seq))

    def close(self, release: bool = True) -> None:
        """Close the journal; `release` hands it to `sync` (False while a sender thread may still write)."""
        with self._lock:
            self._ops.close()
        if release and self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        with self._lock:
            self._ops.close()
        # still locked while it goes: no `sync` can pick up a half-removed folder
        shutil.rmtree(self.dir, ignore_errors=True)
        self.close()

    @staticmethod
    def pending(run_dir: Path) -> tuple[int, list[dict[str, Any]]]:
        sent, ops, _ = Journal.read(run_dir)
        return sent, ops

    @staticmethod
    def read(run_dir: Path) -> tuple[int, list[dict[str, Any]], bool]:
        """(acknowledged sequence number, operations not yet acknowledged, whether an end record exists)."""
        sent_file = run_dir / "sent"
        sent = int(sent_file.read_text()) if sent_file.exists() else 0
        ops = []
        ended = False
        path = run_dir / "ops.jsonl"
        if path.exists():
            for line in path.open(encoding="utf-8"):
                if line.strip():
                    with contextlib.suppress(json.JSONDecodeError):  # a torn last line from a kill
                        op = json.loads(line)
                        ended = ended or op["op"] == "end"
                        if op["seq"] > sent:
                            ops.append(op)
        return sent, ops, ended


def send_ops(client: Any, run_id: str, ops: list[dict[str, Any]], journal_dir: Path) -> None:
    """Send journal operations, in order, to the store. Raises on the first failure (the caller retries)."""
    from mlflow.entities import Metric, Param, RunTag

    metrics: list[Metric] = []
    files: list[dict[str, Any]] = []

    def flush_metrics() -> None:
        for i in range(0, len(metrics), MAX_BATCH_METRICS):
            client.log_batch(run_id, metrics=metrics[i : i + MAX_BATCH_METRICS])
        metrics.clear()
        if files:  # uploads are independent of each other: send them side by side
            from concurrent.futures import ThreadPoolExecutor

            repo = _artifact_repo(client, run_id)
            with ThreadPoolExecutor(max_workers=min(4, len(files))) as pool:
                done = [
                    pool.submit(repo.log_artifact, str(journal_dir / f["path"]), f.get("artifact_path"))
                    for f in files
                ]
                for future in done:
                    future.result()
            files.clear()

    for op in ops:
        kind = op["op"]
        if kind == "metrics":
            metrics.extend(Metric(k, v, op["ts"], op["step"] or 0) for k, v in op["values"].items())
            continue
        if kind == "artifact":
            files.append(op)
            continue
        flush_metrics()
        if kind == "tags":
            items = [RunTag(k, v) for k, v in op["values"].items()]
            for i in range(0, len(items), 100):
                client.log_batch(run_id, tags=items[i : i + 100])
        elif kind == "params":
            existing = client.get_run(run_id).data.params
            items = [Param(k, v) for k, v in op["values"].items() if k not in existing]
            for i in range(0, len(items), 100):
                client.log_batch(run_id, params=items[i : i + 100])
        elif kind == "model":
            _log_saved_model(client, run_id, journal_dir / op["path"], op["name"])
        elif kind == "end":  # the time the run ended, not the time a later `devicebench sync` replayed it
            client.set_terminated(run_id, op["status"], end_time=op.get("ts"))
    flush_metrics()


_REPOS: dict[tuple[str, str], Any] = {}


def _artifact_repo(client: Any, run_id: str) -> Any:
    """The run's artifact repository, looked up once (MlflowClient.log_artifact re-reads the run each call)."""
    key = (client.tracking_uri, run_id)
    if key not in _REPOS:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        _REPOS[key] = get_artifact_repository(client.get_run(run_id).info.artifact_uri)
    return _REPOS[key]


def _model_already_logged(client: Any, run_id: str, name: str) -> bool:
    """Whether the run already has a READY logged model called `name`; unfinished ones are deleted.

    Replay must be exactly-once, and a `sync` killed after the upload but before it acknowledged the
    operation would otherwise log the model a second time. A PENDING or FAILED model of that name is
    what an interrupted upload leaves: it is removed so the run ends with exactly one.
    """
    from mlflow.entities import LoggedModelStatus

    experiment_id = client.get_run(run_id).info.experiment_id
    quoted = name.replace("'", "\\'")
    found = client.search_logged_models(
        experiment_ids=[experiment_id], filter_string=f"source_run_id = '{run_id}' AND name = '{quoted}'"
    )
    if any(m.status == LoggedModelStatus.READY for m in found):
        return True
    for m in found:
        client.delete_logged_model(m.model_id)
    return False


def _log_saved_model(client: Any, run_id: str, path: Path, name: str) -> None:
    """Log a model that was saved to the spool while the store was away, unless a replay already did."""
    import mlflow
    import mlflow.pytorch

    if _model_already_logged(client, run_id, name):
        return
    model = mlflow.pytorch.load_model(str(path))
    info = mlflow.models.Model.load(str(path))
    with mlflow.start_run(run_id=run_id), _quiet_mlflow():
        mlflow.pytorch.log_model(model, name=name, signature=info.signature, **_model_options())


# --------------------------------------------------------------------------------------------- tracker


class MlflowTracker:
    """A run in an MLflow store, written through a journal by one background sender thread."""

    def __init__(self, settings: Settings, run_id: str, journal: Journal | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.settings = settings
        self.run_id = run_id
        self.client = MlflowClient(settings.tracking_uri)
        if journal is None:
            journal = Journal(spool_root(settings), run_id, settings.tracking_uri)
        else:
            journal.bind(run_id, settings.tracking_uri)
        self.journal = journal
        self._pending: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._failed_since: float | None = None
        self.last_error: str | None = None
        self._system_monitor: Any = None
        self._sender = threading.Thread(target=self._send_loop, name="devicebench-tracker", daemon=True)
        self._sender.start()

    # -- the Tracker protocol -------------------------------------------------------------------------
    def _enqueue(self, op: dict[str, Any]) -> None:
        op["seq"] = self.journal.append(op)
        with self._cond:
            self._pending.append(op)
            if len(self._pending) >= MAX_BATCH_METRICS or op["op"] != "metrics":
                self._cond.notify()

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        values = {k: float(v) for k, v in metrics.items()}
        self._enqueue({"op": "metrics", "values": values, "step": step, "ts": int(time.time() * 1000)})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._enqueue({"op": "tags", "values": {k: str(v)[:MAX_TAG_VALUE] for k, v in tags.items()}})

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._enqueue({"op": "params", "values": {k: str(v) for k, v in params.items()}})

    def _stage(self, artifact_file: str) -> Path:
        path = self.journal.files / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _enqueue_file(self, staged: Path) -> None:
        rel = staged.relative_to(self.journal.files)
        parent = str(rel.parent) if str(rel.parent) != "." else None
        self._enqueue({"op": "artifact", "path": str(Path("files") / rel), "artifact_path": parent})

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        path = self._stage(artifact_file)
        if artifact_file.endswith((".yaml", ".yml")):
            import yaml

            path.write_text(yaml.safe_dump(obj, sort_keys=False))
        else:
            path.write_text(json.dumps(obj, indent=2, default=str))
        self._enqueue_file(path)

    def log_text(self, text: str, artifact_file: str) -> None:
        path = self._stage(artifact_file)
        path.write_text(text)
        self._enqueue_file(path)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        path = self._stage(artifact_file)
        figure.savefig(path, dpi=110, bbox_inches="tight")
        self._enqueue_file(path)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        src = Path(local_path)
        dest = self._stage(f"{artifact_path}/{src.name}" if artifact_path else src.name)
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)
        self._enqueue_file(dest)

    def log_model(self, model: Any, name: str, input_example: Any) -> None:
        """Log a torch model that accepts any batch size; spool it when the store is away."""
        model, example, signature = _portable_model(model, input_example)
        if self.drain(timeout_s=self.settings.final_flush_s):
            try:
                import mlflow
                import mlflow.pytorch

                with mlflow.start_run(run_id=self.run_id), _quiet_mlflow():
                    mlflow.pytorch.log_model(
                        model,
                        name=name,
                        signature=signature,
                        input_example=example,
                        **_model_options(),
                    )
                return
            except Exception as e:  # the store went away between drain and upload: spool it
                self.last_error = one_line(e)
        import mlflow.pytorch

        path = self._stage(f"models/{name}")
        shutil.rmtree(path, ignore_errors=True)
        with _quiet_mlflow():
            mlflow.pytorch.save_model(model, str(path), signature=signature, **_model_options())
        self._enqueue({"op": "model", "path": str(Path("files") / "models" / name), "name": name})

    def start_system_metrics(self, interval_s: float = 5.0) -> None:
        """MLflow's own CPU/memory/GPU (nvidia-ml-py) sampler, for runs that ask for it."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self._system_monitor = SystemMetricsMonitor(
            self.run_id, sampling_interval=interval_s, tracking_uri=self.settings.tracking_uri
        )
        self._system_monitor.start()

    # -- sending -------------------------------------------------------------------------------------
    def _send_loop(self) -> None:
        backoff = 0.5
        while True:
            with self._cond:
                if not self._pending and not self._closing:
                    self._cond.wait(self.settings.flush_interval_s)
                batch = list(self._pending)
                if not batch:
                    if self._closing:
                        return
                    continue
            self.journal.flush()
            try:
                send_ops(self.client, self.run_id, batch, self.journal.dir)
            except Exception as e:
                self.last_error = one_line(e)
                if self._failed_since is None:
                    self._failed_since = time.monotonic()
                if self._deadline is not None and time.monotonic() > self._deadline:
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.5
            self._failed_since = None
            with self._cond:
                del self._pending[: len(batch)]
                self._cond.notify_all()
            self.journal.acknowledge(batch[-1]["seq"])

    def drain(self, timeout_s: float) -> bool:
        """Wait until everything queued so far reached the store; False if it did not in time."""
        with self._cond:
            self._cond.notify()
            end = time.monotonic() + timeout_s
            while self._pending:
                left = end - time.monotonic()
                if left <= 0 or not self._sender.is_alive():
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def close(self, status: str, error: str | None = None) -> bool:
        """End the run; True when every operation reached the store, False when it was spooled."""
        if self._system_monitor is not None:
            with contextlib.suppress(Exception):  # a sampler failure must not hide the run's own status
                self._system_monitor.finish()
        if error:
            self.set_tags({"devicebench.error": error})
        self._enqueue({"op": "end", "status": status, "ts": int(time.time() * 1000)})
        self._deadline = time.monotonic() + self.settings.final_flush_s
        delivered = self.drain(self.settings.final_flush_s)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._sender.join(timeout=max(self.settings.store_timeout_s, 1.0) + 5)
        if delivered:
            self.journal.remove()
        else:  # a sender still inside a request could write after `sync` took over: keep the lock until exit
            self.journal.close(release=not self._sender.is_alive())
        return delivered


def _model_options() -> dict[str, Any]:
    """How every model is saved: pickled eager modules, their code carried along, requirements pinned.

    Pickle (not MLflow's graph export) keeps the batch dimension free. `code_paths` ships the
    devicebench package inside the model, so it loads where devicebench is not installed. Explicit
    requirements spare MLflow's inference of them, which starts a subprocess and took ~10 s a run.
    """
    import importlib.metadata

    import devicebench

    reqs = []
    for dist in ("torch", "torchvision", "numpy", "cloudpickle"):
        try:
            reqs.append(f"{dist}=={importlib.metadata.version(dist).split('+')[0]}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "serialization_format": "pickle",
        "code_paths": [str(Path(devicebench.__file__).resolve().parent)],
        "pip_requirements": reqs,
    }


@contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow warns on stderr while saving a pickled model; our stderr carries one line per outcome."""
    import logging
    import warnings

    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _portable_model(model: Any, input_example: Any) -> tuple[Any, Any, Any]:
    """A CPU copy of the model, a numpy example of batch >= 2 and a signature with a free batch dimension.

    MLflow's graph export specialises the batch dimension to the example's; pickled eager modules with a
    `-1` batch dimension in the signature accept any batch size.
    """
    import numpy as np
    import torch
    from mlflow.models import ModelSignature
    from mlflow.types import TensorSpec
    from mlflow.types.schema import Schema

    module = getattr(model, "_orig_mod", model)  # unwrap torch.compile
    module = copy.deepcopy(module).to("cpu").float().eval()
    module = module.to(memory_format=torch.contiguous_format)
    example = torch.as_tensor(input_example).detach().to("cpu").float()
    if example.shape[0] < 2:
        example = example.repeat(2, *([1] * (example.dim() - 1)))
    example = example[:2].contiguous()
    with torch.no_grad():
        out = module(example)
    in_spec = TensorSpec(np.dtype(np.float32), (-1, *example.shape[1:]))
    out_spec = TensorSpec(np.dtype(np.float32), (-1, *out.shape[1:]))
    signature = ModelSignature(inputs=Schema([in_spec]), outputs=Schema([out_spec]))
    return module, example.numpy(), signature


# --------------------------------------------------------------------------------------------- runs


_FINISHING = threading.Event()


def _install_signal_handlers() -> None:
    """SIGTERM (a scheduler stopping us) raises in the main thread so the run can end KILLED.

    A SIGTERM that arrives while the run is already ending is not raised again: the scheduler's grace
    period is best spent flushing the journal, and raising in the middle of `close()` would leave the
    run RUNNING with its last operations unsent. Ctrl-C stays Python's KeyboardInterrupt, which
    `run_context` ends KILLED too.
    """
    import signal

    def handler(signum: int, _frame: Any) -> None:
        if not _FINISHING.is_set():
            raise Interrupted(signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
    if sys.excepthook is not _quiet_peer_gone:
        _DEFAULT_EXCEPTHOOK[:] = [sys.excepthook]
        sys.excepthook = _quiet_peer_gone


_DEFAULT_EXCEPTHOOK: list[Any] = []


def _quiet_peer_gone(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """Drop the traceback of a multiprocessing fd-sharing thread whose peer went away; report the rest.

    DataLoader workers hand batches to the main process through `multiprocessing.resource_sharer`.
    A SIGTERM that lands while the main process is fetching one ends that handshake half-way, and the
    worker's sharing thread printed a 19-line ConnectionResetError (through `sys.excepthook`) after our
    one line. The workers are forked from here and inherit this hook; the main process handles its own
    side of the error.
    """
    origin = tb.tb_frame.f_code.co_filename if tb is not None else ""
    if origin.endswith("multiprocessing/resource_sharer.py") and issubclass(
        exc_type, (ConnectionError, EOFError)
    ):
        return
    (_DEFAULT_EXCEPTHOOK or [sys.__excepthook__])[0](exc_type, exc, tb)


@contextmanager
def run_context(
    settings: Settings,
    workload: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
    run_name: str | None = None,
    parent_run_id: str | None = None,
) -> Iterator[MlflowTracker]:
    """Start (or, under `mlflow run`, attach to) a run; end it FINISHED, FAILED or KILLED.

    The store is checked before anything else, so an unreachable server costs seconds, not a training run.
    """
    _install_signal_handlers()  # before the run exists: a SIGTERM after create_run must not leave it RUNNING
    # An HTTP store is probed with urllib before MLflow is imported: on a busy host that import alone
    # takes seconds, and an unreachable server should cost less than that.
    check_store(settings)
    configure_mlflow_client(settings)
    from mlflow.tracking import MlflowClient
    from mlflow.tracking.context.registry import resolve_tags

    client = MlflowClient(settings.tracking_uri)
    start_tags = {f"{TAG_PREFIX}workload": workload, **(tags or {})}
    if parent_run_id:
        start_tags["mlflow.parentRunId"] = parent_run_id
    run_id = os.environ.get("MLFLOW_RUN_ID")
    # The journal exists (and is locked by this process) before the run does: a run that could not be
    # journalled would have no local trace if the store went away or the process were killed.
    journal = Journal.create(settings)
    try:
        if run_id:
            client.set_tag(run_id, f"{TAG_PREFIX}workload", workload)
        else:
            experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or ensure_experiment(settings)
            with contextlib.redirect_stderr(sys.stderr):
                all_tags = resolve_tags(start_tags)
            run_id = client.create_run(experiment_id, run_name=run_name, tags=all_tags).info.run_id
    except BaseException as e:
        journal.remove()  # no run, nothing to replay
        hint = _sqlite_busy_hint(settings.tracking_uri, one_line(e))
        if hint:
            raise StoreUnavailable(hint) from None
        raise
    tracker = MlflowTracker(settings, run_id, journal)
    try:
        tracker.set_tags(start_tags)
        tracker.log_params(params)
        yield tracker
    except Interrupted as e:
        _finish(tracker, "KILLED", str(e))
        raise
    except KeyboardInterrupt:
        _finish(tracker, "KILLED", "interrupted by Ctrl-C (SIGINT)")
        raise
    except BaseException as e:
        _finish(tracker, "FAILED", one_line(e))
        raise
    else:
        if not _finish(tracker, "FINISHED", None):
            why = _sqlite_busy_hint(settings.tracking_uri, tracker.last_error or "")
            why = why or f"tracking store {redact_uri(settings.tracking_uri)} unreachable"
            raise SpooledError(
                f"{why} at the end of run {run_id}: "
                f"results spooled to {tracker.journal.dir}; replay with `devicebench sync`"
            )


def _sqlite_busy_hint(uri: str, error: str) -> str | None:
    """For a locked embedded SQLite store, a sentence that says what to use instead; None otherwise.

    SQLite takes one writer at a time; a handful of parallel runs usually get through, more do not, and
    the fix is a tracking server, not a retry.
    """
    if not uri.startswith("sqlite:") or "locked" not in error.lower():
        return None
    return (
        f"the embedded SQLite store {redact_uri(uri)} is locked by concurrent writers ({error[:200]}); "
        "for parallel runs use a tracking server (make server, or docker compose with PostgreSQL)"
    )


def _finish(tracker: MlflowTracker, status: str, error: str | None) -> bool:
    _FINISHING.set()
    try:
        delivered = tracker.close(status, error)
    finally:
        _FINISHING.clear()
    if not delivered and status != "FINISHED":
        print(
            f"devicebench: store unreachable, run {tracker.run_id} spooled to {tracker.journal.dir}",
            file=sys.stderr,
        )
    return delivered


DIED_WITHOUT_END = "process died (no end record)"


@dataclass
class SyncOutcome:
    """What `devicebench sync` did with the spool."""

    replayed: int = 0  # journals sent and removed
    pending: int = 0  # journals that could not be sent now (the store is still away)
    live: int = 0  # journals still held by a running process: left alone
    died: int = 0  # of `replayed`, runs whose process died without ending them: now FAILED


def _holder(lock_path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        return f"process {int(lock_path.read_text().split()[0])}"
    return "another process"


def _end_dead_run(client: Any, run_id: str, run_dir: Path) -> bool:
    """End a run whose process died without an end record: FAILED, at the time its journal was last
    written. A run the store already shows as ended (e.g. by `mlflow run`) keeps its status."""
    from mlflow.entities import RunTag

    if client.get_run(run_id).info.status != "RUNNING":
        return False
    ops = run_dir / "ops.jsonl"
    end_ms = int((ops.stat().st_mtime if ops.exists() else time.time()) * 1000)
    client.log_batch(run_id, tags=[RunTag(f"{TAG_PREFIX}error", DIED_WITHOUT_END)])
    client.set_terminated(run_id, "FAILED", end_time=end_ms)
    return True


def sync_spool(settings: Settings) -> SyncOutcome:
    """Replay every spooled run whose process is gone to its store, exactly once.

    A journal whose lock is held belongs to a run still going (or to another `sync`): it is skipped and
    said so, never replayed under its writer. A journal without an end record, whose process is gone,
    was killed (SIGKILL, power loss): it is replayed and its run ended FAILED, so nothing stays RUNNING.
    """
    from mlflow.tracking import MlflowClient

    configure_mlflow_client(settings)
    out = SyncOutcome()
    root = settings.spool_dir
    if not root.is_dir():
        return out
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            fd = _try_lock(run_dir / "lock")
        except OSError as e:
            print(f"devicebench: {run_dir} not replayed: cannot lock it ({e.strerror or e})", file=sys.stderr)
            out.pending += 1
            continue
        if fd is None:
            if (run_dir / "run.json").is_file():
                print(
                    f"devicebench: run {run_dir.name} skipped: its journal is held by live "
                    f"{_holder(run_dir / 'lock')} (a run still going, or another sync)",
                    file=sys.stderr,
                )
                out.live += 1
            continue
        try:
            if not (run_dir / "run.json").is_file():
                if run_dir.name.startswith(Journal.NEW_PREFIX):  # its process died before its run existed
                    shutil.rmtree(run_dir, ignore_errors=True)
                continue
            meta = json.loads((run_dir / "run.json").read_text())
            run_id = meta["run_id"]
            client = MlflowClient(meta["tracking_uri"])
            _, ops, ended = Journal.read(run_dir)
            try:
                import mlflow

                mlflow.set_tracking_uri(meta["tracking_uri"])
                for op in ops:  # one at a time so `sent` advances with each acknowledged operation
                    send_ops(client, run_id, [op], run_dir)
                    _write_atomic(run_dir / "sent", str(op["seq"]))
                died = not ended and _end_dead_run(client, run_id, run_dir)
            except Exception as e:
                print(f"devicebench: run {run_id} not replayed yet: {one_line(e)}", file=sys.stderr)
                out.pending += 1
                continue
            if died:
                print(
                    f"devicebench: run {run_id}: its process died without ending it; replayed and ended FAILED",
                    file=sys.stderr,
                )
                out.died += 1
            shutil.rmtree(run_dir, ignore_errors=True)
            out.replayed += 1
        finally:
            os.close(fd)
    return out
