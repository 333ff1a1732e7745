"""How devicebench starts its own Python children: never with the working directory on `sys.path`, and
never outliving the process that started them.

`python -m devicebench` puts the current directory first on `sys.path`, so a `numpy.py` in the folder a
user ran `devicebench matmul` from was imported by the isolated matmul child and ran its code. `-P`
(Python >= 3.11; `PYTHONSAFEPATH=1` for children whose command line we do not build, torchrun's ranks)
leaves it off. A suite killed by SIGKILL left its child training as an orphan that later failed on a
broken pipe; `die_with_parent` has the kernel signal a child the moment its parent dies (Linux's
PR_SET_PDEATHSIG), where the platform has it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import subprocess
import sys
from collections.abc import Callable

SAFE_PATH = {"PYTHONSAFEPATH": "1"}  # the environment form of -P, inherited by grandchildren too
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the parent: a child between fork and exec must not dlopen."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def python_argv(*args: str) -> list[str]:
    """`python -P ARGS`: this interpreter, without the working directory on `sys.path`."""
    return [sys.executable, "-P", *args]


def death_signal(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn` (or DataLoader `worker_init_fn`) that has the kernel send `signum` to the child
    when its parent dies. SIGTERM lets a training child end its run KILLED with its points flushed."""

    def arm(*_: object) -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)

    return arm


die_with_parent = death_signal(signal.SIGKILL)


def wait_through_ctrl_c(proc: subprocess.Popen) -> int:
    """The exit code of a child that shares this terminal: a Ctrl-C reaches it too, and it ends its own
    run and says so, once. Raised here as well, it printed a second "interrupted by Ctrl-C", and
    subprocess.run killed the child a quarter second later, maybe before its run had ended."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue
