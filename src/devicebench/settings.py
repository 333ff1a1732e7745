"""Environment and `.env` → one typed Settings object, read once at start-up.

Everything a deployment changes (where the store is, where data lives, how long to wait for a server)
is a setting, not a parameter: parameters describe the *work* and are logged; settings describe the
*place* and are not, so two hosts with different paths still produce comparable runs.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devicebench.errors import UsageError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"  # MLflow 3's own default: the embedded SQLite store
OCI_METADATA_URL = "http://169.254.169.254/opc/v2/instance/"


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


def redact_uri(uri: str) -> str:
    """The URI with any password replaced by `***`: what messages and tags may show."""
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        return uri
    if not parts.password:
        return uri
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"setting {name}={raw!r} is not a number") from None
    if value < 0:
        raise UsageError(f"setting {name}={raw!r} must be >= 0")
    return value


def load_dotenv_file(env: Mapping[str, str] | None = None) -> Path | None:
    """Load `.env` (or `$DEVICEBENCH_DOTENV`, `none` to skip) into os.environ without overriding it.

    Secrets such as MLFLOW_TRACKING_PASSWORD must reach MLflow's own client, which reads os.environ,
    so the file is merged into the process environment rather than kept aside. Empty values are
    skipped: a copied .env.example must behave like no setting at all.
    """
    from dotenv import dotenv_values

    env = os.environ if env is None else env
    choice = env.get("DEVICEBENCH_DOTENV", "").strip()
    if choice.lower() == "none":
        return None
    path = Path(choice) if choice else Path.cwd() / ".env"
    if choice and not path.is_file():
        raise UsageError(f"setting DEVICEBENCH_DOTENV={choice!r}: no such file")
    if path.is_file():
        for key, value in dotenv_values(path).items():
            # Empty lines in a copied .env.example mean "unset", not "set to the empty string".
            if value and key not in os.environ:
                os.environ[key] = value
        return path
    return None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from `env` (default: os.environ after merging `.env`)."""
    if env is None:
        load_dotenv_file()
        env = os.environ
    state_home = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    uri = env.get("MLFLOW_TRACKING_URI", "").strip()
    return Settings(
        tracking_uri=uri or DEFAULT_TRACKING_URI,
        tracking_uri_from_env=bool(uri),
        experiment=(
            env.get("DEVICEBENCH_EXPERIMENT") or env.get("MLFLOW_EXPERIMENT_NAME") or "devicebench"
        ).strip(),
        data_dir=Path(env.get("DEVICEBENCH_DATA_DIR") or "data").expanduser(),
        spool_dir=Path(env.get("DEVICEBENCH_SPOOL_DIR") or state_home / "devicebench" / "spool").expanduser(),
        oci_metadata_url=env.get("DEVICEBENCH_OCI_METADATA_URL") or OCI_METADATA_URL,
        oci_timeout_s=_float(env, "DEVICEBENCH_OCI_TIMEOUT_S", 0.5),
        store_timeout_s=_float(env, "DEVICEBENCH_STORE_TIMEOUT_S", 10.0),
        flush_interval_s=_float(env, "DEVICEBENCH_FLUSH_INTERVAL_S", 2.0),
        final_flush_s=_float(env, "DEVICEBENCH_FINAL_FLUSH_S", 60.0),
        host_label=(env.get("DEVICEBENCH_HOST") or "").strip(),
    )
