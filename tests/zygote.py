"""The client of tests/cli_zygote.py: `devicebench` commands as forks of one warm interpreter.

A fresh `devicebench` process spends 5-8 CPU-seconds importing torch and MLflow before it does anything;
the suite starts about a hundred. Through the zygote each command is still its own process (own pid,
environment, working directory, stdout, stderr and exit code, through the same `devicebench.run.cli.main` the
console script calls) but the imports are paid once per test worker. What a fork cannot show (warnings
printed while importing, the console script itself, signal exit codes) is left to tests that pass
`real=True` to servers.run_cli.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from testbed.mlflow_server import VENV_BIN

HERE = Path(__file__).resolve().parent


class Zygote:
    """One warm interpreter that forks a `devicebench` process per request (thread-safe): its owner's,
    started here, or one another process started (`path`: its socket), such as the one an xdist run's
    controller starts for all its workers (conftest.py)."""

    def __init__(self, path: Path | None = None, cwd: Path | None = None) -> None:
        self.lock = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="devicebench-zygote-"))
        self.proc: subprocess.Popen | None = None
        if path is None:
            path = self.scratch / "socket"
            self.proc = launch(path, cwd or self.scratch)
            assert self.proc.stdout is not None
            assert self.proc.stdout.readline().strip() == "ready", "the zygote did not start"
        self.path = path
        self.sock = connect(path)

    def start(
        self, args: list[str], env: dict[str, str], cwd: Path | None, script: str = "", sigint: bool = False
    ) -> Forked:
        """Start one command (`devicebench ARGS`, or `python SCRIPT ARGS`) and return at once; `sigint`
        makes SIGINT raise KeyboardInterrupt in it even where this process was started ignoring it."""
        out = Path(tempfile.mkdtemp(prefix="cmd-", dir=self.scratch))
        request = {"args": args, "env": env, "cwd": str(cwd or out), "out": str(out), "script": script}
        with self.lock:
            self.sock.sendall((json.dumps({**request, "sigint": sigint}) + "\n").encode())
        return Forked(out, [script or "devicebench", *args])

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path | None, timeout_s: float, script: str = ""
    ) -> subprocess.CompletedProcess:
        """One command, waited for; a command still running at `timeout_s` is killed and TimeoutExpired
        raised."""
        forked = self.start(args, env, cwd, script)
        try:
            stdout, stderr = forked.communicate(timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(forked.out)
            raise
        return subprocess.CompletedProcess(forked.args, forked.returncode, stdout, stderr)

    @staticmethod
    def _kill(out: Path) -> None:
        """The command's whole process group (it may have started loader workers or a suite's children)."""
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int((out / "pid").read_text()), signal.SIGKILL)

    def close(self) -> None:
        """Hang up; an owner also ends its zygote (children already forked run on); the commands'
        output folders go."""
        with contextlib.suppress(OSError, AttributeError):
            self.sock.close()
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        shutil.rmtree(self.scratch, ignore_errors=True)


def launch(path: Path, cwd: Path) -> subprocess.Popen:
    """The zygote process, listening on `path` once it has preloaded (~8 CPU-s), not waited for; it
    lives until its stdin closes (the caller closes it, or exits)."""
    # as `devicebench.run.cli.main` sets it before MLflow is imported (here MLflow is imported first)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env.update(OMP_NUM_THREADS="1", MLFLOW_LOGGING_LEVEL="WARNING", GIT_PYTHON_REFRESH="quiet")
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DEVICEBENCH_DOTENV="none")
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.Popen(
        [str(VENV_BIN / "python"), str(HERE / "cli_zygote.py"), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=cwd,
        text=True,
    )


def connect(path: Path, timeout_s: float = 300) -> socket.socket:
    """A connection to the zygote listening on `path`, waiting while it preloads (it binds once ready)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no zygote answered at {path} within {timeout_s:.0f} s") from None
            time.sleep(0.1)


class Forked:
    """A command forked from the zygote, not yet waited for: what the fault tests use of subprocess.Popen
    (pid, poll, send_signal, kill, communicate, returncode). One killed before it could write its exit
    code (SIGKILL) reads as -9, as Popen reports a process killed by signal 9."""

    def __init__(self, out: Path, args: list[str]) -> None:
        self.out, self.args = out, args
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        deadline = time.monotonic() + 30
        while not (self.out / "pid").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.args} never started")
            time.sleep(0.02)
        return int((self.out / "pid").read_text())

    def poll(self) -> int | None:
        if self.returncode is None:
            if (self.out / "rc").exists():
                self.returncode = int((self.out / "rc").read_text())
            else:
                try:
                    os.kill(self.pid, 0)  # the zygote reaps its children: a dead one is gone at once
                except ProcessLookupError:  # it may have written its code just before it went
                    rc = self.out / "rc"
                    self.returncode = int(rc.read_text()) if rc.exists() else -signal.SIGKILL
        return self.returncode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.05)
        return (self.out / "stdout").read_text(), (self.out / "stderr").read_text()


_SHARED: Zygote | None = None
_SHARED_LOCK = threading.Lock()


SHARED_ZYGOTE = "DEVICEBENCH_TESTS_ZYGOTE"  # the socket of the zygote an xdist controller started


def shared() -> Zygote:
    """The zygote of this test run: the one the xdist controller started for all its workers, or this
    process's own, started on first use; closed at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or (_SHARED.proc is not None and _SHARED.proc.poll() is not None):
            path = os.environ.get(SHARED_ZYGOTE)
            _SHARED = Zygote(Path(path)) if path else Zygote()
            atexit.register(_SHARED.close)
        return _SHARED
