"""Issue 40, "Reliability IV": inputs that were accepted wrongly or refused badly (a key written twice,
a `.env` that steers the interpreter or expands without end, credentials in a tracking URI, a login
refused at once, settings that fell into the generic error path, a slow metadata answer, a server bound
beyond loopback without auth). In-process where possible; no training run."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicebench.config.settings import load_dotenv_file, load_settings, preflight_store
from devicebench.errors import StoreUnavailable, UsageError
from devicebench.plan.spec import load_plan
from devicebench.pricing.price_table import load_prices
from devicebench.tracking.store import check_store
from servers import QUICK_MATMUL, devicebench_env, migrated_sqlite, one_error_line, pg_available, run_cli

# ------------------------------------------------------------------------- 5: a key written twice

PRICE = "currency: USD, date: 2026-11-23, source: t"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: matmul\n    params: {sizes: '64'}\nruns:\n  - entry: matmul\n",
            "line 5: key 'runs' is written twice (first on line 2)",
        ),
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: cifar\n    params:\n      epochs: 1\n      lr: 0.1\n      epochs: 200\n",
            "line 7: key 'epochs' is written twice (first on line 5)",
        ),
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: cifar\n    params: {epochs: 1, epochs: 200}\n",
            "line 4: key 'epochs' is written twice (first on line 4)",
        ),
        (
            "prices.yaml",
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: 2.5, {PRICE}}}\n  VM.X.1: {{usd_per_hour: 0.1, {PRICE}}}\n",
            "line 4: key 'VM.X.1' is written twice (first on line 3)",
        ),
    ],
)
def test_a_key_written_twice_is_refused_naming_the_key_and_its_line(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        (load_plan if name == "plan.yaml" else load_prices)(path)
    msg = str(err.value)
    assert needle in msg and str(path) in msg and "\n" not in msg, msg
    assert err.value.exit_code == 2


def test_a_merge_key_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "name: x\nruns:\n  - entry: matmul\n    params: &b {sizes: '64', repeats: 1}\n"
        "  - entry: matmul\n    params: {<<: *b, repeats: 2}\n"
    )
    assert [r.params["repeats"] for r in load_plan(path).runs] == ["1", "2"]


# ------------------------------------------------------------------- 16: a control character, one line


@pytest.mark.parametrize("name", ["plan.yaml", "prices.yaml"])
def test_a_control_character_is_refused_in_one_line_naming_its_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("name: x\nruns:\n  - entry: matmul\n    params: {sizes: '64\x07'}\n")
    with pytest.raises(UsageError) as err:
        (load_plan if name == "plan.yaml" else load_prices)(path)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "line 4: not valid YAML (control character U+0007 is not allowed)" in msg, msg


# ------------------------------------------------------------ 10: what a `.env` may put in the environment


def _dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / ".env"
    path.write_text(text)
    monkeypatch.setenv("DEVICEBENCH_DOTENV", str(path))
    for name in ("A", "B", "C", "PYTHONPATH", "LD_PRELOAD", "PYTHONSTARTUP", "PYTHONUNBUFFERED"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.mark.parametrize(
    "name", ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH"]
)
def test_a_dotenv_may_not_steer_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delenv(name, raising=False)
    path = _dotenv(tmp_path, monkeypatch, f"A=1\n{name}={tmp_path}\n")
    with pytest.raises(UsageError) as err:
        load_dotenv_file()
    msg = str(err.value)
    assert msg.startswith(f"settings file {path}: {name} steers the interpreter") and "\n" not in msg, msg
    assert name not in os.environ and "A" not in os.environ, "nothing of a refused file is merged"


def test_a_dotenv_keeps_its_harmless_settings_and_its_expansion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dotenv(tmp_path, monkeypatch, "A=1\nB=${A}2\nC=${NOT_SET_ANYWHERE:-d}${A}\nPYTHONUNBUFFERED=1\n")
    load_dotenv_file()
    assert (os.environ["B"], os.environ["C"], os.environ["PYTHONUNBUFFERED"]) == ("12", "d1", "1")


def test_a_dotenv_that_expands_without_end_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,000 characters, then 100 of them: 100,000 (the old code built it, and then 100 times that)
    path = _dotenv(tmp_path, monkeypatch, "A=" + "x" * 1000 + "\nB=" + "${A}" * 100 + "\nC=${B}${B}\n")
    started = time.monotonic()
    with pytest.raises(UsageError) as err:
        load_dotenv_file()
    assert time.monotonic() - started < 1
    msg = str(err.value)
    assert msg == f"settings file {path}: B is 100,000 characters once expanded; a setting is at most 65,536"
    assert "B" not in os.environ


# ------------------------------------------------- 14: settings that fell into the generic error path


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DEVICEBENCH_EXPERIMENT": "   "}, "setting DEVICEBENCH_EXPERIMENT is blank"),
        ({"MLFLOW_EXPERIMENT_NAME": "\t"}, "setting MLFLOW_EXPERIMENT_NAME is blank"),
        ({"DEVICEBENCH_OCI_METADATA_URL": "::::"}, "DEVICEBENCH_OCI_METADATA_URL='::::' is not an http://"),
        ({"DEVICEBENCH_OCI_METADATA_URL": "ftp://h/x"}, "is not an http:// or https:// URL with a host"),
        (
            {"DEVICEBENCH_OCI_METADATA_URL": "http://h:99999/"},
            "is not an http:// or https:// URL with a host",
        ),
    ],
)
def test_a_bad_setting_is_refused_by_name(env: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        load_settings(env)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert err.value.exit_code == 2


def test_a_good_metadata_url_is_kept() -> None:
    url = "http://127.0.0.1:8080/opc/v2/instance/"
    assert load_settings({"DEVICEBENCH_OCI_METADATA_URL": url}).oci_metadata_url == url


def test_a_price_of_400_digits_is_refused_by_key(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: {'9' * 400}, {PRICE}}}\n")
    with pytest.raises(UsageError) as err:
        load_prices(path)
    assert str(err.value) == (
        f"price table {path}: shapes[VM.X.1].usd_per_hour: a number of 400 digits is not a price; "
        "expected a price per hour > 0"
    )


def test_a_dotenv_value_of_200000_characters_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _dotenv(tmp_path, monkeypatch, "A=" + "y" * 200_000 + "\n")
    with pytest.raises(
        UsageError, match=r"A is 200,000 characters once expanded; a setting is at most 65,536"
    ):
        load_settings()
    assert "A" not in os.environ, path


def test_an_experiment_id_with_no_experiment_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    uri = migrated_sqlite(tmp_path / "x.db")
    env = devicebench_env(uri, MLFLOW_EXPERIMENT_ID="99999")
    proc = run_cli(["matmul", "--sizes", "64", "--repeats", "1", *QUICK_MATMUL], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert "setting MLFLOW_EXPERIMENT_ID='99999': that experiment does not exist" in line, line
    from mlflow.tracking import MlflowClient  # lazy: this file's other tests need no MLflow

    client = MlflowClient(uri)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


# ------------------------------------------------------------------- 12: credentials in a tracking URI


@contextlib.contextmanager
def _http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A one-thread HTTP server on 127.0.0.1 for the length of a `with`; its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _BasicAuthStore(http.server.BaseHTTPRequestHandler):
    """Answers the store probe 200 for alice with the password `p@ss w`, 401 for anything else."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.headers.get("Authorization") or ""
        good = auth == "Basic " + base64.b64encode(b"alice:p@ss w").decode()
        self.send_response(200 if good else 401)
        body = b'{"experiments": []}' if good else b"{}"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _store_settings(uri: str) -> object:
    return dataclasses.replace(load_settings({}), tracking_uri=uri, store_timeout_s=2.0)


def test_credentials_in_a_tracking_uri_reach_the_server_and_no_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with _http_server(_BasicAuthStore) as base:
        good = base.replace("http://", "http://alice:p%40ss%20w@")
        check_store(_store_settings(good))  # was "not reachable (Name or service not known)"
        bad = base.replace("http://", "http://alice:wrong-secret@")
        with pytest.raises(StoreUnavailable) as err:
            check_store(_store_settings(bad))
    msg = str(err.value)
    assert "refused the credentials (HTTP 401)" in msg and "wrong-secret" not in msg, msg


# --------------------------------------------------------------- 13: a login PostgreSQL refuses at once


def test_a_postgres_login_refused_at_once_is_named_at_once() -> None:
    if not pg_available():
        pytest.skip("PostgreSQL is not answering on 127.0.0.1:5432")
    uri = "postgresql://nosuchrole:topsecret@127.0.0.1:5432/test"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        preflight_store(_store_settings(uri))  # was "did not answer within 10 s", after ~15 s
    assert time.monotonic() - started < 3
    msg = str(err.value)
    assert 'the server refused the login (role "nosuchrole" does not exist)' in msg, msg
    assert "topsecret" not in msg and err.value.exit_code == 2


# ------------------------------------------------------ 19: the metadata probe's time limit is the whole


class _DrippingMetadata(http.server.BaseHTTPRequestHandler):
    """Headers at once, then a byte of its body every 0.1 s: each read is within any per-read timeout,
    the whole is not. It stops by itself after 40 bytes (4 s) or when the client has gone."""

    def do_GET(self) -> None:
        body = b'{"shape": "VM.X.1", "region": "r"}' + b" " * 6
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(0.1)

    def log_message(self, *args: object) -> None:
        pass


def test_a_metadata_answer_that_drips_is_cut_at_the_setting() -> None:
    from devicebench.host.device import (
        oci_metadata,
    )  # lazy: imports torch, which this file's other tests need not

    with _http_server(_DrippingMetadata) as base:
        started = time.monotonic()
        assert oci_metadata(f"{base}/opc/v2/instance/", 0.5) == {}
        took = time.monotonic() - started  # was the whole drip, 4 s
    assert took < 1.0, took
