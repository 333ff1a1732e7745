"""Settings: environment and .env → one typed object; empty values mean unset."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path

import pytest

from devicebench.config.settings import (
    DEFAULT_TRACKING_URI,
    Settings,
    load_dotenv_file,
    load_settings,
    preflight_store,
)
from devicebench.errors import StoreUnavailable, UsageError


def test_defaults_are_the_embedded_store_and_local_paths() -> None:
    s = load_settings({})
    assert s.tracking_uri == DEFAULT_TRACKING_URI == "sqlite:///mlflow.db"
    assert not s.tracking_uri_from_env
    assert s.experiment == "devicebench"
    assert s.data_dir == Path("data")
    assert s.store_timeout_s == 10.0


def test_environment_values_are_typed() -> None:
    s = load_settings(
        {
            "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
            "MLFLOW_EXPERIMENT_NAME": "x",
            "DEVICEBENCH_STORE_TIMEOUT_S": "2.5",
            "DEVICEBENCH_SPOOL_DIR": "/tmp/spool",
        }
    )
    assert s.tracking_uri == "http://127.0.0.1:5000" and s.tracking_uri_from_env
    assert s.experiment == "x"
    assert s.store_timeout_s == 2.5
    assert s.spool_dir == Path("/tmp/spool")


def test_devicebench_host_names_the_machine_for_reports() -> None:
    assert load_settings({"DEVICEBENCH_HOST": "  gpu-node-a  "}).host_label == "gpu-node-a"
    assert load_settings({}).host_label == ""


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf", "1e309", "1e300"])
@pytest.mark.parametrize("name", ["DEVICEBENCH_STORE_TIMEOUT_S", "DEVICEBENCH_FLUSH_INTERVAL_S"])
def test_bad_numbers_name_the_setting(name: str, raw: str) -> None:
    """nan, inf and absurd values are refused here: a sender thread waiting 1e309 s once crashed and
    the run blamed an unreachable store."""
    with pytest.raises(UsageError, match=f"{name}={raw!r}"):
        load_settings({name: raw})


def test_an_experiment_name_longer_than_mlflow_takes_is_refused() -> None:
    with pytest.raises(UsageError, match="DEVICEBENCH_EXPERIMENT is 10,000 characters; MLflow allows 500"):
        load_settings({"DEVICEBENCH_EXPERIMENT": "e" * 10_000})


def _settings(uri: str) -> Settings:
    return dataclasses.replace(load_settings({}), tracking_uri=uri, store_timeout_s=2.0)


def test_a_store_that_cannot_work_is_refused_before_mlflow_is_asked(tmp_path: Path) -> None:
    """MLflow retries an engine it cannot create 15 times (25-108 s, a warning each): not ours to wait."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=rf"u:\*\*\*@127.0.0.1:{port}/x is not reachable"):
        preflight_store(_settings(f"postgresql://u:secret@127.0.0.1:{port}/x"))
    with pytest.raises(StoreUnavailable, match="cannot be written"):  # read-only even for root
        preflight_store(_settings("sqlite:////proc/devicebench-no-such-dir/m.db"))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(StoreUnavailable, match="cannot be written"):
        preflight_store(_settings(f"sqlite:///{tmp_path}/a-file/m.db"))
    assert time.monotonic() - started < 5
    preflight_store(_settings(f"sqlite:///{tmp_path}/new/m.db"))  # creatable: passes, creates no file
    assert list((tmp_path / "new").iterdir()) == []


def test_dotenv_fills_only_what_the_environment_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "DEVICEBENCH_EXPERIMENT=from-file\nDEVICEBENCH_DATA_DIR=/data\nMLFLOW_TRACKING_URI=\n"
    )
    monkeypatch.setenv("DEVICEBENCH_DOTENV", str(env_file))
    monkeypatch.setenv("DEVICEBENCH_DATA_DIR", "/mine")
    monkeypatch.delenv("DEVICEBENCH_EXPERIMENT", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert load_dotenv_file() == env_file
    assert os.environ["DEVICEBENCH_EXPERIMENT"] == "from-file"
    assert os.environ["DEVICEBENCH_DATA_DIR"] == "/mine"
    assert "MLFLOW_TRACKING_URI" not in os.environ, "an empty value in .env means unset"


def test_a_named_dotenv_that_is_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICEBENCH_DOTENV", "/no/such/.env")
    with pytest.raises(UsageError, match="no such file"):
        load_dotenv_file()
