"""How a run's process meets signals: a SIGTERM or Ctrl-C ends the run KILLED, except once the run or the
process is already on its way out (then a second Ctrl-C is still obeyed). Torch- and MLflow-free: the CLI marks its own exit with `exiting` before it has
imported either.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devicebench.errors import Interrupted

_FINISHING = threading.Event()
_DEFAULT_EXCEPTHOOK: list[Any] = []
_RECEIVED: list[int] = []  # the signals that interrupted this run, whether or not their exception got out
_PATIENCE: list[int] = []  # a Ctrl-C while the run was ending: the next one is not ignored


def install_signal_handlers() -> None:
    """SIGTERM (a scheduler stopping us) raises in the main thread so the run can end KILLED; Ctrl-C
    raises KeyboardInterrupt, as Python's own handler does, which `run_context` ends KILLED too.

    Both are recorded (`received`) before they raise: an exception raised while the interpreter runs a
    finaliser or a weakref callback is printed as "Exception ignored in ..." and dropped, and a run
    interrupted so during its warm-up went on and ended FINISHED with figures 4-25x too low.
    A SIGTERM that arrives while the run is already ending is not raised again: the scheduler's grace
    period is best spent flushing the journal, and raising in the middle of `close()` would leave the
    run RUNNING with its last operations unsent.
    """

    def handler(signum: int, _frame: Any) -> None:
        if _FINISHING.is_set():
            if signum == signal.SIGINT and _PATIENCE:  # a second Ctrl-C: the user will not wait
                raise KeyboardInterrupt
            if signum == signal.SIGINT:
                _PATIENCE.append(signum)
                print("devicebench: still sending the run's last figures; Ctrl-C again leaves them spooled "
                      "(devicebench sync sends them)", file=sys.stderr)  # fmt: skip
            return
        _RECEIVED.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)

    _FINISHING.clear()  # a new run in this process: a signal interrupts it again
    _RECEIVED.clear()
    _PATIENCE.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `devicebench ... &` from a script
            signal.signal(signal.SIGINT, handler)
    if sys.excepthook is not _quiet_peer_gone:
        _DEFAULT_EXCEPTHOOK[:] = [sys.excepthook]
        sys.excepthook = _quiet_peer_gone


def received() -> int | None:
    """The first signal that interrupted the current run, or None: a run that completes after one had
    its exception swallowed on the way up, and is not a result."""
    return _RECEIVED[0] if _RECEIVED else None


def exiting() -> None:
    """The command is done and the process on its way out: a SIGTERM from now on (torchrun stopping a
    job's ranks after one failed, a scheduler's late stop) is not raised. Raised during interpreter
    shutdown, it printed a traceback after the command's one line."""
    _FINISHING.set()


def _quiet_peer_gone(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """Drop the traceback of a multiprocessing fd-sharing thread whose peer went away; report the rest.

    DataLoader workers hand batches to the main process through `multiprocessing.resource_sharer`.
    A SIGTERM that lands while the main process is fetching one ends that handshake half-way, and the
    worker's sharing thread printed a 19-line ConnectionResetError (through `sys.excepthook`) after our
    one line. The workers are forked from here and inherit this hook; the main process handles its own
    side of the error.
    """
    origin = tb.tb_frame.f_code.co_filename if tb is not None else ""
    if origin.endswith("multiprocessing/resource_sharer.py") and issubclass(
        exc_type, (ConnectionError, EOFError)
    ):
        return
    (_DEFAULT_EXCEPTHOOK or [sys.__excepthook__])[0](exc_type, exc, tb)


@contextmanager
def ending() -> Iterator[None]:
    """While a run is being ended (its journal flushed, its status sent): a SIGTERM is not raised."""
    _FINISHING.set()
    try:
        yield
    finally:
        _FINISHING.clear()
