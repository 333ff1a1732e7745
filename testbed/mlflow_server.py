"""A real `mlflow server` on 127.0.0.1 for tests and benchmarks: no mocks, loopback only, bounded waits.

Both the test suite and `make bench` start real servers; this is the one place that knows how. It lives
outside tests/ and src/: benchmarks must not reach into tests, and users' installs do not need it.
`mlflow server` takes ~20 s to answer /health on a 2-core VM, so callers start one and share it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A port the kernel says is free on 127.0.0.1 now (a small race is accepted in tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout_s: float = 90.0, proc: subprocess.Popen | None = None) -> None:
    """Poll `<url>/health` until it answers 200, the process dies, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode} before answering {url}/health")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{url}/health", timeout=2) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url}/health did not answer within {timeout_s:.0f} s")


@dataclass
class MlflowServer:
    """One `mlflow server` process on 127.0.0.1; restartable on the same store (fault tests need that)."""

    backend_uri: str
    artifacts_dir: Path
    port: int = field(default_factory=free_port)
    extra_args: Sequence[str] = ()
    log_path: Path | None = None
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    # One uvicorn worker: a test or a screenshot is one client at a time (requests still run concurrently
    # in the worker's thread pool), and each extra worker imports MLflow's server again (~7 CPU-s a start).
    workers: int = 1

    @classmethod
    def in_folder(cls, d: Path, port: int | None = None) -> MlflowServer:
        """A server on a SQLite store kept in folder `d` (mlflow.db, artifacts/, server.log), on `port`
        or a free one."""
        store = f"sqlite:///{d / 'mlflow.db'}"
        return cls(store, d / "artifacts", port=port or free_port(), log_path=d / "server.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(VENV_BIN / "mlflow"),
            "server",
            "--artifacts-destination",
            str(self.artifacts_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 90.0) -> MlflowServer:
        """Started and answering /health (stopped again if it does not within `timeout_s`)."""
        self.launch()
        try:
            wait_healthy(self.url, timeout_s, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    def launch(self) -> MlflowServer:
        """Started, not waited for: the caller does other work while it imports MLflow (~6 CPU-s)."""
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - handed to the child process
        # No MLflow job runner: devicebench uses none, and it forks ~10 consumers that each import MLflow.
        quiet = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        # the store's URI in the environment, never on the command line (`ps` shows argv to every user):
        # `mlflow server` reads MLFLOW_BACKEND_STORE_URI itself
        env = {**os.environ, **quiet, "MLFLOW_BACKEND_STORE_URI": self.backend_uri, **(self.env or {})}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        return self

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop the whole process group (uvicorn workers and job consumers included).

        `mlflow server` does not always exit on SIGTERM here, so after a short grace it is killed: the
        stores it leaves (SQLite, PostgreSQL) are transactional and restart cleanly.
        """
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
