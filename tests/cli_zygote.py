"""Many `devicebench` commands from one interpreter that imported the CLI once: a fork per command.

A fresh `devicebench` process spends 3-6 s of CPU importing torch, torchvision and MLflow before it can
refuse a typo; the bad-input table has dozens of rows. Here the imports happen once, and each command runs
in its own forked process with its own environment, working directory, stdout and stderr files and exit
code, through the same `devicebench.run.cli.main` the console script calls. What a fork cannot show (warnings
printed while importing) is covered by the tests that start the real console script.

`python cli_zygote.py SOCKET` preloads, then listens on the Unix socket SOCKET: any number of test
processes connect (an xdist run shares one zygote among its workers: each start is ~8 CPU-s of imports)
and send, one JSON object a line, {"args": [...], "env": {...}, "cwd": "...", "out": "DIR"}, and
optionally "script": a Python file run as `python SCRIPT ARGS...` instead of the CLI (the fault driver).
The child writes DIR/pid, DIR/stdout, DIR/stderr and, last, DIR/rc (atomically); the zygote answers
nothing. It exits when its stdin closes: its owner has gone.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path

from devicebench.plan.warm import WARM_MODULES
from devicebench.util.leave import shut_down


def preload() -> None:
    """Everything a command may import, so a forked child starts warm (absent modules are skipped):
    what a plan's warm server loads for its runs, and what the other commands use."""
    for name in (
        *WARM_MODULES,
        "devicebench.config.fields",
        "devicebench.host.device",
        "devicebench.config.settings",
        "devicebench.tracking",
        "mlflow",
        "mlflow.tracking",
        "matplotlib.pyplot",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def child(request: dict) -> None:
    """In the forked process: become the command, then exit with its code (never return)."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the parent ignores it; commands may wait on children
        if request.get("sigint"):  # as a fresh interpreter whose SIGINT was not ignored: Ctrl-C raises
            signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)  # a group of its own: a timed-out command is killed with its children
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the zygote's lifeline to its owner
        out = Path(request["out"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "pid.tmp").write_text(str(os.getpid()))
        (out / "pid.tmp").replace(out / "pid")  # atomic: a reader never sees it half-written
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # as a fresh process: $TMPDIR read again (the zygote cached its own)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(out / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        try:
            code = _run(request)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()  # what the interpreter would print for an uncaught exception
            code = 1
    finally:
        # as the console script leaves (util/leave.py): atexit handlers run, MLflow's temporary model
        # folders among them (a child that skipped them left a few in $TMPDIR per command), then the
        # exit code is written, last, so a reader that sees it sees everything the command printed
        with contextlib.suppress(Exception):
            shut_down()
        with contextlib.suppress(Exception):
            tmp = Path(request["out"]) / "rc.tmp"
            tmp.write_text(str(code))
            tmp.replace(Path(request["out"]) / "rc")
        os._exit(code if isinstance(code, int) else 1)


def _run(request: dict) -> int:
    """The command: the CLI's `main`, or the request's script as `__main__` (its exit code)."""
    if request.get("script"):
        import runpy

        sys.argv = [request["script"], *request["args"]]
        runpy.run_path(request["script"], run_name="__main__")
        return 0
    from devicebench.run.cli import main

    return main(request["args"])


def serve(listener: socket.socket) -> None:
    """Fork a child per request line from any connection, until stdin reaches its end."""
    conns: dict[socket.socket, bytes] = {}
    while True:
        ready = select.select([sys.stdin, listener, *conns], [], [])[0]
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            return
        if listener in ready:
            conn, _ = listener.accept()
            conns[conn] = b""
        for conn in [c for c in ready if c in conns]:
            chunk = conn.recv(65536)
            if not chunk:  # the worker closed its end: forget its buffer, close ours
                del conns[conn]
                conn.close()
                continue
            *lines, conns[conn] = (conns[conn] + chunk).split(b"\n")
            for line in filter(None, (raw.strip() for raw in lines)):
                request = json.loads(line)
                if os.fork() == 0:
                    for s in (listener, *conns):
                        s.close()
                    child(request)


def main(path: str) -> None:
    preload()
    gc.collect()
    gc.freeze()  # a child's first collection does not walk the heap it inherited
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.replace(path + ".tmp", path)  # a client that sees the path can connect
    print("ready", flush=True)
    serve(listener)


if __name__ == "__main__":
    main(sys.argv[1])
