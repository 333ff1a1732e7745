"""The tracking store, probed and prepared before any work: reachable, current schema, experiment there.

An unreachable store fails within `store_timeout_s` with its URI named, so it costs seconds, not a
training run. An HTTP store is probed with one plain request bounded by that timeout, a database store
with one query in a thread that is given up on after it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import os
import sqlite3
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from devicebench.config.settings import Settings
from devicebench.errors import StoreUnavailable, UsageError
from devicebench.tracking.locks import file_lock
from devicebench.tracking.protocol import one_line
from devicebench.util.redact import redact

SQLITE_CREATE_TIMEOUT_S = 120.0  # creating + migrating a fresh embedded store: seconds, more on a loaded host


# What a user who ran into SQLite's one-writer limit should use instead.
PARALLEL = "for parallel runs use a tracking server (make server, or docker compose with PostgreSQL)"


def _auth_header() -> dict[str, str]:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def _uri_credentials(uri: str) -> tuple[str, dict[str, str]]:
    """`uri` without its `user:password@`, and that pair as a Basic Authorization header. MLflow's client
    (requests) sends credentials written in the URI; urllib took `alice:pw@127.0.0.1` for a host name
    and called a running server "not reachable (Name or service not known)"."""
    parts = urllib.parse.urlsplit(uri)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return uri, {}
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    bare = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return bare, {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def _check_http_store(uri: str, timeout_s: float) -> None:
    bare, uri_auth = _uri_credentials(uri)
    url = bare.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    body = json.dumps({"max_results": 1}).encode()
    headers = {
        "Content-Type": "application/json",
        **uri_auth,
        **_auth_header(),
    }  # the settings win, as in MLflow
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s):
            return
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise StoreUnavailable(
                f"tracking server {redact(uri)} refused the credentials (HTTP {e.code}); "
                "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (e.g. in .env)"
            ) from None
        raise StoreUnavailable(
            f"tracking server {redact(uri)} answered HTTP {e.code} to a test request"
        ) from None
    except (OSError, ValueError, http.client.HTTPException) as e:  # InvalidURL: a space in the host
        reason = redact(str(getattr(e, "reason", e)))
        raise StoreUnavailable(
            f"tracking store {redact(uri)} is not reachable ({reason}); start it (make server) or fix MLFLOW_TRACKING_URI"
        ) from None


def _check_other_store(uri: str, timeout_s: float) -> None:
    """Database stores: a real query in a worker thread, so an unreachable host cannot hang us."""
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
        raise StoreUnavailable(f"tracking store {redact(uri)} did not answer within {timeout_s:.0f} s")
    if outcome[0] is not None:
        raise StoreUnavailable(f"tracking store {redact(uri)} is not usable: {one_line(outcome[0])}")


def check_store(settings: Settings, read_only: bool = False) -> None:
    """Fail within `store_timeout_s` with a line naming the URI when the store does not answer.

    `read_only`: the caller only reads (`compare --no-log`), so an existing SQLite store is queried as
    it is, without the lock file and the schema upgrade that need a writable folder."""
    _client_env_defaults(settings)
    uri = settings.tracking_uri
    if uri.startswith(("http://", "https://")):
        _check_http_store(uri, max(settings.store_timeout_s, 0.5))
    elif uri.startswith("sqlite:") and read_only:
        _check_other_store(uri, max(settings.store_timeout_s, SQLITE_CREATE_TIMEOUT_S))
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


def _half_migrated(path: Path) -> str | None:
    """What is left of an interrupted schema migration in an SQLite store, or None when there is none.

    Alembic migrates SQLite tables by copying them through `_alembic_tmp_<table>`; a migration that
    dies half-way leaves such a table behind and the store can never be upgraded again by MLflow.
    """
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
        f"the embedded SQLite store {redact(uri)} was left half-migrated by an interrupted schema "
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
    what = f"the embedded SQLite store {redact(uri)}"
    with file_lock(path.with_name(path.name + ".lock"), timeout_s, what, hint=PARALLEL):
        left = _half_migrated(path)
        if left:
            raise _half_migrated_error(uri, path, left)
        try:
            _check_other_store(uri, timeout_s)
        except StoreUnavailable as e:
            if any(m in str(e) for m in _MIGRATION_ERRORS):
                raise _half_migrated_error(uri, path, _half_migrated(path) or str(e)[-300:]) from None
            raise


def sqlite_busy_hint(uri: str, error: str) -> str | None:
    """For a locked embedded SQLite store, a sentence that says what to use instead; None otherwise.

    SQLite takes one writer at a time; a handful of parallel runs usually get through, more do not, and
    the fix is a tracking server, not a retry.
    """
    if not uri.startswith("sqlite:") or "locked" not in error.lower():
        return None
    return (
        f"the embedded SQLite store {redact(uri)} is locked by concurrent writers ({error[:200]}); {PARALLEL}"
    )


def store_full_hint(uri: str, error: str) -> str | None:
    """For a store whose disk is full, a sentence saying so (it was called "unreachable"); else None."""
    low = error.lower()
    if "database or disk is full" not in low and "no space left" not in low:
        return None
    return f"the tracking store {redact(uri)} is full (its disk has no space left)"


def run_gone_hint(uri: str, error: str) -> str | None:
    """For a store that no longer has the run (its database dropped or made anew mid-run), a sentence
    saying so: it was reported as "unreachable", blaming a server that answered."""
    if "RESOURCE_DOES_NOT_EXIST" not in error or "Run '" not in error:
        return None
    return f"the tracking store {redact(uri)} no longer has this run (was its database dropped or replaced?)"


def store_error_hint(uri: str, error: str) -> str | None:
    """What a store error means, in one sentence, where we know: a locked SQLite store, a full disk, a
    run the store lost."""
    return sqlite_busy_hint(uri, error) or store_full_hint(uri, error) or run_gone_hint(uri, error)


def configure_mlflow_client(settings: Settings) -> None:
    """Point MLflow at our store and make its HTTP client fail fast: our sender does the retrying."""
    _client_env_defaults(settings)
    mlflow.set_tracking_uri(settings.tracking_uri)


def _client_env_defaults(settings: Settings) -> None:
    """MLflow reads these from the environment when it uses them: on each request, and GitPython (which
    it imports on its first git lookup) when it is imported."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(max(settings.store_timeout_s, 1))))
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # our CLI prints its own line
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage pings from benchmark hosts
    # MLflow logs every database error with its traceback before raising it (12 tracebacks, 506 lines
    # for a store whose disk filled up mid-run); we report each one in one line, so it need not
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def ensure_experiment(settings: Settings, name: str | None = None) -> str:
    """The experiment's id, created if missing. A deleted experiment is an error, not a silent restore.

    Parallel launchers call this once before fanning out: a fresh SQLite store migrated by eight
    processes at once loses most of them.
    """
    name = name or settings.experiment
    client = MlflowClient(settings.tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
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


def given_experiment(settings: Settings, experiment_id: str) -> str:
    """`MLFLOW_EXPERIMENT_ID` (`mlflow run` and the suite set it) checked before a run is created in it:
    an id with no experiment behind it ended the command in MLflow's own words, exit 1."""
    client = MlflowClient(settings.tracking_uri)
    try:
        exp = client.get_experiment(experiment_id)
    except MlflowException as e:
        if e.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST"):
            raise
        exp = None
    if exp is None or exp.lifecycle_stage == "deleted":
        why = "is deleted" if exp is not None else "does not exist"
        raise UsageError(
            f"setting MLFLOW_EXPERIMENT_ID={experiment_id[:100]!r}: that experiment {why} in the tracking "
            f"store {redact(settings.tracking_uri)}; unset it (DEVICEBENCH_EXPERIMENT names one) or fix it"
        )
    return exp.experiment_id
