"""Leave the process the quick way once a command has returned: what shutdown must do, then `os._exit`.

After a run has ended and printed its line, CPython's finalisation still tears down every module a
run imported (torch, MLflow, SQLAlchemy: ~2,000 of them) one dictionary at a time, a fifth of a tiny
cifar run's process (docs/measured.md).
Nothing of a result is in that work. What shutdown does that matters is done first, in its order:
non-daemon threads are joined, `atexit` handlers run (MLflow's, `logging.shutdown`), stdout and stderr
are flushed. The warm fork server's children leave the same way. Under a profiler or a debugger
(`python -m cProfile -m devicebench ...`), which writes its output after the program returns, the
process exits the usual way.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from typing import NoReturn

# How long the exit waits for what shutdown joins: a thread a user's model or factory started and never
# ends (not a daemon) held a FINISHED run's process, and the plan behind it, for good.
EXIT_WAIT_S = 30.0


def leave(code: object) -> NoReturn:
    """Exit with `code` (an int; anything else is 1, as `sys.exit` would print it and exit 1)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    exit_code = code if isinstance(code, int) else 1
    _bounded(exit_code, EXIT_WAIT_S)
    shut_down()
    os._exit(exit_code)


def _bounded(code: int, wait_s: float) -> None:
    """Exit with `code` anyway once `wait_s` has passed, saying which threads were still running."""

    def expire() -> None:
        time.sleep(wait_s)
        names = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
        line = f"devicebench: left {wait_s:.0f} s after the command ended; thread(s) still running: {names}\n"
        with contextlib.suppress(OSError):
            os.write(2, line.encode())
        os._exit(code)

    threading.Thread(target=expire, name="exit-bound", daemon=True).start()


def shut_down() -> None:
    """What interpreter shutdown does that matters, for a process about to `os._exit`: a forked child
    that skips it leaves MLflow's temporary model folders behind and its last lines unflushed."""
    with contextlib.suppress(BaseException):
        # what the interpreter runs first: threading's own exit hooks (a ThreadPoolExecutor's idle
        # workers are told to stop: joined without them, MLflow's download pool hung the exit), then
        # every non-daemon thread joined
        threading._shutdown()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()  # then what interpreter shutdown runs next
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
