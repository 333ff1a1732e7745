"""MLflow's own scoring server for `infer --via http`: `mlflow models serve --env-manager local` on
127.0.0.1, started before the run (a model that does not serve is one line and no run) and stopped
with its whole process group when the command leaves; its log is kept for the run's artifacts.

The workload never imports MLflow: it is handed the server's URL and its log's path.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devicebench.errors import UsageError

HOST = "127.0.0.1"
START_S = 180.0  # the server imports MLflow and loads the model: tens of seconds on a busy host
STOP_S = 10.0
NOISE = ("Downloading artifacts",)  # MLflow's progress bar: never the line that says why


@dataclass
class ScoringServer:
    """A started scoring server: its process (the leader of its own group), URL and log."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        """Its whole group ended (uvicorn's workers too): TERM, then KILL after `STOP_S`; the group is
        signalled even where the leader has exited, since a server that died mid-test may leave its
        other processes behind it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def last_line(log: Path) -> str:
    """The log's last line that says something (not a progress bar)."""
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines()]
    said = [x for x in lines if x and not x.startswith(NOISE)]
    return said[-1] if said else "(no output)"


def free_port(port: int) -> int:
    """`port` where it is free on 127.0.0.1 (0: one the kernel picks); in use: one line, exit 2."""
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            raise UsageError(
                f"port {port} on {HOST} is in use; give a free one, or 0", param="serve_port"
            ) from None
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ping", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def start(uri: str, port: int, tracking_uri: str, threads: int = 0) -> ScoringServer:
    """The scoring server for the logged model at `uri`, answering `/ping`, its torch on `threads`
    intra-op threads (0: torch's default); one that exits first (a model that does not serve) or never
    answers is stopped and said in one line, its own last line."""
    port = free_port(port)
    log = Path(tempfile.mkdtemp(prefix="devicebench-serve-")) / "scoring_server.log"
    # unbuffered: a server killed mid-test leaves its last lines in the log, not in a lost buffer
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "PYTHONUNBUFFERED": "1"}
    # MLflow downloads the model into a temporary folder it never removes: ours, removed at exit
    env["TMPDIR"] = str(log.parent)
    if threads > 0:  # the run's cpu_threads, as in-process uses them: same model, same device, same threads
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # MLflow starts uvicorn by name: this interpreter's scripts first on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "-h", HOST, "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = ScoringServer(process, f"http://{HOST}:{port}", log)
    # at exit, last in first out: the server stopped, then its log's folder removed (the run holds a copy)
    atexit.register(shutil.rmtree, log.parent, True)
    atexit.register(server.stop)
    deadline = time.monotonic() + START_S
    while not _answers(server.url):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            why = "exited" if process.returncode not in (None, -signal.SIGTERM) else "did not answer"
            raise UsageError(
                f"the model at {uri} does not serve ({why}): {last_line(log)}", param="model_uri"
            )
        time.sleep(0.2)
    return server
