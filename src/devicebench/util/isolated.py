"""Call one function in a fresh Python process and bring its result (or its exception) back.

Why a process: NumPy's OpenBLAS threads and torch's OpenMP threads keep spinning for a while after each
call, and in one process on a small host they fight over the cores, so each backend measured the
other's leftovers (torch fp32 n=1024 at 71–89 GFLOP/s beside NumPy against 170–185 alone on 2 cores).
A pause between them is a guess that depends on the host; a process in which only one thread pool has
ever run is quiet by construction, on 2 cores and on 64. The caller waits in `subprocess.run`, so it
uses no CPU while the child measures.

The request and the result travel as pickles in a private temporary folder: both ends are this
package, run by the same user, so nothing untrusted is unpickled.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from devicebench.util.children import die_with_parent, python_argv

ENTRY = "devicebench.util.isolated"


class IsolatedProcessDied(RuntimeError):
    """The child ended without a result: killed by a signal (the kernel's OOM killer sends SIGKILL)."""


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def call(target: str, payload: Any) -> Any:
    """`module:function(payload)` in a fresh interpreter; re-raises the child's exception here."""
    with tempfile.TemporaryDirectory(prefix="devicebench-isolated-") as d:
        request, result = Path(d) / "request.pkl", Path(d) / "result.pkl"
        request.write_bytes(pickle.dumps((target, payload)))
        proc = subprocess.run(
            python_argv("-m", ENTRY, str(request), str(result)),
            stdin=subprocess.DEVNULL,
            check=False,
            preexec_fn=die_with_parent,  # nothing measures on after the run is gone
        )
        if not result.exists():
            if proc.returncode == -signal.SIGKILL:
                raise MemoryError(
                    f"the process measuring {target} was killed by SIGKILL (the kernel's out-of-memory "
                    "killer does this)"
                )
            if proc.returncode == -signal.SIGINT:
                raise KeyboardInterrupt
            raise IsolatedProcessDied(
                f"the process measuring {target} ended without a result "
                f"({_signal_name(proc.returncode) if proc.returncode < 0 else f'exit {proc.returncode}'})"
            )
        ok, value = pickle.loads(result.read_bytes())
    if not ok:
        raise value
    return value


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    request, result = (Path(a) for a in argv)
    target, payload = pickle.loads(request.read_bytes())
    module_name, func_name = target.split(":")
    try:
        value: tuple[bool, Any] = (True, getattr(importlib.import_module(module_name), func_name)(payload))
    except BaseException as e:  # Ctrl-C and MemoryError too: the parent decides what they mean
        value = (False, _picklable(e))
    tmp = result.with_suffix(".part")
    tmp.write_bytes(pickle.dumps(value))
    os.replace(tmp, result)  # a result file is whole or absent
    return 0 if value[0] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
