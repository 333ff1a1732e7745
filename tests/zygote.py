"""The client of tests/cli_zygote.py: `devicebench` commands as forks of one warm interpreter.

A fresh `devicebench` process spends 5-8 CPU-seconds importing torch and MLflow before it does anything;
the suite starts about a hundred. Through the zygote each command is still its own process (own pid,
environment, working directory, stdout, stderr and exit code, through the same `devicebench.cli.main` the
console script calls) but the imports are paid once per test worker. What a fork cannot show (warnings
printed while importing, the console script itself, signal exit codes) is left to tests that pass
`real=True` to servers.run_cli.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from testbed.mlflow_server import VENV_BIN

HERE = Path(__file__).resolve().parent


class Zygote:
    """One warm interpreter that forks a `devicebench` process per request (thread-safe)."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.lock = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="devicebench-zygote-"))
        # as `devicebench.cli.main` sets it before MLflow is imported (here MLflow is imported first)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
        env.update(OMP_NUM_THREADS="1", MLFLOW_LOGGING_LEVEL="WARNING", GIT_PYTHON_REFRESH="quiet")
        env.update(MLFLOW_DISABLE_TELEMETRY="true", DEVICEBENCH_DOTENV="none")
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "python"), str(HERE / "cli_zygote.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=cwd or self.scratch,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready", "the zygote did not start"

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path | None, timeout_s: float, script: str = ""
    ) -> subprocess.CompletedProcess:
        """One command (`devicebench ARGS`, or `python SCRIPT ARGS`); a command still running at
        `timeout_s` is killed and TimeoutExpired raised."""
        out = Path(tempfile.mkdtemp(prefix="cmd-", dir=self.scratch))
        with self.lock:
            assert self.proc.stdin is not None
            request = {"args": args, "env": env, "cwd": str(cwd or out), "out": str(out), "script": script}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while not (out / "rc").exists():
            if time.monotonic() > deadline:
                self._kill(out)
                raise subprocess.TimeoutExpired(["devicebench", *args], timeout_s)
            time.sleep(0.05)
        rc = int((out / "rc").read_text())
        return subprocess.CompletedProcess(
            [script or "devicebench", *args], rc, (out / "stdout").read_text(), (out / "stderr").read_text()
        )

    @staticmethod
    def _kill(out: Path) -> None:
        """The command's whole process group (it may have started loader workers or a suite's children)."""
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int((out / "pid").read_text()), signal.SIGKILL)

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


_SHARED: Zygote | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> Zygote:
    """This test process's zygote, started on first use and closed at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED.proc.poll() is not None:
            _SHARED = Zygote()
            atexit.register(_SHARED.close)
        return _SHARED
