"""Environment and `.env` → one typed Settings object, read once at start-up.

Everything a deployment changes (where the store is, where data lives, how long to wait for a server)
is a setting, not a parameter: parameters describe the *work* and are logged; settings describe the
*place* and are not, so two hosts with different paths still produce comparable runs.
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
import threading
import urllib.parse
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values
from dotenv.variables import parse_variables

from devicebench.errors import StoreUnavailable, UsageError
from devicebench.schema import MAX_EXPERIMENT
from devicebench.util.fmt import fmt_count
from devicebench.util.redact import redact

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"  # MLflow 3's own default: the embedded SQLite store
OCI_METADATA_URL = "http://169.254.169.254/opc/v2/instance/"
MAX_SECONDS = 86_400.0  # no wait, timeout or interval is longer than a day; beyond, it is a typo
DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
MAX_DOTENV_VALUE = 64 * 1024  # characters of one `.env` value after `${...}` expansion
MAX_DOTENV_BYTES = 1024 * 1024  # a settings file is a few dozen lines
# Variables that steer the interpreter, the dynamic loader or a shell: from a `.env` (a file in whatever
# directory the command runs in) `PYTHONPATH=.` made every child import that directory's sitecustomize.py.
STEERING_PREFIXES = ("PYTHON", "LD_", "DYLD_")
STEERING_NAMES = frozenset({"PATH", "BASH_ENV", "ENV", "GCONV_PATH", "PERL5LIB", "PERL5OPT", "NODE_OPTIONS"})
HARMLESS_PYTHON = frozenset(
    {"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONFAULTHANDLER"}
)


@dataclass(frozen=True)
class Settings:
    tracking_uri: str
    experiment: str
    data_dir: Path
    spool_dir: Path
    oci_metadata_url: str
    oci_timeout_s: float
    store_timeout_s: float
    flush_interval_s: float
    final_flush_s: float
    tracking_uri_from_env: bool
    host_label: str = ""  # DEVICEBENCH_HOST: the machine's name in reports, instead of its hardware
    prices_path: str = ""  # DEVICEBENCH_PRICES: the user's price table instead of experiments/prices.yaml
    price_per_hour: float = 0.0  # DEVICEBENCH_PRICE_PER_HOUR: this host's price; 0 = look it up
    # DEVICEBENCH_CPU_SHAPE: the flex shape a CPU side off a CPU shape is priced as (empty: the default)
    cpu_shape: str = ""
    # DEVICEBENCH_PRICE_SHAPE: the GPU shape a GPU side is priced as where its host's shape is unknown
    price_shape: str = ""
    # DEVICEBENCH_PRICE_WHOLE_SHAPE=1: every run pays its host's whole shape (an instance running nothing else)
    whole_shape: bool = False
    ui_url: str = ""  # MLFLOW_UI_URL: where the printed links open the UI (a tunnel, a proxy); links.py
    ui_port: str = ""  # MLFLOW_UI_PORT: `make ui`'s port, for links on a store without a server


def _float_setting(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"setting {name}={raw!r} is not a number") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        # nan and inf parse, and a sender thread waiting 1e309 s crashes (it is not "store unreachable")
        raise UsageError(f"setting {name}={raw!r} must be a number of seconds from 0 to {MAX_SECONDS:.0f}")
    return value


def port_setting(env: Mapping[str, str], name: str) -> str:
    """A TCP port setting as text ("" when unset): digits from 1 to 65535, or one line naming it. A
    `.env` line `MLFLOW_UI_PORT=5977; touch x` reached MLflow's CLI as text, and Click's three lines."""
    raw = (env.get(name) or "").strip()
    if raw and not (raw.isascii() and raw.isdigit() and 0 < int(raw) < 65536):
        raise UsageError(f"setting {name}={raw!r} must be a TCP port, a number from 1 to 65535")
    return raw


def _http_url(env: Mapping[str, str], name: str, default: str) -> str:
    """An http(s) URL with a host, or the default when unset: `::::` failed only in the run, as a
    ValueError from urllib."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        parts = urllib.parse.urlsplit(raw)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            f"setting {name}={redact(raw)[:200]!r} is not an http:// or https:// URL with a host"
        )
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A yes/no setting: 1/true/yes or 0/false/no (empty: no); anything else is refused by name."""
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise UsageError(f"setting {name}={raw!r} is not allowed; allowed: 1, true, yes, 0, false, no")


def _price(env: Mapping[str, str], name: str) -> float:
    """An hourly price: a finite number > 0, or empty for "not set" (0 would make GFLOP per dollar
    infinite, and a copied .env.example leaves it empty)."""
    raw = env.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"setting {name}={raw!r} is not a price; expected a number > 0 (USD per hour), "
            "or empty to use the price table"
        )
    return value


def load_dotenv_file(env: Mapping[str, str] | None = None) -> Path | None:
    """Load `.env` (or `$DEVICEBENCH_DOTENV`, `none` to skip) into os.environ without overriding it.

    Secrets such as MLFLOW_TRACKING_PASSWORD must reach MLflow's own client, which reads os.environ,
    so the file is merged into the process environment rather than kept aside. Empty values are
    skipped: a copied .env.example must behave like no setting at all.
    """
    env = os.environ if env is None else env
    choice = env.get("DEVICEBENCH_DOTENV", "").strip()
    if choice.lower() == "none":
        return None
    path = Path(choice) if choice else Path.cwd() / ".env"
    if choice and not path.is_file():
        raise UsageError(f"setting DEVICEBENCH_DOTENV={choice!r}: no such file")
    if path.is_file():
        for key, value in _dotenv_values(path).items():
            # Empty lines in a copied .env.example mean "unset", not "set to the empty string".
            if value and key not in os.environ:
                os.environ[key] = value
        return path
    return None


def _dotenv_values(path: Path) -> dict[str, str | None]:
    """`path`'s variables, `${...}` expanded as python-dotenv does (the environment first, then the
    file's earlier lines), each value at most MAX_DOTENV_VALUE characters, no variable that steers the
    interpreter. Expanded by us, not by python-dotenv: it has no cap, and a 446-byte file whose lines
    expand each other cost 6.2 GB and 30 s before exec failed with E2BIG."""
    try:
        size = path.stat().st_size
        if size > MAX_DOTENV_BYTES:
            raise UsageError(
                f"settings file {path}: {fmt_count(size)} bytes; a settings file is at most "
                f"{fmt_count(MAX_DOTENV_BYTES)} bytes; fix it, or set DEVICEBENCH_DOTENV=none"
            )
        raw = dotenv_values(path, interpolate=False)
    except (UnicodeDecodeError, ValueError, OSError) as e:  # a binary or unreadable file
        why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else getattr(e, "strerror", None) or e
        raise UsageError(
            f"settings file {path}: cannot be read ({why}); fix it, or set DEVICEBENCH_DOTENV=none"
        ) from None
    values: dict[str, str | None] = {}
    env = ChainMap(os.environ, values)  # the environment wins, as in python-dotenv without override
    for key, value in raw.items():
        if value is not None:
            atoms = [atom.resolve(env) for atom in parse_variables(value)]
            size = sum(len(a) for a in atoms)
            if size > MAX_DOTENV_VALUE:
                raise UsageError(
                    f"settings file {path}: {key} is {fmt_count(size)} characters once expanded; "
                    f"a setting is at most {fmt_count(MAX_DOTENV_VALUE)}"
                )
            value = "".join(atoms)
        if value and _steers(key) and key not in os.environ:  # set here, it would take effect
            raise UsageError(
                f"settings file {path}: {key} steers the interpreter or the loader and is not taken from "
                "a settings file; remove it, or set it in the environment if you mean it"
            )
        values[key] = value
    return values


def _steers(key: str) -> bool:
    if key in HARMLESS_PYTHON:
        return False
    return key in STEERING_NAMES or key.startswith(STEERING_PREFIXES)


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from `env` (default: os.environ after merging `.env`)."""
    if env is None:
        load_dotenv_file()
        env = os.environ
    state_home = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    uri = env.get("MLFLOW_TRACKING_URI", "").strip()
    experiment = (
        env.get("DEVICEBENCH_EXPERIMENT") or env.get("MLFLOW_EXPERIMENT_NAME") or "devicebench"
    ).strip()
    if not experiment:  # `'   '`: MLflow refused the name '' only once a run was under way
        name = "DEVICEBENCH_EXPERIMENT" if env.get("DEVICEBENCH_EXPERIMENT") else "MLFLOW_EXPERIMENT_NAME"
        raise UsageError(f"setting {name} is blank; name an experiment, or leave it unset for 'devicebench'")
    if len(experiment) > MAX_EXPERIMENT:
        raise UsageError(
            f"setting DEVICEBENCH_EXPERIMENT is {len(experiment):,} characters; MLflow allows {MAX_EXPERIMENT}"
        )
    if uri:
        check_tracking_uri(uri)
    return Settings(
        tracking_uri=uri or DEFAULT_TRACKING_URI,
        tracking_uri_from_env=bool(uri),
        experiment=experiment,
        data_dir=Path(env.get("DEVICEBENCH_DATA_DIR") or "data").expanduser(),
        spool_dir=Path(env.get("DEVICEBENCH_SPOOL_DIR") or state_home / "devicebench" / "spool").expanduser(),
        oci_metadata_url=_http_url(env, "DEVICEBENCH_OCI_METADATA_URL", OCI_METADATA_URL),
        oci_timeout_s=_float_setting(env, "DEVICEBENCH_OCI_TIMEOUT_S", 0.5),
        store_timeout_s=_float_setting(env, "DEVICEBENCH_STORE_TIMEOUT_S", 10.0),
        flush_interval_s=_float_setting(env, "DEVICEBENCH_FLUSH_INTERVAL_S", 2.0),
        final_flush_s=_float_setting(env, "DEVICEBENCH_FINAL_FLUSH_S", 60.0),
        host_label=(env.get("DEVICEBENCH_HOST") or "").strip(),
        prices_path=(env.get("DEVICEBENCH_PRICES") or "").strip(),
        price_per_hour=_price(env, "DEVICEBENCH_PRICE_PER_HOUR"),
        cpu_shape=(env.get("DEVICEBENCH_CPU_SHAPE") or "").strip(),
        price_shape=(env.get("DEVICEBENCH_PRICE_SHAPE") or "").strip(),
        whole_shape=_flag(env, "DEVICEBENCH_PRICE_WHOLE_SHAPE"),
        ui_url=(env.get("MLFLOW_UI_URL") or "").strip(),
        ui_port=port_setting(env, "MLFLOW_UI_PORT"),
    )


def check_tracking_uri(uri: str) -> None:
    """Refuse a tracking URI that cannot be a store, in one line, before anything opens it.

    `http://[::1` raised a bare ValueError from deep in a client. An in-memory SQLite store is a new,
    empty database in every process and every connection: MLflow printed two tracebacks creating its
    schema in one, and a run there (or its `sync`, or `compare`) could never be read again."""
    try:
        parts = urllib.parse.urlsplit(uri)
        _ = parts.port  # parses the port: `host:port` with a bad port raises here
    except ValueError as e:
        raise UsageError(f"setting MLFLOW_TRACKING_URI={redact(uri)!r} is not a valid URI ({e})") from None
    if parts.scheme.split("+", 1)[0].lower() == "sqlite":
        path = uri.split("?", 1)[0].removeprefix(parts.scheme + ":").removeprefix("//")
        if path in ("", "/", "/:memory:", ":memory:") or "mode=memory" in uri:
            raise UsageError(
                f"setting MLFLOW_TRACKING_URI={redact(uri)!r} is an in-memory SQLite store, which keeps no "
                "run past its process; use a file (sqlite:///mlflow.db) or a tracking server"
            )


def preflight_store(settings: Settings, read_only: bool = False) -> None:
    """Refuse in well under a second a store that cannot work, before MLflow is asked to open it.

    MLflow retries a database engine it cannot create 15 times with growing sleeps, printing a warning
    each time: an unresolvable PostgreSQL host or an SQLite file in a directory nobody can write took
    25-108 s and 25-37 lines before our one line. What can be known without MLflow is checked here: the
    database host resolves and accepts a connection; the SQLite file (or the directory it would be
    created in) is writable. Everything else (credentials, schema) is still the store probe's to judge.
    `read_only` (`compare --no-log`): an SQLite file must exist and be readable, not writable.
    """
    uri = settings.tracking_uri
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme == "sqlite" and read_only:
        _preflight_sqlite_readable(uri)
    elif scheme == "sqlite":
        _preflight_sqlite(uri)
    elif scheme in DB_PORTS:
        _preflight_database(uri, DB_PORTS[scheme], max(settings.store_timeout_s, 0.5))


def _sqlite_file(uri: str) -> Path | None:
    raw = uri.split("?", 1)[0].removeprefix("sqlite:").removeprefix("//")
    if raw in ("", "/", "/:memory:"):
        return None
    return Path(raw[1:] if raw.startswith("/") else raw)  # sqlite:///rel.db is relative, ////abs absolute


def _preflight_sqlite_readable(uri: str) -> None:
    """A store that is only read: it must be there (reading must not create an empty one) and readable."""
    path = _sqlite_file(uri)
    if path is None:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise StoreUnavailable(
            f"tracking store {redact(uri)} cannot be read ({e.strerror}: {path}); "
            "point MLFLOW_TRACKING_URI at the store that holds the runs"
        ) from None


def _preflight_sqlite(uri: str) -> None:
    raw = uri.split("?", 1)[0].removeprefix("sqlite:").removeprefix("//")
    if raw in ("", "/", "/:memory:"):
        return
    path = Path(raw[1:] if raw.startswith("/") else raw)  # sqlite:///rel.db is relative, ////abs absolute
    try:
        if path.exists():
            if not path.is_file():
                raise OSError(f"{path} is not a file")
            with open(path, "ab"):  # opened for writing, nothing written
                pass
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path.parent):
                pass
    except OSError as e:
        why = f"{e.strerror}: {e.filename}" if e.strerror else str(e)
        raise StoreUnavailable(
            f"tracking store {redact(uri)} cannot be written ({why}); choose a writable path in MLFLOW_TRACKING_URI"
        ) from None


def _preflight_database(uri: str, default_port: int, timeout_s: float) -> None:
    try:
        parts = urllib.parse.urlsplit(uri)
        host, port = parts.hostname, parts.port or default_port
    except ValueError as e:
        raise StoreUnavailable(f"tracking store {redact(uri)} is not a valid URI ({e})") from None
    if not host:  # a Unix socket (host=/run/postgresql in the query, or the driver's default)
        return
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(None)
        except BaseException as e:  # reported below, with the URI
            outcome.append(e)

    worker = threading.Thread(target=connect, daemon=True)  # name resolution has no timeout of its own
    worker.start()
    worker.join(timeout_s + 0.5)
    if not outcome:
        raise StoreUnavailable(f"tracking store {redact(uri)} did not answer within {timeout_s:.0f} s")
    error = outcome[0]
    if isinstance(error, socket.gaierror):
        raise StoreUnavailable(
            f"tracking store {redact(uri)}: host {host!r} not found ({error.strerror}); fix MLFLOW_TRACKING_URI"
        )
    if error is not None:
        reason = getattr(error, "strerror", None) or error
        raise StoreUnavailable(
            f"tracking store {redact(uri)} is not reachable at {host}:{port} ({reason}); "
            "start the database or fix MLFLOW_TRACKING_URI"
        )
    if uri.lower().startswith("postgres"):
        _preflight_postgres_database(uri, timeout_s)


def _preflight_postgres_database(uri: str, timeout_s: float) -> None:
    """Name a PostgreSQL database that does not exist, or a login the server refuses (no such role, a
    wrong password, no pg_hba.conf entry): MLflow retried for 10-15 s, printing 25 lines of warnings,
    and then said only that the store "did not answer". The server is up (checked above); the driver is
    asked once. What the server did not refuse itself (a driver's own complaint) is left to the store
    probe, which names it."""
    try:
        import psycopg as driver  # lazy: optional (the `server` extra); SQLAlchemy 2.1's for postgresql://
    except ImportError:
        try:
            import psycopg2 as driver  # type: ignore[no-redef]  # lazy: optional, the older driver
        except ImportError:
            return
    dsn = "postgresql:" + uri.split(":", 1)[1]  # postgresql+psycopg2://… is a SQLAlchemy spelling
    try:
        driver.connect(dsn, connect_timeout=max(1, int(timeout_s))).close()
    except Exception as e:
        text = " ".join(str(e).split())
        if "does not exist" in text and "database" in text:
            name = urllib.parse.urlsplit(uri).path.lstrip("/") or "(none)"
            raise StoreUnavailable(
                f"tracking store {redact(uri)}: the database {name!r} does not exist on that server; "
                f"create it (createdb {name}) or fix MLFLOW_TRACKING_URI"
            ) from None
        if "FATAL:" in text or "authentication failed" in text:  # the server answered, and said no
            cause = redact(text.rpartition("FATAL:")[2].strip() or text)[:300]
            raise StoreUnavailable(
                f"tracking store {redact(uri)}: the server refused the login ({cause}); "
                "fix the user or password in MLFLOW_TRACKING_URI"
            ) from None
