"""A warm interpreter that starts `python -m MODULE ARGS` as a fork of itself: each child a process of its own.

A plan is many short runs, and each fresh `python -m devicebench` imports torch, torchvision and MLflow
before its first step: for a short run that costs more than its training (docs/measured.md, a run's
process). The server imports
them once (the modules it is started with) and then only forks: every child is still a new process with
its own pid, environment, working directory, stdin/stdout/stderr (the caller's own descriptors, passed
over a Unix socket) and exit status, and it creates its own thread pools, CUDA context and store
connections, because the server has created none (it runs no torch operation, asks for no device and
opens no store; `threads_at_ready` says it is still one thread when it forks). A child dies with the
server (SIGTERM), and the server with its caller, so killing a plan still ends its running run KILLED.

Protocol: the caller holds one end of a socket pair; per command it sends a JSON request (`module`,
`args`, `env`, `cwd`) with four descriptors (stdin, stdout, stderr, and one end of a fresh socket pair
for the answer). On that answer socket the server writes `pid N` once the child exists and
`exit CODE` when it has been reaped (CODE as `subprocess.Popen.returncode`: -N for a signal).
This module imports nothing heavy itself, so `python -m devicebench.util.forkserver` costs only what
it preloads.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from devicebench.util.children import death_signal, python_argv
from devicebench.util.leave import leave
from devicebench.util.resident import Ranges, map_again, resident_file_pages

READY_TIMEOUT_S = 300.0  # importing torch, torchvision and MLflow: seconds, tens on a loaded small host
_MAX_REQUEST = 4 * 1024 * 1024  # one JSON request: an environment and a command line
_POLL_S = 0.02  # how often the server looks for children that ended


# ------------------------------------------------------------------------------------------ the server


def _sigint_as_started() -> object:
    """What SIGINT did when this interpreter started (a run started in the background has it ignored)."""
    return signal.getsignal(signal.SIGINT)


def _child(
    request: dict, fds: list[int], keep_closed: list[socket.socket], sigint: object, pages: Ranges
) -> None:
    """In the forked process: become `python -m MODULE ARGS` as a fresh interpreter would run it, then
    exit with its code (never return into the server's loop). The server's resident file pages are
    mapped again first, so the child's resident set counts them as a fresh process's does (resident.py)."""
    code = 1
    try:
        map_again(pages)
        for s in keep_closed:
            s.close()
        death_signal(signal.SIGTERM)()  # dies with the server, as the server dies with its caller
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, sigint)  # type: ignore[arg-type]
        for target, fd in zip((0, 1, 2), fds[:3], strict=True):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _reseed()
        code = _run_module(request["module"], request["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()  # what the interpreter prints for an uncaught exception
        code = 1
    finally:
        leave(code)


def _reseed() -> None:
    """A fresh process seeds NumPy's global generator from the OS; a fork would copy the server's.
    (`random` reseeds itself after a fork; torch's default generator starts from a fixed seed anyway.)"""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run_module(module: str, args: Sequence[str]) -> int:
    """`python -m MODULE ARGS`: its `__main__` run with sys.argv as the interpreter sets it; its exit code."""
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _receive(control: socket.socket) -> tuple[dict, list[int]] | None:
    """One request and its descriptors; None when the caller has gone: end of file, or a reset when it
    closed its end before reading our `ready` line (a plan that never needed a warm run)."""
    try:
        data, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 4)
    except ConnectionResetError:
        return None
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(data.decode()), list(fds)


def serve(control: socket.socket, pages: Ranges) -> None:
    """Fork a child per request until the caller closes its end; report each child's pid and exit code."""
    sigint = _sigint_as_started()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the plan and its run, not the server
    answers: dict[int, socket.socket] = {}
    while True:
        if select.select([control], [], [], _POLL_S)[0]:
            got = _receive(control)
            if got is None:  # the caller went: a child still running hears of it by SIGTERM as we exit
                return
            request, fds = got
            answer = socket.socket(fileno=os.dup(fds[3]))
            pid = os.fork()
            if pid == 0:
                _child(request, fds, [control, answer, *answers.values()], sigint, pages)
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                answer.sendall(f"pid {pid}\n".encode())
            answers[pid] = answer
        _reap(answers)


def _reap(answers: dict[int, socket.socket]) -> None:
    """Tell each ended child's caller its exit code, as Popen.returncode spells it."""
    while answers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        answer = answers.pop(pid, None)
        if answer is not None:
            with contextlib.suppress(OSError):
                answer.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            answer.close()


def main(argv: Sequence[str]) -> int:
    """`python -m devicebench.util.forkserver FD MODULE...`: preload, say `ready THREADS`, then serve."""
    control = socket.socket(fileno=int(argv[0]))
    for name in argv[1:]:
        importlib.import_module(name)
    # Everything loaded so far lives as long as the server: out of the collector's sight, so a child's
    # first full collection does not walk the million-odd objects it inherited, a pause that landed
    # inside a warm matmul run's timed points (docs/measured.md, bench_matmul's warm fidelity).
    gc.collect()
    pages = resident_file_pages()
    gc.freeze()
    try:
        control.sendall(f"ready {threading.active_count()}\n".encode())
    except OSError:  # the plan ended (refused, or done) while this server loaded: nothing to serve
        return 0
    serve(control, pages)
    return 0


# ------------------------------------------------------------------------------------------ the client


class WarmChild:
    """One command forked by the server: what the plan runner uses of `subprocess.Popen` (pid, poll,
    send_signal, kill, communicate, returncode); its stderr comes back through a pipe of the caller's."""

    def __init__(self, answer: socket.socket, stderr: int | None, args: list[str]) -> None:
        self.answer, self.stderr_fd, self.args = answer, stderr, args
        self.returncode: int | None = None
        self._err: list[bytes] = []
        self._buf = b""
        first = self._line()
        if not first.startswith("pid "):  # the server died before it forked: no pid to signal, ever
            answer.close()
            if stderr is not None:
                os.close(stderr)
            raise OSError("the fork server died before it started the command")
        self.pid = int(first.split()[1])

    def _line(self, timeout: float | None = None) -> str:
        """The next line of the server's answer; a server that died answers `exit -9`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if left == 0 or not self._wait_readable(left):
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            chunk = self.answer.recv(4096)
            if not chunk:
                return f"exit {-signal.SIGKILL}"
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def _wait_readable(self, timeout: float | None) -> bool:
        """Wait until the answer socket has something, draining the child's stderr meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fds = [self.answer.fileno()] + ([self.stderr_fd] if self.stderr_fd is not None else [])
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            ready = select.select(fds, [], [], left)[0]
            if self.stderr_fd is not None and self.stderr_fd in ready:
                self._drain()
            if self.answer.fileno() in ready:
                return True
            if not ready:
                return False

    def _drain(self) -> None:
        assert self.stderr_fd is not None
        chunk = os.read(self.stderr_fd, 65536)
        if chunk:
            self._err.append(chunk)
        else:
            os.close(self.stderr_fd)
            self.stderr_fd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = int(self._line(0.0).split()[1])
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[None, str]:
        """(None, its stderr as text) once it has ended; TimeoutExpired if it runs past `timeout`."""
        if self.returncode is None:
            self.returncode = int(self._line(timeout).split()[1])
        while self.stderr_fd is not None:  # what it wrote last, and what its own children hold open
            self._drain()
        self.answer.close()
        return None, b"".join(self._err).decode(errors="replace")


class ForkServer:
    """The caller's side: start the server (it imports `preload` meanwhile), then fork commands from it."""

    def __init__(self, preload: Sequence[str], env: Mapping[str, str]) -> None:
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.env = dict(env)
        self.proc = subprocess.Popen(
            python_argv("-m", "devicebench.util.forkserver", str(theirs.fileno()), *preload),
            pass_fds=[theirs.fileno()],
            env=self.env,
            stdin=subprocess.DEVNULL,
            preexec_fn=death_signal(signal.SIGTERM),
        )
        theirs.close()
        self._ready: int | None = None

    def ready(self, timeout: float = READY_TIMEOUT_S) -> int:
        """Wait for the preload; the server's thread count when it said so (1: safe to fork). Raises
        OSError when it died or did not answer in time."""
        if self._ready is None:
            self.control.settimeout(timeout)
            try:
                line = self.control.recv(64).decode()
            except TimeoutError:
                raise OSError(f"the fork server did not load within {timeout:.0f} s") from None
            finally:
                self.control.settimeout(None)
            if not line.startswith("ready "):
                raise OSError(f"the fork server died while loading (exit {self.proc.poll()})")
            self._ready = int(line.split()[1])
        return self._ready

    def gone(self) -> str | None:
        """Why the server can start nothing more (`killed by SIGKILL`), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exited {code}"

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a command with `env` runs here as it would cold: a fork keeps the server's `sys.path`,
        which a fresh interpreter builds from PYTHONPATH (and PYTHONSAFEPATH) when it starts."""
        return all(env.get(k) == self.env.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH", "PYTHONHOME"))

    def start(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str | Path,
        stdout: bool = False,
        inherit: bool = False,
    ) -> WarmChild:
        """`python -m MODULE ARGS` as a fork: stdin from /dev/null, stdout to /dev/null (`stdout`: to the
        stderr pipe too), stderr piped back; `inherit`: stdout and stderr are the caller's own."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd)}
        out = [1, 2] if inherit else [err_w if stdout else null, err_w]
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], [null, *out, theirs.fileno()])
        except OSError:
            os.close(err_r)
            mine.close()
            raise
        finally:
            os.close(null)
            os.close(err_w)
            theirs.close()
        return WarmChild(mine, err_r, [module, *args])

    def close(self) -> None:
        """End the server: it exits once the caller's end is closed (its children, if any, get SIGTERM)."""
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def module_of(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(MODULE, ARGS) of `[this python, (-P,) -m, MODULE, ARGS...]`, the command lines the server can
    run; None for any other (another interpreter or other flags start cold)."""
    rest = list(argv[1:]) if argv and argv[0] == sys.executable else []
    if rest[:1] == ["-P"]:
        rest = rest[1:]
    if len(rest) < 2 or rest[0] != "-m":
        return None
    return rest[1], rest[2:]


if __name__ == "__main__":
    leave(main(sys.argv[1:]))  # not interpreter teardown: the plan waits for this exit (util/leave.py)
